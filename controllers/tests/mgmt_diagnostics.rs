//! The diagnostics endpoint on the real plane, as a CAPI user expects it: `--diagnostics-address` serves
//! /metrics over HTTPS and lets through only a bearer token the API server authenticates (TokenReview) and
//! allows `get` on /metrics (SubjectAccessReview, config/rbac/metrics_reader_role.yaml): no token 401, a
//! ServiceAccount without the reader role 403, with it 200. `--insecure-diagnostics` serves it as plain HTTP
//! without authentication, and then without the host pool series, which name the tenant's namespace and
//! KKCluster. The manager runs with config/rbac's manager role plus its metrics auth role.

mod common;

use std::time::Duration;

use anyhow::{Context, ensure};
use common::*;
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
    rbac::v1::ClusterRoleBinding,
};
use kube::{
    Api, Client,
    api::{DeleteParams, PostParams},
};
use serde_json::json;

/// The tests here count the API server's TokenReviews: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A ServiceAccount `name` in `ns` and a token for it.
async fn service_account_token(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}}))?,
    )
    .await?;
    let tr = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(sas
        .create_token_request(name, &PostParams::default(), &tr)
        .await?
        .status
        .context("TokenRequest returned no status")?
        .token)
}

/// GET `url` with `token` (if any): (status, body). The certificate is the manager's self-signed one, so it
/// is not verified (as a scraper of CAPI's diagnostics endpoint does).
async fn get(url: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut req = http.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    Ok((status, resp.text().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_diagnostics_endpoint_serves_metrics_only_to_a_token_allowed_to_get_them() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new("diag").await?;
    env.grant_metrics_auth().await?;
    let reader_token = service_account_token(&env.client, &env.ns, "scraper").await?;
    let stranger_token = service_account_token(&env.client, &env.ns, "stranger").await?;
    // The scraper gets config/rbac's metrics-reader ClusterRole (renamed for the test), the stranger nothing.
    let path = capkk_mgmt::repo_root().join("config/rbac/metrics_reader_role.yaml");
    let mut reader = capkk_mgmt::read_yaml_docs(&path)?.remove(0);
    reader["metadata"]["name"] = json!("capkk-test-metrics-reader");
    apply(&env.client, "", reader).await?;
    let binding = format!("{}-scraper", env.ns);
    apply(
        &env.client,
        "",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "capkk-test-metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": env.ns}]
        }),
    )
    .await?;
    // A tenant's KKCluster (no owner Cluster yet: nothing is probed), counted in the pool series.
    env.apply(kkcluster(
        &env.ns,
        "tenant-pool",
        &[("h1".into(), "198.18.0.1".into(), 22)],
        json!({}),
    ))
    .await?;
    let tenant_series = format!("capkk_hosts{{namespace=\"{}\",kkcluster=\"tenant-pool\"", env.ns);
    let result = async {
        let port = free_port()?;
        let mut mgr = env.manager(
            "secure",
            &[
                &format!("--diagnostics-address=127.0.0.1:{port}"),
                "--leader-elect=false",
            ],
        )?;
        let url = format!("https://127.0.0.1:{port}/metrics");
        // RBAC bindings reach the API server's authorizer shortly after they are created: wait for the first
        // allowed scrape, then every other answer is settled.
        let body = eventually(
            "the scraper's token reads /metrics, with the tenant's pool",
            Duration::from_secs(30),
            || async {
                Ok(match get(&url, Some(&reader_token)).await {
                    Ok((200, body)) if body.contains(&tenant_series) => Some(body),
                    _ => None,
                })
            },
        )
        .await?;
        ensure!(
            body.contains("# TYPE capkk_") && body.trim_end().ends_with("# EOF"),
            "/metrics is the OpenMetrics page: {body}"
        );
        let (status, _) = get(&url, None).await?;
        ensure!(status == 401, "no token: {status}, expected 401");
        let (status, _) = get(&url, Some("not-a-token")).await?;
        ensure!(
            status == 401,
            "a token the API server does not know: {status}, expected 401"
        );
        let (status, body) = get(&url, Some(&stranger_token)).await?;
        ensure!(
            status == 403,
            "a ServiceAccount without the metrics-reader role: {status} {body}, expected 403"
        );
        let (status, _) = get(
            &format!("https://127.0.0.1:{port}/debug/pprof/"),
            Some(&reader_token),
        )
        .await?;
        ensure!(status == 404, "only /metrics is served: {status}");
        let plain = http_get(port, "/metrics").unwrap_or_default();
        ensure!(
            !plain.contains("# TYPE capkk_"),
            "plain HTTP on the diagnostics port gets no metrics: {plain}"
        );
        ensure!(mgr.running(), "the manager still runs:\n{}", mgr.logs());
        mgr.terminate();
        let logs = mgr.logs();
        for (what, token) in [("scraper", &reader_token), ("stranger", &stranger_token)] {
            ensure!(
                !logs.contains(token.as_str()),
                "the {what}'s bearer token is in the manager's log"
            );
        }
        ensure!(
            logs.contains("diagnostics endpoint listening"),
            "the manager says it serves diagnostics:\n{logs}"
        );

        // The opt-out: the same flag with --insecure-diagnostics is plain HTTP without authentication.
        let port = free_port()?;
        let _insecure = env.manager(
            "insecure",
            &[
                &format!("--diagnostics-address=127.0.0.1:{port}"),
                "--insecure-diagnostics",
                "--leader-elect=false",
            ],
        )?;
        let plain = eventually(
            "plain /metrics with --insecure-diagnostics, once the controllers count reconciles",
            Duration::from_secs(30),
            || async {
                Ok(http_get(port, "/metrics")
                    .ok()
                    .filter(|r| r.starts_with("HTTP/1.1 200") && r.contains("capkk_reconcile_total{")))
            },
        )
        .await?;
        ensure!(plain.contains("# TYPE capkk_"), "{plain}");
        ensure!(
            !plain.contains("capkk_hosts") && !plain.contains(env.ns.as_str()),
            "plain /metrics names no tenant (no pool series): {plain}"
        );
        Ok(())
    }
    .await;
    let _ = Api::<ClusterRoleBinding>::all(env.client.clone())
        .delete(&binding, &DeleteParams::default())
        .await;
    result
}

/// The TokenReviews the API server has answered since it started (its `apiserver_request_total`).
async fn token_reviews(client: &Client) -> anyhow::Result<f64> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains(r#"resource="tokenreviews""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_diagnostics_endpoint_reviews_a_repeated_bad_token_once_no_token_never_and_a_flood_of_them_at_its_rate()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new("diagrate").await?;
    env.grant_metrics_auth().await?;
    let port = free_port()?;
    let mut mgr = env.manager(
        "secure",
        &[
            &format!("--diagnostics-address=127.0.0.1:{port}"),
            "--leader-elect=false",
        ],
    )?;
    let url = format!("https://127.0.0.1:{port}/metrics");
    eventually(
        "the diagnostics endpoint answers",
        Duration::from_secs(30),
        || async { Ok(get(&url, None).await.ok().filter(|(s, _)| *s == 401)) },
    )
    .await?;

    // No bearer token: refused without a review.
    let before = token_reviews(&env.client).await?;
    for _ in 0..20 {
        let (status, _) = get(&url, None).await?;
        ensure!(status == 401, "no token: {status}, expected 401");
    }
    let made = token_reviews(&env.client).await? - before;
    ensure!(
        made == 0.0,
        "20 requests without a token made {made} TokenReviews"
    );

    // One made-up token, again and again within the refusal's TTL (5 s): reviewed once.
    let before = token_reviews(&env.client).await?;
    let start = std::time::Instant::now();
    for _ in 0..20 {
        let (status, _) = get(&url, Some("made-up-token")).await?;
        ensure!(status == 401, "a made-up token: {status}, expected 401");
    }
    let made = token_reviews(&env.client).await? - before;
    // A slow machine may take longer than the TTL: one review more per TTL it took.
    let bound = 1.0 + (start.elapsed().as_secs_f64() / 5.0).floor();
    ensure!(
        made <= bound,
        "20 requests with one made-up token made {made} TokenReviews, expected at most {bound}"
    );

    // A flood of distinct made-up tokens, 10 at a time: reviews start at most at the endpoint's rate (a burst of
    // 10, then 5 a second), the others are answered 429 without one.
    let before = token_reviews(&env.client).await?;
    let start = std::time::Instant::now();
    let mut statuses = Vec::new();
    for batch in 0..10 {
        let answers = futures::future::join_all((0..10).map(|i| {
            let url = url.clone();
            async move { get(&url, Some(&format!("flood-{batch}-{i}"))).await }
        }))
        .await;
        for a in answers {
            statuses.push(a?.0);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let made = token_reviews(&env.client).await? - before;
    let bound = 10.0 + 5.0 * elapsed + 1.0;
    ensure!(
        made <= bound,
        "100 made-up tokens made {made} TokenReviews in {elapsed:.1} s, expected at most {bound:.0}"
    );
    let limited = statuses.iter().filter(|s| **s == 429).count();
    let refused = statuses.iter().filter(|s| **s == 401).count();
    ensure!(
        limited > 0 && limited + refused == statuses.len(),
        "the flood's answers: {refused} × 401, {limited} × 429, others {:?}",
        statuses
            .iter()
            .filter(|s| **s != 401 && **s != 429)
            .collect::<Vec<_>>()
    );
    ensure!(mgr.running(), "the manager still runs:\n{}", mgr.logs());
    mgr.terminate();
    ensure!(
        !mgr.logs().contains("flood-0-0") && !mgr.logs().contains("made-up-token"),
        "a bearer token is in the manager's log"
    );
    Ok(())
}

/// `value` with clusterctl's `${VAR:=default}` variables set to their defaults (what `clusterctl init` installs
/// when the user sets none); a variable without a default is left as it is.
fn with_clusterctl_defaults(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let var = &rest[start..];
        match (var.find('}'), var.find(":=")) {
            (Some(end), Some(eq)) if eq < end => {
                out.push_str(&var[eq + 2..end]);
                rest = &var[end + 1..];
            }
            _ => {
                out.push_str("${");
                rest = &var[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_manifests_serve_metrics_over_authenticated_https_on_8443_by_default()
-> anyhow::Result<()> {
    let mut checked = 0;
    for variant in ["default", "namespaced", "inplace"] {
        let docs = render_config(variant).await?;
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let container = &d["spec"]["template"]["spec"]["containers"][0];
            let args: Vec<String> = container["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(with_clusterctl_defaults))
                .collect();
            let what = format!("config/{variant}'s {}", name(d));
            // The manager keeps the last of a repeated flag.
            let last = |flag: &str| {
                args.iter()
                    .rev()
                    .find_map(|a| a.strip_prefix(&format!("{flag}=")).map(str::to_owned))
            };
            ensure!(
                last("--diagnostics-address").as_deref() == Some(":8443"),
                "{what} serves the diagnostics endpoint on :8443: {args:?}"
            );
            ensure!(
                !matches!(last("--insecure-diagnostics").as_deref(), Some("true" | "")),
                "{what} serves /metrics as plain HTTP (--insecure-diagnostics): {args:?}"
            );
            ensure!(
                !args.iter().any(|a| a == "--insecure-diagnostics"),
                "{what} serves /metrics as plain HTTP (--insecure-diagnostics): {args:?}"
            );
            ensure!(
                !args.iter().any(|a| a.starts_with("--metrics-bind-addr")),
                "{what} serves plain /metrics (--metrics-bind-address wins over diagnostics): {args:?}"
            );
            let ports: Vec<(String, i64)> = container["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or_default().to_owned(),
                        p["containerPort"].as_i64().unwrap_or_default(),
                    )
                })
                .collect();
            ensure!(
                ports.contains(&("metrics".to_owned(), 8443)) && !ports.iter().any(|(_, p)| *p == 8080),
                "{what} exposes the diagnostics port 8443 as `metrics` and no 8080: {ports:?}"
            );
            checked += 1;
        }
    }
    ensure!(checked == 3, "one Deployment per variant, checked {checked}");
    Ok(())
}

#[test]
fn clusterctl_defaults_replace_each_variable_with_its_default() {
    assert_eq!(
        with_clusterctl_defaults("--diagnostics-address=${CAPKK_DIAGNOSTICS_ADDRESS:=:8443}"),
        "--diagnostics-address=:8443"
    );
    assert_eq!(
        with_clusterctl_defaults("--namespace=${CAPKK_WATCH_NAMESPACE}"),
        "--namespace=${CAPKK_WATCH_NAMESPACE}"
    );
    assert_eq!(with_clusterctl_defaults("a${X:=1}b${Y:=}c"), "a1bc");
}

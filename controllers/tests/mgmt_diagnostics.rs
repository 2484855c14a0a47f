//! The diagnostics endpoint on the real plane, as a CAPI user expects it: `--diagnostics-address` serves
//! /metrics over HTTPS and lets through only a bearer token the API server authenticates (TokenReview) and
//! allows `get` on /metrics (SubjectAccessReview, config/rbac/metrics_reader_role.yaml): no token 401, a
//! ServiceAccount without the reader role 403, with it 200. `--insecure-diagnostics` serves it as plain HTTP
//! without authentication. The manager runs with config/rbac's manager role plus its metrics auth role.

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
            "the scraper's token reads /metrics",
            Duration::from_secs(30),
            || async {
                Ok(match get(&url, Some(&reader_token)).await {
                    Ok((200, body)) => Some(body),
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
            "plain /metrics with --insecure-diagnostics",
            Duration::from_secs(30),
            || async {
                Ok(http_get(port, "/metrics")
                    .ok()
                    .filter(|r| r.starts_with("HTTP/1.1 200")))
            },
        )
        .await?;
        ensure!(plain.contains("# TYPE capkk_"), "{plain}");
        Ok(())
    }
    .await;
    let _ = Api::<ClusterRoleBinding>::all(env.client.clone())
        .delete(&binding, &DeleteParams::default())
        .await;
    result
}

//! One host is one host across namespaces and managers. The same sandbox host (a real sshd) is listed by its
//! IP address in one namespace and by a DNS name in another (resolved by the managers' `--ssh-host-alias`, so
//! nothing touches `/etc/hosts`):
//! - the arbitration itself, raced 1,000 times with real API server writes by two clients with the
//!   managers' RBAC (config/rbac), one per namespace: exactly one holder per race, the other refused naming
//!   the holder's namespace and KKCluster;
//! - end to end through the real reconcilers of two manager processes (one per namespace): one KKInstance
//!   works on the host, the other is refused with `HostInUse` (condition and event naming the holder) and
//!   runs nothing on it.

mod common;

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context as _, anyhow, ensure};
use capkk_api::{KKInstance, KKInstanceSpec, consts::HOST_CLAIMS_ANNOTATION};
use capkk_controllers::host_claims::{self, Holder, HostIdentity, Outcome};
use capkk_ssh::{Auth, HostTarget, PoolConfig, SshPool};
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, api::PostParams, config::Kubeconfig};
use serde_json::{Value, json};

const RACES: usize = 1000;
/// The name the second namespace lists the host by (an alias of the managers, not in any resolver).
const DNS_NAME: &str = "node.host-identity.capkk.test";

/// A client as a manager runs it: the test ServiceAccount's kubeconfig (config/rbac's permissions).
async fn manager_client(env: &TestEnv) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(env.manager_kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A KKInstance to hold claims (a claim's holder must exist, or the claim is taken over as abandoned).
async fn holder(env: &TestEnv, kkcluster: &str, address: &str) -> anyhow::Result<Holder> {
    let mut i = KKInstance::new(
        &format!("{kkcluster}.node"),
        KKInstanceSpec {
            name: "node".into(),
            address: address.into(),
            cluster_name: Some(kkcluster.into()),
            ..Default::default()
        },
    );
    i.metadata.namespace = Some(env.ns.clone());
    let created = env.api::<KKInstance>().create(&PostParams::default(), &i).await?;
    Ok(Holder::of(&created))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_host_listed_by_ip_and_by_name_in_two_namespaces_has_one_holder_in_every_race()
-> anyhow::Result<()> {
    if capkk_sandbox::skip_unless_supported() {
        return Ok(());
    }
    let a = TestEnv::new("hostid-a").await?;
    let b = TestEnv::new("hostid-b").await?;
    let sb = capkk_sandbox::Sandbox::shared(&capkk_sandbox::SandboxConfig::new("hostid", 1))?;
    let host = &sb.hosts()[0];
    host.link_up()?;
    let ip: std::net::IpAddr = host.address().parse()?;

    // What each side learns from the host itself, as the KKInstance's connection does: by IP, and by name.
    let key = Auth::key_file(&sb.credentials().ed25519_key);
    let pool = SshPool::new(PoolConfig {
        connect_timeout: Duration::from_secs(10),
        host_aliases: BTreeMap::from([(DNS_NAME.to_owned(), ip)]),
        ..Default::default()
    });
    let by_ip = pool
        .observe(&HostTarget::new(host.address(), "root", key.clone()))
        .await?;
    let by_name = pool.observe(&HostTarget::new(DNS_NAME, "root", key)).await?;
    let id_a = HostIdentity::new(&by_ip.host_key_fingerprint, host.address(), by_ip.peer, None);
    let id_b = HostIdentity::new(&by_name.host_key_fingerprint, DNS_NAME, by_name.peer, None);
    ensure!(id_a == id_b, "one host, one identity: {id_a:?} vs {id_b:?}");
    ensure!(id_a.host_key == host.fingerprint(), "the host key sshd serves");

    let holder_a = holder(&a, "a", host.address()).await?;
    let holder_b = holder(&b, "b", DNS_NAME).await?;
    // Two managers: separate clients (connections), each with the managers' permissions only.
    let (ca, cb) = (manager_client(&a).await?, manager_client(&b).await?);
    let lease_ns = HOST_CLAIM_NAMESPACE;
    // Claims left by an interrupted earlier run of this test are taken over (their holders are gone).
    let mut winners_per_race = BTreeMap::<usize, usize>::new();
    let (mut won_a, mut won_b) = (0, 0);
    for race in 0..RACES {
        let (ra, rb) = tokio::join!(
            host_claims::claim(&ca, lease_ns, &id_a, &holder_a),
            host_claims::claim(&cb, lease_ns, &id_b, &holder_b),
        );
        let (ra, rb) = (ra?, rb?);
        let winners = [&ra, &rb]
            .iter()
            .filter(|o| matches!(o, Outcome::Held(_)))
            .count();
        *winners_per_race.entry(winners).or_default() += 1;
        let (won, lost, held, loser_sees) = match (&ra, &rb) {
            (Outcome::Held(n), Outcome::Refused { holder, .. }) => {
                won_a += 1;
                (&holder_a, &rb, n, holder)
            }
            (Outcome::Refused { holder, .. }, Outcome::Held(n)) => {
                won_b += 1;
                (&holder_b, &ra, n, holder)
            }
            _ => return Err(anyhow!("race {race}: {ra:?} and {rb:?}")),
        };
        ensure!(
            loser_sees == won,
            "race {race}: the refusal names the holder: {lost:?}"
        );
        let message = lost.refusal().unwrap_or_default();
        ensure!(
            message.contains(&format!("KKCluster {}/{}", won.namespace, won.kkcluster)),
            "race {race}: {message}"
        );
        let client = if won == &holder_a { &ca } else { &cb };
        host_claims::release(client, lease_ns, held, &won.uid).await?;
    }
    println!(
        "cross-namespace claim races: {RACES}, winners per race: {} (namespace {} won {won_a}, namespace {} won {won_b})",
        winners_per_race
            .iter()
            .map(|(w, n)| format!("{w} in {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        a.ns,
        b.ns
    );
    ensure!(
        winners_per_race == BTreeMap::from([(1, RACES)]),
        "winners per race: {winners_per_race:?}"
    );
    a.finish().await;
    b.finish().await;
    Ok(())
}

/// `(reason, message)` of the first condition of a KKInstance's status with `reason`.
fn refusal(inst: &Value) -> Option<(String, String)> {
    inst["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["reason"] == "HostInUse")
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_managers_claiming_one_host_from_two_namespaces_work_on_it_once() -> anyhow::Result<()> {
    if capkk_sandbox::skip_unless_supported() {
        return Ok(());
    }
    let a = TestEnv::new("hostid-e2e-a").await?;
    let b = TestEnv::new("hostid-e2e-b").await?;
    let hosts = a.hosts("hostid-e2e", 1).await?;
    let host = &hosts.sb.hosts()[0];
    b.secret("ssh-auth", &[("privateKey", &hosts.key)]).await?;
    for env in [&a, &b] {
        env.bootstrap_data("data", "#cloud-config\n").await?;
    }
    let spec = json!({"component": hosts.component});
    a.cluster("a", &[("node".into(), host.address().into(), 22)], spec.clone())
        .await?;
    b.cluster("b", &[("node".into(), DNS_NAME.into(), 22)], spec)
        .await?;
    let alias = format!("--ssh-host-alias={DNS_NAME}={}", host.address());
    let args = ["--ssh-connect-timeout=10s", alias.as_str()];
    let mut ma = a.manager("manager-a", &args)?;
    let mut mb = b.manager("manager-b", &args)?;
    a.kkcluster_provisioned("a").await?;
    b.kkcluster_provisioned("b").await?;
    // Both claims at once: each namespace's claim is its own KKInstance, the host is one.
    let (ra, rb) = tokio::join!(
        a.machine("a", "m", "worker", Some("data")),
        b.machine("b", "m", "worker", Some("data"))
    );
    ra?;
    rb?;
    let ia = a.claimed_instance("m").await?;
    let ib = b.claimed_instance("m").await?;

    let (winner, loser, loser_env, winner_env) = eventually(
        "one KKInstance holds the host and the other is refused",
        Duration::from_secs(180),
        || async {
            let x = a.get(INFRA_V, "KKInstance", &ia).await?.unwrap_or_default();
            let y = b.get(INFRA_V, "KKInstance", &ib).await?.unwrap_or_default();
            let holds = |i: &Value| i["metadata"]["annotations"][HOST_CLAIMS_ANNOTATION].is_string();
            Ok(match (refusal(&x), refusal(&y)) {
                (None, Some(_)) if holds(&x) => Some((x, y, &b, &a)),
                (Some(_), None) if holds(&y) => Some((y, x, &a, &b)),
                _ => None,
            })
        },
    )
    .await?;
    let (_, message) = refusal(&loser).context("refused")?;
    ensure!(
        message.contains(&format!(
            "KKCluster {}/{}",
            winner_env.ns,
            name_of_kkcluster(&winner)
        )),
        "the refusal names the holder's namespace and KKCluster: {message}"
    );
    let annotations = &loser["metadata"]["annotations"];
    ensure!(
        annotations["kkinstance.infrastructure.cluster.x-k8s.io/touched"].is_null()
            && annotations["kkinstance.infrastructure.cluster.x-k8s.io/completed-phases"].is_null()
            && annotations[HOST_CLAIMS_ANNOTATION].is_null(),
        "the refused claim ran nothing and holds nothing: {annotations}"
    );
    let events = eventually("the refusal event", Duration::from_secs(30), || async {
        let evs = loser_env.list("events.k8s.io/v1", "Event").await?;
        Ok(evs
            .into_iter()
            .find(|e| e["reason"] == "HostInUse" && e["regarding"]["name"] == loser["metadata"]["name"]))
    })
    .await?;
    ensure!(
        events["note"]
            .as_str()
            .unwrap_or_default()
            .contains(&winner_env.ns),
        "the event names the holder's namespace: {events}"
    );
    // The Leases the API server arbitrated: held by the winner, keyed by the host key sshd serves.
    let leases: Api<Lease> = Api::namespaced(a.client.clone(), HOST_CLAIM_NAMESPACE);
    let key_lease = leases
        .get(&host_claims::lease_name("key", host.fingerprint()))
        .await?;
    ensure!(
        key_lease.spec.and_then(|s| s.holder_identity)
            == Some(format!("{}/{}", winner_env.ns, name(&winner))),
        "the host-key Lease names the winner"
    );
    println!(
        "cross-namespace claim race through the reconcilers: 1, winners: 1 ({}/{}); refused: {}/{}",
        winner_env.ns,
        name(&winner),
        loser_env.ns,
        name(&loser)
    );
    let logs = vec![ma.logs(), mb.logs()];
    ma.terminate();
    mb.terminate();
    a.assert_no_canary(&[&hosts.key_canary()], &logs).await?;
    a.finish().await;
    b.finish().await;
    Ok(())
}

fn name_of_kkcluster(inst: &Value) -> String {
    inst["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

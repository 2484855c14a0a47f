//! Manager SIGKILL mid-provisioning: two managers run with leader election on a Lease; the leader is killed
//! (SIGKILL, no lease release) while the bootstrap data's slow command runs on the host. The standby takes
//! the lease once it expires and finishes without repeating completed work: the phases recorded in the
//! KKInstance's annotation are skipped, and the provisioning journal on the host keeps the bootstrap
//! commands from running twice. And how a candidate judges that a lease expired: by its own clock.

mod common;

use std::time::Duration;

use anyhow::ensure;
use common::{sandbox::*, *};
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::{SignedDuration, Timestamp},
};
use kube::{Api, api::PostParams};
use serde_json::json;

const RUNS: &str = "/root/capkk-runs";

fn bootstrap_data() -> String {
    format!(
        "#cloud-config\nruncmd:\n- echo one >> {RUNS}\n- sleep 25\n- echo two >> {RUNS}\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkilled_leader_is_replaced_and_work_resumes_without_repeats() -> anyhow::Result<()> {
    let Some((env, sandbox)) = TestEnv::with_hosts("resume", "ctl-resume", 1).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let host = sandbox.sb.hosts().remove(0);
    let key = sandbox.key.clone();
    env.bootstrap_data("bootstrap-data", &bootstrap_data()).await?;
    env.cluster("r", &sandbox.inventory(), json!({"component": sandbox.component}))
        .await?;
    env.machine("r", "m", "worker", Some("bootstrap-data")).await?;
    let inst_name = format!("r.{}", host.info.name);

    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        &ns,
        // Short enough for the standby to take over soon after the kill; the renew deadline long enough that
        // a loaded CI machine's slow Lease request (over 6 s once, beside the real-node lane) does not make the
        // new leader give up and leave the test without a manager.
        "--lease-duration=20s",
        "--renew-deadline=15s",
        "--retry-period=1s",
        "--ssh-connect-timeout=5s",
    ];
    let mut a = env.manager("a", &args)?;
    let mut b = env.manager("b", &args)?;

    // The slow command is running on the host: kill whoever leads.
    eventually(
        "the first command ran on the host",
        Duration::from_secs(180),
        || async {
            Ok(inside(&host, &format!("cat {RUNS} 2>/dev/null"))
                .contains("one")
                .then_some(()))
        },
    )
    .await?;
    let leases: Api<Lease> = env.api();
    let holder = leases
        .get("capkk-manager-leader")
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let (a_pid, b_pid) = (a.pid().unwrap_or(0), b.pid().unwrap_or(0));
    let (leader, standby, standby_pid) = if holder.ends_with(&format!("_{a_pid}")) {
        (&mut a, &mut b, b_pid)
    } else {
        ensure!(
            holder.ends_with(&format!("_{b_pid}")),
            "lease holder {holder} is neither manager"
        );
        (&mut b, &mut a, a_pid)
    };
    ensure!(
        !standby.logs().contains("Claimed a host") && standby.logs().contains("waiting for leadership"),
        "the standby did no work while not leading"
    );
    // Host work's annotations go out in the background (kkinstance/writes.rs): the completed-phases
    // annotation may land a moment after the host ran the next phase's first command, so wait for it while
    // the slow command still runs (a loaded CI machine took more than one read).
    let want = "bootstrap,binary,containermanager,repository,loadbalancer";
    let inst_before = eventually(
        "the phases before provisioning recorded",
        Duration::from_secs(12),
        || async {
            let inst = env
                .get(INFRA_V, "KKInstance", &inst_name)
                .await?
                .unwrap_or_default();
            let done = inst["metadata"]["annotations"]
                ["kkinstance.infrastructure.cluster.x-k8s.io/completed-phases"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            Ok((done == want).then_some(inst))
        },
    )
    .await?;
    ensure!(
        !inside(&host, &format!("cat {RUNS}")).contains("two"),
        "the leader is killed while the slow command runs (raise its sleep if this fails)"
    );
    ensure!(
        inst_before["metadata"]["annotations"]["clusterctl.cluster.x-k8s.io/block-move"] == "true",
        "block-move is set while host work runs"
    );
    let kernel_log_before = inside(&host, "cat /var/log/capkk-fake-kernel.log 2>/dev/null");
    leader.kill();
    let killed_logs = leader.logs();

    let km = eventually(
        "KKMachine provisioned by the new leader",
        Duration::from_secs(180),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "m").await?.unwrap_or_default();
            Ok((k["status"]["initialization"]["provisioned"] == true).then_some(k))
        },
    )
    .await?;
    ensure!(km["spec"]["instanceID"] == inst_name.as_str(), "same host");
    let new_holder = leases
        .get("capkk-manager-leader")
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    ensure!(
        new_holder.ends_with(&format!("_{standby_pid}")),
        "the standby leads now: {new_holder}"
    );

    // Nothing ran twice.
    let runs = inside(&host, &format!("cat {RUNS}"));
    ensure!(runs == "one\ntwo\n", "each bootstrap command ran once: {runs:?}");
    let kernel_log_after = inside(&host, "cat /var/log/capkk-fake-kernel.log 2>/dev/null");
    ensure!(
        kernel_log_after == kernel_log_before,
        "bootstrap did not run again"
    );
    let standby_logs = standby.logs();
    ensure!(
        !standby_logs.contains("step 1/6: bootstrap"),
        "the new leader skipped the completed phases"
    );
    ensure!(
        standby_logs.contains("step 6/6: provisioning"),
        "the new leader resumed provisioning"
    );
    ensure!(
        killed_logs.contains("step 1/6: bootstrap"),
        "the killed leader had done the early phases"
    );
    standby.terminate();
    env.assert_no_canary(&[key.lines().nth(2).unwrap_or("-")], &[killed_logs, standby_logs])
        .await?;
    env.finish().await;
    Ok(())
}

/// The Lease as another replica would have written it: `holder`, renewed at `renewed` by that replica's own
/// wall clock.
fn foreign_lease(holder: &str, renewed: Timestamp) -> Lease {
    Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(LEASE.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(5),
            acquire_time: Some(MicroTime(renewed)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

/// `holder`'s write of the Lease, over whatever is there now (as that replica's renewal would be).
async fn write_foreign(leases: &Api<Lease>, holder: &str, renewed: Timestamp) -> anyhow::Result<()> {
    let mut lease = foreign_lease(holder, renewed);
    match leases.get_opt(LEASE).await? {
        Some(current) => {
            lease.metadata.resource_version = current.metadata.resource_version;
            leases.replace(LEASE, &PostParams::default(), &lease).await?;
        }
        None => {
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

async fn holder(leases: &Api<Lease>) -> anyhow::Result<String> {
    Ok(leases
        .get(LEASE)
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}

const LEASE: &str = "capkk-manager-leader";
const HOUR: SignedDuration = SignedDuration::from_secs(3600);

/// A candidate judges expiry by its own clock, as client-go does, never by the holder's `renewTime` (another
/// replica's wall clock): a holder whose clock runs an hour ahead and has stopped renewing is taken over
/// after the lease duration; a holder whose clock runs an hour behind and keeps renewing is never overtaken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_is_judged_by_the_candidates_own_clock() -> anyhow::Result<()> {
    let env = TestEnv::new("leaderclock").await?;
    let ns = env.ns.clone();
    let leases: Api<Lease> = env.api();
    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        &ns,
        "--lease-duration=5s",
        "--renew-deadline=4s",
        "--retry-period=1s",
    ];

    // Ahead: renewTime an hour in the future, never renewed again.
    write_foreign(&leases, "clock-ahead", Timestamp::now().checked_add(HOUR)?).await?;
    let mut ahead = env.manager("ahead", &args)?;
    let pid = ahead.pid().unwrap_or(0);
    let t0 = std::time::Instant::now();
    eventually(
        "the manager takes over the silent lease dated an hour ahead",
        Duration::from_secs(60),
        || async { Ok(holder(&leases).await?.ends_with(&format!("_{pid}")).then_some(())) },
    )
    .await?;
    let took = t0.elapsed();
    ensure!(
        took >= Duration::from_secs(5),
        "not before a full lease duration of its own clock ({took:?})"
    );
    ahead.kill();

    // Behind: renewTime an hour in the past, renewed every second (the date moves on, still an hour old).
    let behind_since = Timestamp::now().checked_sub(HOUR)?;
    write_foreign(&leases, "clock-behind", behind_since).await?;
    let mut behind = env.manager("behind", &args)?;
    let pid = behind.pid().unwrap_or(0);
    eventually(
        "the second manager is a candidate",
        Duration::from_secs(60),
        || async { Ok(behind.logs().contains("waiting for leadership").then_some(())) },
    )
    .await?;
    for k in 1..=15 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let h = holder(&leases).await?;
        ensure!(
            h == "clock-behind",
            "a renewing holder keeps the lease however old its renewTime looks (after {k} s: {h})"
        );
        write_foreign(
            &leases,
            "clock-behind",
            behind_since.checked_add(SignedDuration::from_secs(k))?,
        )
        .await?;
    }
    // It stops renewing: taken over after the lease duration.
    eventually(
        "the manager takes over once the renewals stop",
        Duration::from_secs(60),
        || async { Ok(holder(&leases).await?.ends_with(&format!("_{pid}")).then_some(())) },
    )
    .await?;
    behind.terminate();
    env.finish().await;
    Ok(())
}

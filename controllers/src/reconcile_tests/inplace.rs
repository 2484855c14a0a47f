//! In-place upgrades (`UpdateMachine`) as the hook answers them, with the fake host services: how long an
//! upgrade may hold its host slot, and that it stops with the manager's other host work.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};

use super::*;
use crate::{
    context::Settings,
    fixtures::{Caches, FakeServices, Served, TestContext},
    inplace::{
        decide::{PENDING_HOOKS_ANNOTATION, UPDATE_IN_PROGRESS_ANNOTATION, UPDATE_MACHINE_HOOK},
        update::{IN_PLACE_UPGRADE_FAILED, RETRY_AFTER, update_machine},
    },
};

/// Machine `m` pending CAPI's in-place update to v1.34.2 (the marker and the pending hook).
fn pending_machine() -> Machine {
    let mut m = machine();
    m.spec.version = Some("v1.34.2".into());
    m.metadata.annotations = Some(
        [
            (UPDATE_IN_PROGRESS_ANNOTATION.to_owned(), String::new()),
            (
                PENDING_HOOKS_ANNOTATION.to_owned(),
                UPDATE_MACHINE_HOOK.to_owned(),
            ),
        ]
        .into(),
    );
    m
}

/// The manager's context, its fake host services, and the API server's record.
struct World {
    ctx: Arc<Context>,
    services: Arc<FakeServices>,
    served: Served,
    _caches: Caches,
}

/// A worker on host node1 running v1.34.1, whose Machine is pending the update to v1.34.2; the API server
/// answers the Machine's read, and every write as it would.
fn world(settings: Settings) -> World {
    let mut t = TestContext::with_settings(settings);
    t.caches.capi_cluster(capi_cluster());
    t.caches.capi_machine(pending_machine());
    t.caches.cluster(kkcluster(&[("node1", "10.0.0.1")]));
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node1".into());
    let mut inst = claim(&km, "node1", "10.0.0.1", &[]);
    inst.spec.kubernetes_version = Some("v1.34.1".into());
    t.caches.instance(inst);
    t.caches.machine(km);
    let m = serde_json::to_value(pending_machine()).expect("serializes");
    let TestContext {
        ctx,
        api,
        caches,
        services,
        ..
    } = t;
    World {
        ctx,
        services,
        served: api.serve(move |call| (call.path == path("machines", "m")).then(|| m.clone())),
        _caches: caches,
    }
}

/// CAPI's `UpdateMachine` request for Machine `m` to v1.34.2.
fn request() -> Value {
    json!({"desired": {"machine": {
        "metadata": {"namespace": NS, "name": "m"},
        "spec": {"version": "v1.34.2"},
    }}})
}

/// Waits (in the test's time) until `cond` holds, for at most an hour; fails naming `what` otherwise.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..3600 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("{what}");
}

/// Issue 43 finding 5: `--max-host-phase-duration` bounds an in-place upgrade as it bounds a KKInstance's
/// phases: an upgrade whose host command hangs is cut there, CAPI's next call is answered with the failure
/// (its Machine's condition), and the KKInstance gets a warning event saying so.
#[tokio::test(start_paused = true)]
async fn an_in_place_upgrade_whose_host_command_hangs_is_cut_at_the_phase_bound_and_answered_as_failed() {
    let t = world(Settings {
        max_host_phase_duration: Duration::from_secs(60),
        ..Default::default()
    });
    t.services.hang_upgrades();
    let started = update_machine(t.ctx.clone(), &request()).await;
    assert_eq!(
        (started["status"].as_str(), started["retryAfterSeconds"].as_i64()),
        (Some("Success"), Some(i64::from(RETRY_AFTER))),
        "{started}"
    );
    let services = t.services.clone();
    eventually("the upgrade did not start on the host", || {
        services.upgrades_running() == 1
    })
    .await;
    eventually(
        "the hung upgrade was not cut within an hour at its 60 s bound",
        || services.upgrades_running() == 0,
    )
    .await;
    let answered = update_machine(t.ctx.clone(), &request()).await;
    assert_eq!(answered["status"], "Failure", "{answered}");
    assert_eq!(
        answered["message"],
        "host node1: the in-place upgrade to v1.34.2 ran longer than 60 s (--max-host-phase-duration)"
    );
    let requests = t.served.finish();
    assert!(
        requests.iter().any(|(m, p, b)| m == "POST"
            && p.ends_with("/events")
            && b["reason"] == IN_PLACE_UPGRADE_FAILED
            && b["type"] == "Warning"
            && b["note"]
                .as_str()
                .is_some_and(|n| n.contains("(--max-host-phase-duration)"))),
        "a warning event on the KKInstance: {requests:#?}"
    );
    assert_eq!(t.ctx.tasks.permits.available(), 10, "its slot is free again");
}

/// Issue 43 finding 5: a manager that loses its leadership aborts its in-place upgrades with its other host
/// work (only the leader works on hosts), frees their slots and starts no other.
#[tokio::test(start_paused = true)]
async fn an_in_place_upgrade_stops_when_the_manager_loses_its_leadership() {
    let t = world(Settings::default());
    t.services.hang_upgrades();
    update_machine(t.ctx.clone(), &request()).await;
    let services = t.services.clone();
    eventually("the upgrade did not start on the host", || {
        services.upgrades_running() == 1
    })
    .await;
    assert_eq!(t.ctx.tasks.permits.available(), 9);

    // What the manager does when its leadership is lost.
    t.ctx.abort_host_work();
    eventually(
        "the upgrade still runs on the host after the leadership was lost",
        || services.upgrades_running() == 0,
    )
    .await;
    assert_eq!(t.ctx.tasks.permits.available(), 10, "its slot is free again");
    let after = update_machine(t.ctx.clone(), &request()).await;
    assert_eq!(
        after["retryAfterSeconds"].as_i64(),
        Some(i64::from(RETRY_AFTER)),
        "no new upgrade starts; CAPI asks again (the next leader): {after}"
    );
    assert_eq!(services.upgrades_running(), 0);
    t.served.finish();
}

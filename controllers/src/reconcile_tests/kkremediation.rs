//! KKRemediation reconciles: which tier an attempt runs on the Machine's host, what the status and the events
//! say about it, and how the Machine is handed to its owner when remediation gives up.

use std::{sync::Arc, time::Duration};

use capkk_api::{
    KKRemediation, KKRemediationSpec, KKRemediationStatus, RemediationPhase, RemediationStrategy,
    RemediationTier,
    consts::{KKREMEDIATION_FINALIZER, REMEDIATION_FIELD_MANAGER, conditions as cond, reasons},
};
use futures::{StreamExt, channel::mpsc::UnboundedReceiver};
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::{SignedDuration, Timestamp},
};
use kube::runtime::{controller::Action, reflector::ObjectRef};
use serde_json::Value;

use super::*;
use crate::{
    fixtures::TestContext,
    reconcile::{reconcile, requeue},
};

/// A test context whose caches hold Cluster `c`, Machine `m`, KKCluster `c` (host node1), KKMachine `m` and,
/// when `claimed`, the KKInstance `c.node1` it recorded.
fn world(claimed: bool) -> TestContext {
    world_with(crate::context::Settings::default(), claimed)
}

/// [`world`] with the manager's `settings`.
fn world_with(settings: crate::context::Settings, claimed: bool) -> TestContext {
    let mut t = TestContext::with_settings(settings);
    t.caches.capi_cluster(capi_cluster());
    t.caches.capi_machine(machine());
    t.caches.cluster(kkcluster(&[("node1", "10.0.0.1")]));
    let mut km = kkmachine();
    if claimed {
        km.spec.instance_id = Some("c.node1".into());
        t.caches.instance(claim(&km, "node1", "10.0.0.1", &[]));
    }
    t.caches.machine(km);
    t
}

/// KKRemediation `m` as CAPI's MachineHealthCheck creates it (the Machine as owner, the cluster label), with
/// the finalizer in place and `status`.
fn remediation(strategy: RemediationStrategy, status: Option<KKRemediationStatus>) -> KKRemediation {
    let mut r = stored(KKRemediation::new("m", KKRemediationSpec { strategy }));
    r.metadata.owner_references = Some(vec![OwnerReference {
        controller: None,
        block_owner_deletion: None,
        ..controller_ref(&machine())
    }]);
    r.metadata.labels = Some([(CLUSTER_NAME_LABEL.to_owned(), "c".to_owned())].into());
    r.metadata.finalizers = Some(vec![KKREMEDIATION_FINALIZER.into()]);
    r.status = status;
    r
}

/// A status after `attempts` attempts, the last started `ago` seconds ago.
fn after(attempts: i32, ago: i64, tier_condition: &str) -> KKRemediationStatus {
    KKRemediationStatus {
        phase: Some(RemediationPhase::Waiting),
        retry_count: Some(attempts),
        last_remediated: Some(Time(Timestamp::now() - SignedDuration::from_secs(ago))),
        conditions: vec![Condition {
            type_: tier_condition.into(),
            status: "True".into(),
            reason: reasons::SERVICES_RESTARTED.into(),
            message: "earlier".into(),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::now()),
        }],
    }
}

/// Answer every request (attempts run in the background, so their order is not scripted): KKRemediation
/// writes with `rem`, Machine writes with the Machine, the rest as the API server would.
fn serve(api: crate::fixtures::ApiServer, rem: &KKRemediation) -> crate::fixtures::Served {
    let rem = serde_json::to_value(rem).expect("serializes");
    let m = serde_json::to_value(machine()).expect("serializes");
    api.serve(move |call| {
        if call.path.contains("/kkremediations/") {
            Some(rem.clone())
        } else if call.path.contains("/machines/") {
            Some(m.clone())
        } else {
            None
        }
    })
}

/// The condition `type_` of a status write's body.
fn condition<'a>(body: &'a Value, type_: &str) -> Option<&'a Value> {
    body["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The KKRemediation a finished attempt woke (`None` when none ended in time).
async fn attempt_end(triggers: &mut UnboundedReceiver<ObjectRef<KKRemediation>>) -> Option<String> {
    let woken = tokio::time::timeout(Duration::from_secs(5), triggers.next()).await;
    woken.ok().flatten().map(|r| r.name)
}

fn status_writes(requests: &[(String, String, Value)]) -> Vec<Value> {
    requests
        .iter()
        .filter(|(m, p, _)| m == "PATCH" && p == &path("kkremediations", "m/status"))
        .map(|(_, _, b)| b.clone())
        .collect()
}

fn event_reasons(requests: &[(String, String, Value)]) -> Vec<String> {
    requests
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == EVENTS)
        .map(|(_, _, b)| b["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_new_remediation_restarts_the_services_on_the_machines_host_then_waits_for_the_node() {
    let mut t = world(true);
    let rem = remediation(RemediationStrategy::default(), None);
    let served = serve(t.api, &rem);
    let res = reconcile(Arc::new(rem.clone()), t.ctx.clone()).await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::HOST_WORK));
    assert_eq!(
        attempt_end(&mut t.remediation_triggers).await,
        Some("m".into()),
        "the finished attempt wakes its KKRemediation"
    );
    assert_eq!(t.services.remediated(), [RemediationTier::RestartServices]);
    assert_eq!(t.ssh.reached(), ["10.0.0.1"], "the Machine's host, and only it");

    // The status the first reconcile wrote: attempt 1 runs.
    let writes = status_writes(&served.requests());
    assert_eq!(writes.len(), 1, "status once per reconcile");
    let first = &writes[0];
    assert_eq!(first["status"]["phase"], "Running");
    assert_eq!(first["status"]["retryCount"], 1);
    assert!(first["status"]["lastRemediated"].is_string());
    let c = condition(first, cond::SERVICES_RESTARTED).expect("the tier's condition");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some(reasons::IN_PROGRESS))
    );
    assert!(
        c["message"].as_str().unwrap().starts_with("attempt 1 of 2"),
        "{c}"
    );

    // The next reconcile (woken by the attempt) reports the tier that ran and waits out the timeout.
    let mut woken = rem;
    woken.status = Some(serde_json::from_value(first["status"].clone()).expect("a status"));
    let res = reconcile(Arc::new(woken), t.ctx.clone())
        .await
        .expect("reconciled");
    assert_ne!(
        res,
        Action::requeue(requeue::HOST_WORK),
        "no other attempt starts"
    );
    let requests = served.finish();
    let writes = status_writes(&requests);
    let second = writes.last().expect("a second status write");
    assert_eq!(second["status"]["phase"], "Waiting");
    let c = condition(second, cond::SERVICES_RESTARTED).expect("the tier's condition");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some(reasons::SERVICES_RESTARTED))
    );
    assert_eq!(
        event_reasons(&requests),
        ["RestartingServices", reasons::SERVICES_RESTARTED],
        "events say which tier started and that it ran"
    );
    assert_eq!(
        t.services.remediated().len(),
        1,
        "no second attempt before the timeout"
    );
}

#[tokio::test]
async fn once_the_timeout_passed_the_second_attempt_reboots_the_host() {
    let mut t = world(true);
    let rem = remediation(
        RemediationStrategy::default(),
        Some(after(1, 301, cond::SERVICES_RESTARTED)),
    );
    let served = serve(t.api, &rem);
    reconcile(Arc::new(rem), t.ctx.clone()).await.expect("reconciled");
    assert!(attempt_end(&mut t.remediation_triggers).await.is_some());
    assert_eq!(t.services.remediated(), [RemediationTier::Reboot]);
    let requests = served.finish();
    let writes = status_writes(&requests);
    assert_eq!(writes[0]["status"]["retryCount"], 2);
    let c = condition(&writes[0], cond::HOST_REBOOTED).expect("the reboot's condition");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("attempt 2 of 2: rebooting"),
        "{c}"
    );
    assert_eq!(event_reasons(&requests), ["Rebooting", reasons::HOST_REBOOTED]);
}

#[tokio::test]
async fn a_failed_restart_is_reported_as_a_failed_tier_with_a_warning_event() {
    let mut t = world(true);
    t.services.fail_tier(RemediationTier::RestartServices);
    let rem = remediation(RemediationStrategy::default(), None);
    let served = serve(t.api, &rem);
    reconcile(Arc::new(rem.clone()), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(attempt_end(&mut t.remediation_triggers).await.is_some());
    let first = status_writes(&served.requests())[0].clone();
    let mut woken = rem;
    woken.status = Some(serde_json::from_value(first["status"].clone()).expect("a status"));
    reconcile(Arc::new(woken), t.ctx.clone())
        .await
        .expect("reconciled");
    let requests = served.finish();
    let last = status_writes(&requests).pop().expect("a status write");
    let c = condition(&last, cond::SERVICES_RESTARTED).expect("the tier's condition");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some(reasons::COMMAND_FAILED))
    );
    assert!(
        c["message"].as_str().unwrap().contains("kubelet.service failed"),
        "{c}"
    );
    let warned = requests.iter().any(|(m, p, b)| {
        m == "POST" && p == EVENTS && b["reason"] == "ServicesRestartFailed" && b["type"] == "Warning"
    });
    assert!(warned, "a warning event names the failed tier: {requests:#?}");
}

#[tokio::test]
async fn when_the_attempts_are_used_up_the_machine_is_handed_to_its_owner_for_replacement() {
    let t = world(true);
    let rem = remediation(
        RemediationStrategy::default(),
        Some(after(2, 301, cond::HOST_REBOOTED)),
    );
    let res = scripted(t.ctx.clone(), t.api, rem, |mut api| async move {
        let c = api.expect("PATCH", &path("machines", "m/status")).await;
        assert!(
            c.query.contains(&format!(
                "fieldManager={}",
                REMEDIATION_FIELD_MANAGER.replace('/', "%2F")
            )),
            "its own field manager: {}",
            c.query
        );
        let conds = c.body["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .clone();
        assert_eq!(conds.len(), 1, "only the one condition is applied: {conds:?}");
        assert_eq!(conds[0]["type"], cond::MACHINE_OWNER_REMEDIATED);
        assert_eq!(conds[0]["status"], "False");
        assert_eq!(conds[0]["reason"], reasons::WAITING_FOR_REMEDIATION);
        c.reply(&machine());
        let e = api.expect("POST", EVENTS).await;
        assert_eq!(
            (e.body["reason"].as_str(), e.body["type"].as_str()),
            (Some(reasons::RETRY_LIMIT_REACHED), Some("Warning"))
        );
        e.echo();
        let s = api.expect("PATCH", &path("kkremediations", "m/status")).await;
        assert_eq!(s.body["status"]["phase"], "Exhausted");
        let c = condition(&s.body, cond::OWNER_REMEDIATION_REQUESTED).expect("the hand-over condition");
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("True"), Some(reasons::RETRY_LIMIT_REACHED))
        );
        assert!(
            c["message"].as_str().unwrap().contains("after attempt 2 of 2"),
            "{c}"
        );
        s.reply(&remediation(RemediationStrategy::default(), None));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert!(t.services.remediated().is_empty(), "no third attempt");
}

#[tokio::test]
async fn a_machine_whose_kkmachine_holds_no_host_is_handed_over_at_once() {
    let t = world(false);
    let rem = remediation(RemediationStrategy::default(), None);
    let res = scripted(t.ctx.clone(), t.api, rem, |mut api| async move {
        api.expect("PATCH", &path("machines", "m/status"))
            .await
            .reply(&machine());
        api.expect("POST", EVENTS).await.echo();
        let s = api.expect("PATCH", &path("kkremediations", "m/status")).await;
        assert_eq!(s.body["status"]["phase"], "Failed");
        let c = condition(&s.body, cond::OWNER_REMEDIATION_REQUESTED).expect("the hand-over condition");
        assert_eq!(c["reason"], reasons::NO_HOST);
        assert!(
            c["message"]
                .as_str()
                .unwrap()
                .contains("KKMachine m holds no host"),
            "{c}"
        );
        s.reply(&remediation(RemediationStrategy::default(), None));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert!(t.services.remediated().is_empty());
}

#[tokio::test]
async fn a_remediation_that_gave_up_does_nothing_more() {
    let t = world(true);
    let mut status = after(2, 1000, cond::HOST_REBOOTED);
    status.phase = Some(RemediationPhase::Exhausted);
    // Reported as not paused already: nothing in the status changes, so nothing is written.
    status.conditions.push(Condition {
        type_: cond::PAUSED.into(),
        status: "False".into(),
        reason: reasons::NOT_PAUSED.into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(Timestamp::now()),
    });
    let rem = remediation(RemediationStrategy::default(), Some(status));
    let res = scripted(t.ctx.clone(), t.api, rem, |api| async move { api }).await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert!(t.services.remediated().is_empty());
}

#[tokio::test]
async fn a_reconcile_that_reads_the_object_before_its_attempt_was_recorded_does_not_start_it_again() {
    let mut t = world(true);
    let rem = remediation(RemediationStrategy::default(), None);
    let served = serve(t.api, &rem);
    reconcile(Arc::new(rem.clone()), t.ctx.clone())
        .await
        .expect("reconciled");
    assert!(attempt_end(&mut t.remediation_triggers).await.is_some());
    // Woken by the attempt's end, with a cache still holding the object as it was before the first status
    // write: no status at all.
    reconcile(Arc::new(rem), t.ctx.clone()).await.expect("reconciled");
    let requests = served.finish();
    assert_eq!(
        t.services.remediated(),
        [RemediationTier::RestartServices],
        "attempt 1 ran once"
    );
    let last = status_writes(&requests).pop().expect("a status write");
    assert_eq!(last["status"]["retryCount"], 1);
    assert_eq!(last["status"]["phase"], "Waiting");
    let c = condition(&last, cond::SERVICES_RESTARTED).expect("the tier's condition");
    assert_eq!(c["status"], "True");
}

/// Issue 43: a KKInstance that the KKMachine's `spec.instanceID` names but another KKMachine controls (a
/// preset or copied claim) is not the Machine's host: nothing runs on it, the Machine is handed over.
#[tokio::test]
async fn a_kkinstance_the_kkmachine_names_but_does_not_control_is_not_its_host() {
    let mut t = world(false);
    let mut km = kkmachine();
    km.spec.instance_id = Some("c.node1".into());
    t.caches.machine(km);
    let mut other = kkmachine();
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("uid-other".into());
    t.caches.instance(claim(&other, "node1", "10.0.0.1", &[]));
    let rem = remediation(RemediationStrategy::default(), None);
    let res = scripted(t.ctx.clone(), t.api, rem, |mut api| async move {
        api.expect("PATCH", &path("machines", "m/status"))
            .await
            .reply(&machine());
        api.expect("POST", EVENTS).await.echo();
        let s = api.expect("PATCH", &path("kkremediations", "m/status")).await;
        let c = condition(&s.body, cond::OWNER_REMEDIATION_REQUESTED).expect("the hand-over condition");
        assert_eq!(c["reason"], reasons::NO_HOST);
        assert!(
            c["message"]
                .as_str()
                .unwrap()
                .contains("is not controlled by that KKMachine"),
            "{c}"
        );
        s.reply(&remediation(RemediationStrategy::default(), None));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::await_change());
    assert!(t.services.remediated().is_empty(), "nothing ran");
    assert!(t.ssh.reached().is_empty(), "no host was reached");
}

/// Issue 43: `spec.instanceID` spliced into `GET …/kkinstances/<name>` would make the read a namespace WATCH
/// (`?watch=true…`): it is refused before any request, reported as `InvalidName` naming the field.
#[tokio::test]
async fn an_instance_id_that_would_change_the_request_path_is_reported_and_never_requested() {
    let mut t = world(false);
    let mut km = kkmachine();
    km.spec.instance_id = Some("?watch=true&timeoutSeconds=86400".into());
    t.caches.machine(km);
    let rem = remediation(RemediationStrategy::default(), None);
    let res = scripted(t.ctx.clone(), t.api, rem, |mut api| async move {
        let c = api.next().await;
        assert_eq!(
            (c.method.as_str(), c.path.as_str()),
            ("POST", EVENTS),
            "the first request is the event, none for the name (query {:?})",
            c.query
        );
        assert_eq!(c.body["reason"], reasons::INVALID_NAME);
        assert!(
            c.body["note"]
                .as_str()
                .unwrap_or_default()
                .contains("KKMachine.spec.instanceID"),
            "{}",
            c.body
        );
        c.echo();
        let s = api.expect("PATCH", &path("kkremediations", "m/status")).await;
        let ready = condition(&s.body, cond::READY).expect("Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], reasons::INVALID_NAME);
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("KKMachine.spec.instanceID"),
            "{ready}"
        );
        s.reply(&remediation(RemediationStrategy::default(), None));
        api
    })
    .await;
    assert_eq!(res.expect("reconciled"), Action::requeue(requeue::INVALID_NAME));
    assert!(t.ssh.reached().is_empty());
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

/// Issue 43 finding 5: a reboot's wait for its host (up to the strategy's `timeout`, 24 h allowed, times
/// `retryLimit`) holds no slot of `--max-concurrent-hosts`. With one slot, another host's work gets it while
/// the rebooted host is down; the reboot takes a slot again to see its host back.
#[tokio::test(start_paused = true)]
async fn a_reboot_waiting_for_its_host_holds_no_host_slot_and_takes_one_again_to_see_it_back() {
    let mut t = world_with(
        crate::context::Settings {
            max_concurrent_hosts: 1,
            max_concurrent_hosts_per_namespace: 1,
            ..Default::default()
        },
        true,
    );
    t.services.reboot_takes(Duration::from_secs(600));
    let rem = remediation(
        RemediationStrategy::default(),
        Some(after(1, 301, cond::SERVICES_RESTARTED)),
    );
    let served = serve(t.api, &rem);
    reconcile(Arc::new(rem), t.ctx.clone()).await.expect("reconciled");
    let services = t.services.clone();
    eventually("the reboot was not scheduled", || {
        services.remediated() == [RemediationTier::Reboot]
    })
    .await;

    // The host is down for ten minutes: another host's work, of the same namespace, runs meanwhile.
    let other = tokio::time::timeout(Duration::from_secs(60), t.ctx.tasks.permits.acquire(NS))
        .await
        .expect("another host's work gets the only slot while the rebooted host is down");
    // The host is back after ten minutes, but seeing it back is a command on it: it waits for the slot.
    let early = tokio::time::timeout(Duration::from_secs(1200), t.remediation_triggers.next()).await;
    assert!(
        early.is_err(),
        "the attempt ended without a slot to poll its host"
    );
    drop(other);
    assert_eq!(
        attempt_end(&mut t.remediation_triggers).await,
        Some("m".into()),
        "the reboot sees its host back once it has a slot"
    );
    assert_eq!(
        t.ctx.tasks.permits.available(),
        1,
        "the attempt holds no slot once it ended"
    );
    let requests = served.finish();
    assert_eq!(event_reasons(&requests), ["Rebooting", reasons::HOST_REBOOTED]);
}

/// Issue 43 finding 5: `--max-host-phase-duration` bounds a remediation attempt's work on the host as it
/// bounds a KKInstance's phases: a tier whose host command hangs is cut there, and its condition says so.
#[tokio::test(start_paused = true)]
async fn a_remediation_attempt_whose_host_command_hangs_is_cut_at_the_phase_bound_and_its_condition_says_so()
{
    let mut t = world_with(
        crate::context::Settings {
            max_host_phase_duration: Duration::from_secs(60),
            ..Default::default()
        },
        true,
    );
    t.services.hang_tier(RemediationTier::RestartServices);
    let rem = remediation(RemediationStrategy::default(), None);
    let served = serve(t.api, &rem);
    reconcile(Arc::new(rem.clone()), t.ctx.clone())
        .await
        .expect("reconciled");
    let woken = tokio::time::timeout(Duration::from_secs(3600), t.remediation_triggers.next()).await;
    assert!(
        woken.is_ok(),
        "the hung attempt was not cut within an hour at its 60 s bound"
    );
    let first = status_writes(&served.requests())[0].clone();
    let mut woken = rem;
    woken.status = Some(serde_json::from_value(first["status"].clone()).expect("a status"));
    reconcile(Arc::new(woken), t.ctx.clone())
        .await
        .expect("reconciled");
    let requests = served.finish();
    let last = status_writes(&requests).pop().expect("a status write");
    let c = condition(&last, cond::SERVICES_RESTARTED).expect("the tier's condition");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some(reasons::COMMAND_FAILED))
    );
    assert_eq!(
        c["message"],
        "attempt 1 of 2: restart-services ran longer than 60 s (--max-host-phase-duration)"
    );
    assert!(
        requests.iter().any(|(m, p, b)| m == "POST"
            && p == EVENTS
            && b["reason"] == "ServicesRestartFailed"
            && b["type"] == "Warning"),
        "a warning event names the failed tier: {requests:#?}"
    );
    assert_eq!(t.ctx.tasks.permits.available(), 10, "its slot is free again");
}

//! Fixtures of the reconcile unit tests: a scripted API server behind a real `kube::Client`, a test
//! [`Context`] whose caches the test fills, and fake host seams ([`FakeServices`] for [`HostServices`],
//! [`FakeSsh`] for [`SshFactory`]).
//!
//! A reconcile test runs the real reconciler against them: the script says which requests the reconcile
//! must make, in order, and what the API server answers; the fakes record what host work was asked for.
//! That makes a claim, mirror, cleanup or state decision a millisecond test. What needs the real
//! apiserver (admission, garbage collection, watches, two managers) stays in the process tests.
//!
//! ```text
//! let t = TestContext::new();
//! let server = t.api.script(|mut api| async move {
//!     api.expect("GET", "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines/m").await.not_found();
//! });
//! let res = reconcile(obj, t.ctx.clone()).await;
//! server.finish(t.ctx).await; // the script ran to its end and nothing else was requested
//! ```

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use capkk_api::{KKCluster, KKInstance, KKMachine, KKRemediation, RemediationTier};
use capkk_executor::{ExecError, ExecOutput, ExecRequest, Executor, PutRequest};
use capkk_service::{Error as ServiceError, Result as ServiceResult};
use capkk_ssh::{HostTarget, Observed};
use futures::channel::mpsc::{UnboundedReceiver, unbounded};
use futures::future::BoxFuture;
use http::{Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Client, Resource, ResourceExt,
    client::Body,
    runtime::{
        reflector::{self, ObjectRef, store::Writer},
        watcher,
    },
};
use serde::Serialize;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

use crate::{
    capi::{Cluster, Machine},
    context::{Context, Settings, Stores, Triggers},
    hosts::SshFactory,
    metrics::Metrics,
    services::{HostCall, HostServices, Phase},
};

/// The namespace of every fixture object.
pub(crate) const NS: &str = "ns";

/// How long a script waits for the next request before it fails the test: far above a reconcile's
/// own work against the in-memory server, so only a request that never comes hits it.
const NEXT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// One request the code under test made, and the way to answer it.
pub(crate) struct Call {
    /// HTTP method, e.g. `PATCH`.
    pub method: String,
    /// The path without the query, e.g. `/apis/.../namespaces/ns/kkinstances/a.node1`.
    pub path: String,
    /// The query string (`fieldManager=...`, `labelSelector=...`), empty when there is none.
    pub query: String,
    /// The request body as JSON (`Value::Null` when empty).
    pub body: Value,
    reply: SendResponse<Response<Body>>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

impl Call {
    /// Answer 200 with `obj` as JSON.
    pub(crate) fn reply<T: Serialize>(self, obj: &T) {
        self.reply_with(200, serde_json::to_vec(obj).expect("fixture objects serialize"));
    }

    /// Answer 201 (created) with `obj` as JSON.
    pub(crate) fn created<T: Serialize>(self, obj: &T) {
        self.reply_with(201, serde_json::to_vec(obj).expect("fixture objects serialize"));
    }

    /// Answer 200 with the request's own body (what the API server stores for a create or an event).
    pub(crate) fn echo(self) {
        let body = serde_json::to_vec(&self.body).expect("a JSON body serializes");
        self.reply_with(200, body);
    }

    /// Answer 404 NotFound.
    pub(crate) fn not_found(self) {
        self.status(404, "NotFound");
    }

    /// Answer 409 AlreadyExists (a create of a name that is taken).
    pub(crate) fn already_exists(self) {
        self.status(409, "AlreadyExists");
    }

    /// Answer 409 Conflict (a resourceVersion precondition failed).
    pub(crate) fn conflict(self) {
        self.status(409, "Conflict");
    }

    /// Answer with a `metav1.Status` failure of `code` and `reason`.
    pub(crate) fn status(self, code: u16, reason: &str) {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("{reason} (fixture)"), "reason": reason, "code": code,
        });
        self.reply_with(code, serde_json::to_vec(&status).expect("a Status serializes"));
    }

    fn reply_with(self, code: u16, body: Vec<u8>) {
        let response = Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("a fixture response builds");
        self.reply.send_response(response);
    }
}

/// The scripted API server: the test side of a `tower_test` mock pair whose other side is the `kube::Client`
/// in the test [`Context`].
pub(crate) struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
    seen: Vec<String>,
}

impl ApiServer {
    /// The next request, whatever it is. Fails the test when none comes: the code under test finished (every
    /// client was dropped) or waits for something else.
    pub(crate) async fn next(&mut self) -> Call {
        let next = tokio::time::timeout(NEXT_REQUEST_TIMEOUT, self.handle.next_request()).await;
        let (request, reply) = match next {
            Ok(Some(r)) => r,
            Ok(None) => panic!(
                "the code under test made no further request; it made: {:#?}",
                self.seen
            ),
            Err(_) => panic!(
                "no request within {NEXT_REQUEST_TIMEOUT:?}; the code under test made: {:#?}",
                self.seen
            ),
        };
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("the request body is readable");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("request bodies are JSON")
        };
        let call = Call {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body,
            reply,
        };
        self.seen.push(format!("{call:?}"));
        call
    }

    /// The next request, which must be `method path`.
    pub(crate) async fn expect(&mut self, method: &str, path: &str) -> Call {
        let call = self.next().await;
        assert_eq!(
            (call.method.as_str(), call.path.as_str()),
            (method, path),
            "request {} of the script; made so far: {:#?}",
            self.seen.len(),
            self.seen
        );
        call
    }

    /// Run `script` against this server in the background; [`Script::finish`] joins it.
    pub(crate) fn script<F, Fut>(self, script: F) -> Script
    where
        F: FnOnce(ApiServer) -> Fut,
        Fut: Future<Output = ApiServer> + Send + 'static,
    {
        Script(tokio::spawn(script(self)))
    }

    /// Answer every request with `answer` (for background host work, whose writes are not the point of a
    /// test) and keep a record of them; [`Served::finish`] returns it.
    pub(crate) fn serve<F>(self, answer: F) -> Served
    where
        F: Fn(&Call) -> Option<Value> + Send + 'static,
    {
        self.serve_calls(move |call| match answer(&call) {
            Some(v) => {
                call.reply(&v);
                None
            }
            None => Some(call),
        })
    }

    /// [`ApiServer::serve`] where `answer` may answer a call itself, with any status; it hands back the calls
    /// it leaves to the defaults (GET: not found; anything else: echoed).
    pub(crate) fn serve_calls<F>(mut self, answer: F) -> Served
    where
        F: Fn(Call) -> Option<Call> + Send + 'static,
    {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(call) = self.try_next().await {
                if let Ok(mut l) = log.lock() {
                    l.push((call.method.clone(), call.path.clone(), call.body.clone()));
                }
                match answer(call) {
                    None => {}
                    Some(call) if call.method == "GET" => call.not_found(),
                    Some(call) => call.echo(),
                }
            }
        });
        Served { seen, task }
    }

    async fn try_next(&mut self) -> Option<Call> {
        let (request, reply) = self.handle.next_request().await?;
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.ok()?;
        Some(Call {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            reply,
        })
    }
}

/// A running script (see [`ApiServer::script`]).
pub(crate) struct Script(tokio::task::JoinHandle<ApiServer>);

impl Script {
    /// Wait for the script to end (its assertions fail the test here) and check that the code under test
    /// made no request beyond it. `ctx` is dropped first so that the client's end of the mock closes.
    pub(crate) async fn finish(self, ctx: Arc<Context>) {
        drop(ctx);
        let mut api = match self.0.await {
            Ok(api) => api,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("the script was cancelled: {e}"),
        };
        if let Ok(Some((request, _))) =
            tokio::time::timeout(Duration::from_millis(100), api.handle.next_request()).await
        {
            panic!(
                "a request beyond the script: {} {}; the script answered: {:#?}",
                request.method(),
                request.uri(),
                api.seen
            );
        }
    }
}

/// Requests answered by [`ApiServer::serve`].
pub(crate) struct Served {
    seen: Arc<Mutex<Vec<(String, String, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// `(method, path, body)` of every request answered so far.
    pub(crate) fn requests(&self) -> Vec<(String, String, Value)> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stop answering.
    pub(crate) fn finish(self) -> Vec<(String, String, Value)> {
        self.task.abort();
        self.requests()
    }
}

/// The writers of the test context's caches (the reflectors of the manager).
pub(crate) struct Caches {
    instances: Writer<KKInstance>,
    machines: Writer<KKMachine>,
    clusters: Writer<KKCluster>,
    capi_machines: Writer<Machine>,
    capi_clusters: Writer<Cluster>,
}

fn fill<K>(w: &mut Writer<K>, objects: impl IntoIterator<Item = K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    w.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        w.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    w.apply_watcher_event(&watcher::Event::InitDone);
}

impl Caches {
    /// Put `obj` into the KKInstance cache (or replace it).
    pub(crate) fn instance(&mut self, obj: KKInstance) {
        self.instances.apply_watcher_event(&watcher::Event::Apply(obj));
    }

    /// Put `obj` into the KKMachine cache.
    pub(crate) fn machine(&mut self, obj: KKMachine) {
        self.machines.apply_watcher_event(&watcher::Event::Apply(obj));
    }

    /// Put `obj` into the KKCluster cache.
    pub(crate) fn cluster(&mut self, obj: KKCluster) {
        self.clusters.apply_watcher_event(&watcher::Event::Apply(obj));
    }

    /// Put `obj` into the CAPI Machine cache.
    pub(crate) fn capi_machine(&mut self, obj: Machine) {
        self.capi_machines
            .apply_watcher_event(&watcher::Event::Apply(obj));
    }

    /// Put `obj` into the CAPI Cluster cache.
    pub(crate) fn capi_cluster(&mut self, obj: Cluster) {
        self.capi_clusters
            .apply_watcher_event(&watcher::Event::Apply(obj));
    }
}

/// A [`Context`] on the scripted API server, with listed (empty) caches and the fake host seams.
pub(crate) struct TestContext {
    /// The context handed to reconcilers.
    pub ctx: Arc<Context>,
    /// The API server's test side.
    pub api: ApiServer,
    /// The caches' writers.
    pub caches: Caches,
    /// What host work was asked for.
    pub services: Arc<FakeServices>,
    /// Which hosts were reached.
    pub ssh: Arc<FakeSsh>,
    /// KKInstances the code under test asked to reconcile now.
    pub instance_triggers: UnboundedReceiver<ObjectRef<KKInstance>>,
    /// KKRemediations the code under test asked to reconcile now (finished attempts).
    pub remediation_triggers: UnboundedReceiver<ObjectRef<KKRemediation>>,
}

impl TestContext {
    /// A context with default settings. Call inside a Tokio runtime (the client spawns its buffer task).
    pub(crate) fn new() -> Self {
        Self::with_settings(Settings::default())
    }

    /// A context with `settings`; the caches are filled by [`TestContext::caches`] before the reconcile.
    pub(crate) fn with_settings(settings: Settings) -> Self {
        let ssh = Arc::new(FakeSsh::default());
        Self::with_ssh(settings, ssh.clone(), ssh)
    }

    /// A context whose hosts are reached through `dial` (e.g. a real [`capkk_ssh::SshPool`], for what the
    /// pool decides before any connection); `ssh` is the fake the test context reports.
    pub(crate) fn with_ssh(settings: Settings, ssh: Arc<FakeSsh>, dial: Arc<dyn SshFactory>) -> Self {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, NS);
        let (instances_r, mut instances) = reflector::store();
        let (machines_r, mut machines) = reflector::store();
        let (clusters_r, mut clusters) = reflector::store();
        let (capi_machines_r, mut capi_machines) = reflector::store();
        let (capi_clusters_r, mut capi_clusters) = reflector::store();
        fill(&mut instances, []);
        fill(&mut machines, []);
        fill(&mut clusters, []);
        fill(&mut capi_machines, []);
        fill(&mut capi_clusters, []);
        let (instance_tx, instance_triggers) = unbounded();
        let (cluster_tx, _) = unbounded();
        let (machine_tx, _) = unbounded();
        let (remediation_tx, remediation_triggers) = unbounded();
        let services = Arc::new(FakeServices::default());
        let ctx = Context::new(
            client,
            settings,
            dial,
            services.clone(),
            Arc::new(Metrics::new()),
            Triggers {
                instances: instance_tx,
                clusters: cluster_tx,
                machines: machine_tx,
                remediations: remediation_tx,
            },
            Stores {
                instances: instances_r,
                machines: machines_r,
                clusters: clusters_r,
                capi_machines: capi_machines_r,
                capi_clusters: capi_clusters_r,
            },
        );
        Self {
            ctx: Arc::new(ctx),
            api: ApiServer {
                handle,
                seen: Vec::new(),
            },
            caches: Caches {
                instances,
                machines,
                clusters,
                capi_machines,
                capi_clusters,
            },
            services,
            ssh,
            instance_triggers,
            remediation_triggers,
        }
    }
}

/// Host services that do nothing on a host and record what they were asked; a phase may be told to fail.
#[derive(Default)]
pub(crate) struct FakeServices {
    ran: Mutex<Vec<Phase>>,
    finished: Mutex<Vec<Phase>>,
    resets: Mutex<usize>,
    failing: Mutex<BTreeMap<&'static str, String>>,
    hanging: Mutex<Option<Phase>>,
    remediated: Mutex<Vec<RemediationTier>>,
    failing_tiers: Mutex<Vec<RemediationTier>>,
    hanging_tiers: Mutex<Vec<RemediationTier>>,
    reboot_takes: Mutex<Duration>,
    upgrade_hangs: Mutex<bool>,
    upgrades_running: Arc<Mutex<usize>>,
    prepulls: Mutex<Vec<(Vec<Phase>, Vec<Phase>)>>,
    prepull_takes: Mutex<Duration>,
    prepull_fails: Mutex<bool>,
    prepulls_running: Arc<Mutex<usize>>,
    taking: Mutex<BTreeMap<&'static str, Duration>>,
    load_balancer_plans: Mutex<Vec<crate::services::LoadBalancerPlan>>,
}

/// Counts a running fake pre-pull for as long as it lives (finished or dropped).
struct Running(Arc<Mutex<usize>>);

impl Running {
    fn start(count: &Arc<Mutex<usize>>) -> Self {
        if let Ok(mut n) = count.lock() {
            *n += 1;
        }
        Self(count.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut n) = self.0.lock() {
            *n -= 1;
        }
    }
}

impl FakeServices {
    /// What each load-balancer phase was asked to do, in order.
    pub(crate) fn load_balancer_plans(&self) -> Vec<crate::services::LoadBalancerPlan> {
        self.load_balancer_plans
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// The phases run so far, in order.
    pub(crate) fn ran(&self) -> Vec<Phase> {
        self.ran.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Phases that ended (succeeded or failed) so far, in the order they ended.
    pub(crate) fn finished(&self) -> Vec<Phase> {
        self.finished.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Host resets so far.
    pub(crate) fn resets(&self) -> usize {
        self.resets.lock().map(|r| *r).unwrap_or_default()
    }

    /// The remediation tiers run so far, in order.
    pub(crate) fn remediated(&self) -> Vec<RemediationTier> {
        self.remediated.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Make `tier` fail as a command that exited 1.
    pub(crate) fn fail_tier(&self, tier: RemediationTier) {
        if let Ok(mut f) = self.failing_tiers.lock() {
            f.push(tier);
        }
    }

    /// Make `tier` never end (a host command that hangs).
    pub(crate) fn hang_tier(&self, tier: RemediationTier) {
        if let Ok(mut h) = self.hanging_tiers.lock() {
            h.push(tier);
        }
    }

    /// Make a reboot's host take `d` to come back. As the real tier does, the fake gives its slot back once the
    /// reboot is scheduled, and takes it again to see the host back.
    pub(crate) fn reboot_takes(&self, d: Duration) {
        if let Ok(mut t) = self.reboot_takes.lock() {
            *t = d;
        }
    }

    /// Make every in-place upgrade never end (a host command that hangs).
    pub(crate) fn hang_upgrades(&self) {
        if let Ok(mut h) = self.upgrade_hangs.lock() {
            *h = true;
        }
    }

    /// In-place upgrades started and neither finished nor dropped.
    pub(crate) fn upgrades_running(&self) -> usize {
        self.upgrades_running.lock().map(|n| *n).unwrap_or_default()
    }

    /// For every image pre-pull so far, the phases that had ended when it started, and those that had started
    /// when it ended.
    pub(crate) fn prepulls(&self) -> Vec<(Vec<Phase>, Vec<Phase>)> {
        self.prepulls.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Make every image pre-pull take `d` (a slow registry).
    pub(crate) fn prepull_takes(&self, d: Duration) {
        if let Ok(mut t) = self.prepull_takes.lock() {
            *t = d;
        }
    }

    /// Make every image pre-pull end with a failed image (its step exits 1).
    pub(crate) fn prepull_fails(&self) {
        if let Ok(mut f) = self.prepull_fails.lock() {
            *f = true;
        }
    }

    /// Image pre-pulls started and neither finished nor dropped.
    pub(crate) fn prepulls_running(&self) -> usize {
        self.prepulls_running.lock().map(|n| *n).unwrap_or_default()
    }

    /// Make `phase` take `d` before it ends.
    pub(crate) fn takes(&self, phase: Phase, d: Duration) {
        if let Ok(mut t) = self.taking.lock() {
            t.insert(phase.name(), d);
        }
    }

    /// Make `phase` never end (a host command that hangs).
    pub(crate) fn hang(&self, phase: Phase) {
        if let Ok(mut h) = self.hanging.lock() {
            *h = Some(phase);
        }
    }

    /// Make `phase` fail as a command that exited 1 with `output`.
    pub(crate) fn fail(&self, phase: Phase, output: &str) {
        if let Ok(mut f) = self.failing.lock() {
            f.insert(phase.name(), output.to_owned());
        }
    }
}

#[async_trait]
impl HostServices for FakeServices {
    async fn run(&self, phase: Phase, host: HostCall<'_>) -> ServiceResult<()> {
        if let Ok(mut r) = self.ran.lock() {
            r.push(phase);
        }
        if phase == Phase::LoadBalancer
            && let Ok(mut p) = self.load_balancer_plans.lock()
        {
            p.push(host.input.load_balancer.clone());
        }
        if self.hanging.lock().is_ok_and(|h| *h == Some(phase)) {
            return futures::future::pending().await;
        }
        let takes = self.taking.lock().ok().and_then(|t| t.get(phase.name()).copied());
        if let Some(d) = takes {
            tokio::time::sleep(d).await;
        }
        if let Ok(mut r) = self.finished.lock() {
            r.push(phase);
        }
        match self
            .failing
            .lock()
            .ok()
            .and_then(|f| f.get(phase.name()).cloned())
        {
            Some(output) => Err(ServiceError::CommandFailed {
                step: phase.name().into(),
                command: format!("{} (fake)", phase.name()),
                exit_code: Some(1),
                output_tail: output,
            }),
            None => Ok(()),
        }
    }

    async fn prepull(&self, host: HostCall<'_>) {
        let _running = Running::start(&self.prepulls_running);
        let started = self.finished();
        let takes = self.prepull_takes.lock().map(|t| *t).unwrap_or_default();
        tokio::time::sleep(takes).await;
        let failed = self.prepull_fails.lock().is_ok_and(|f| *f);
        host.progress.step_finished(&capkk_service::journal::StepRecord {
            phase: crate::services::PREPULL_AFTER.name().into(),
            name: capkk_service::images::STEP.into(),
            exit_code: Some(u32::from(failed)),
            duration: takes,
            output_tail: if failed {
                "1 failed registry.example/kube-apiserver:v1.36.3 after 9 ms: not found (fake)".into()
            } else {
                "1 pulled registry.example/kube-apiserver:v1.36.3 in 9 ms (fake)".into()
            },
            skipped: false,
            host_finished_ms: Some(1),
        });
        if let Ok(mut p) = self.prepulls.lock() {
            p.push((started, self.ran()));
        }
    }

    async fn reset(&self, _host: HostCall<'_>) -> ServiceResult<()> {
        if let Ok(mut r) = self.resets.lock() {
            *r += 1;
        }
        Ok(())
    }

    async fn remediate(
        &self,
        tier: RemediationTier,
        _wait: Duration,
        _host: HostCall<'_>,
        slot: &dyn capkk_service::remediation::HostSlot,
    ) -> ServiceResult<String> {
        if let Ok(mut r) = self.remediated.lock() {
            r.push(tier);
        }
        if self.hanging_tiers.lock().is_ok_and(|h| h.contains(&tier)) {
            return futures::future::pending().await;
        }
        if tier == RemediationTier::Reboot {
            // Scheduled: the host goes down. The wait holds no slot; seeing the host back (a poll) does.
            slot.give_back();
            let takes = self.reboot_takes.lock().map(|t| *t).unwrap_or_default();
            tokio::time::sleep(takes).await;
            slot.take().await;
            slot.give_back();
        }
        if self.failing_tiers.lock().is_ok_and(|f| f.contains(&tier)) {
            return Err(ServiceError::CommandFailed {
                step: format!("remediation/{tier:?}"),
                command: "remediation (fake)".into(),
                exit_code: Some(1),
                output_tail: "kubelet.service failed (fake)".into(),
            });
        }
        Ok(format!("{tier:?} done (fake)"))
    }

    async fn upgrade(&self, host: HostCall<'_>) -> ServiceResult<String> {
        let _running = Running::start(&self.upgrades_running);
        if self.upgrade_hangs.lock().is_ok_and(|h| *h) {
            return futures::future::pending().await;
        }
        let v = host.input.instance.kubernetes_version.clone().unwrap_or_default();
        Ok(format!("upgraded to {v} (fake)"))
    }
}

/// An SSH factory whose hosts answer every command with exit 0 (or refuse connections when told to), and
/// which records the addresses it was asked to reach and to forget.
#[derive(Default)]
pub(crate) struct FakeSsh {
    reached: Mutex<Vec<String>>,
    observed: Mutex<Vec<String>>,
    forgotten: Mutex<Vec<String>>,
    targets: Mutex<Vec<HostTarget>>,
    down: Mutex<bool>,
}

impl FakeSsh {
    /// Addresses an executor was made for, in order.
    pub(crate) fn reached(&self) -> Vec<String> {
        self.reached.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Addresses connected to for their identity (before any executor), in order.
    pub(crate) fn observed(&self) -> Vec<String> {
        self.observed.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The targets executors were made for, in order (host-key policies, bastion).
    pub(crate) fn targets(&self) -> Vec<HostTarget> {
        self.targets.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// `namespace/address` of the pooled connections dropped.
    pub(crate) fn forgotten(&self) -> Vec<String> {
        self.forgotten.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// From now on every host refuses connections (a transient failure).
    pub(crate) fn hosts_down(&self) {
        if let Ok(mut d) = self.down.lock() {
            *d = true;
        }
    }
}

impl SshFactory for FakeSsh {
    fn executor(&self, target: &HostTarget) -> Arc<dyn Executor> {
        if let Ok(mut r) = self.reached.lock() {
            r.push(target.address.clone());
        }
        if let Ok(mut r) = self.targets.lock() {
            r.push(target.clone());
        }
        Arc::new(FakeHost {
            address: target.address.clone(),
            down: self.down.lock().map(|d| *d).unwrap_or(false),
        })
    }

    fn observed_fingerprint(&self, _target: &HostTarget) -> Option<String> {
        Some("SHA256:fixture".into())
    }

    fn observe<'a>(&'a self, target: &'a HostTarget) -> BoxFuture<'a, Result<Observed, ExecError>> {
        // Not recorded in `reached`: it counts executors (work), and observing runs nothing.
        if let Ok(mut o) = self.observed.lock() {
            o.push(target.address.clone());
        }
        let host = FakeHost {
            address: target.address.clone(),
            down: self.down.lock().map(|d| *d).unwrap_or(false),
        };
        Box::pin(async move {
            host.reachable()?;
            Ok(Observed {
                host_key_fingerprint: "SHA256:fixture".into(),
                peer: host.address.parse().ok(),
            })
        })
    }

    fn forget(&self, ns: &str, address: &str) {
        if let Ok(mut f) = self.forgotten.lock() {
            f.push(format!("{ns}/{address}"));
        }
    }
}

/// One fake host (see [`FakeSsh`]).
struct FakeHost {
    address: String,
    down: bool,
}

impl FakeHost {
    fn reachable(&self) -> Result<(), ExecError> {
        if self.down {
            return Err(ExecError::Connect {
                host: self.address.clone(),
                message: "Connection refused (fixture)".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Executor for FakeHost {
    async fn exec(&self, _req: ExecRequest) -> Result<ExecOutput, ExecError> {
        self.reachable()?;
        Ok(ExecOutput {
            exit_code: Some(0),
            ..Default::default()
        })
    }

    async fn put(&self, _req: PutRequest) -> Result<u64, ExecError> {
        self.reachable()?;
        Ok(0)
    }

    async fn get(&self, _path: &str, _limit: usize, _privileged: bool) -> Result<Vec<u8>, ExecError> {
        self.reachable()?;
        Ok(Vec::new())
    }

    fn target(&self) -> String {
        self.address.clone()
    }
}

/// The controller owner reference of `owner` (as the API server stores it).
pub(crate) fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `obj` as the API server returns it: in [`NS`], with a UID derived from its name, generation 1 and a
/// resourceVersion.
pub(crate) fn stored<K: Resource>(mut obj: K) -> K {
    let name = obj.name_any();
    let meta = obj.meta_mut();
    meta.namespace = Some(NS.into());
    meta.uid.get_or_insert_with(|| format!("uid-{name}"));
    meta.generation.get_or_insert(1);
    meta.resource_version.get_or_insert_with(|| "1".into());
    obj
}

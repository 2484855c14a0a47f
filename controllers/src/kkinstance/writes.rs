//! The writes of one host task (its part of the status, its annotations), made in the background, so the
//! host's commands do not wait for the API server.
//!
//! Host work has about 12 writes per host: the phase's status before each phase, the completed-phases
//! annotation after it. Made between its commands, each would put an API round trip (slow on a loaded API
//! server) in the middle of host work. They are queued instead, on two lanes: the status (each is the whole
//! of host work's part, applied with SSA) and the annotations (merge patches). Each lane's writer sends what
//! queued up on it since its last write as one write: the latest status, or one merge patch of the
//! annotations (a later value for a key wins). The lanes do not wait for each other: the last status (the
//! host is provisioned, which the KKMachine and CAPI wait for) goes out as soon as it is queued, not after an
//! annotation patch in flight on a loaded API server. The task waits for both lanes ([`Writes::sync`]) only
//! before it ends, so the reconcile it triggers then reads them.
//!
//! The status and the annotations are different parts of the object (the status subresource, metadata) and
//! nothing depends on their order: the KKMachine mirrors the status; the state machine reads the annotations,
//! and only after the task ended. Nothing needed after a restart or `clusterctl move` is lost by the delay: a
//! completed-phases annotation may land after the host finished the phase (or after the status reported it),
//! and a manager that stops in between runs that phase again, which every phase allows
//! (`HostServices::run` must be idempotent; provisioning finds the sentinel). That window existed before, for
//! the time of one write. A task that is aborted (its KKInstance released or deleted) drops what it had not
//! written yet, as an aborted task dropped its in-flight write before: a reset that follows must not find
//! the provisioning task's progress written over its own.

use std::{collections::BTreeMap, future::Future};

use capkk_api::{KKInstance, KKInstanceStatus, consts::HOSTWORK_FIELD_MANAGER};
use kube::Api;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::annotate;
use crate::reconcile::apply_status;

/// One queued write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    /// Host work's part of the status (server-side apply with its own field manager).
    Status(Box<KKInstanceStatus>),
    /// Annotations to set (`Some`) or remove (`None`), one merge patch.
    Annotate(BTreeMap<String, Option<String>>),
}

/// What reaches the API for `ops` queued in this order: the last status, and the annotation patches merged
/// into one (a later value for a key wins).
pub(crate) fn coalesce(ops: impl IntoIterator<Item = Op>) -> Vec<Op> {
    let mut status = None;
    let mut annotations: Option<BTreeMap<String, Option<String>>> = None;
    for op in ops {
        match op {
            Op::Status(s) => status = Some(s),
            Op::Annotate(a) => annotations.get_or_insert_default().extend(a),
        }
    }
    status
        .map(Op::Status)
        .into_iter()
        .chain(annotations.map(Op::Annotate))
        .collect()
}

enum Msg {
    Op(Op),
    Sync(oneshot::Sender<()>),
}

/// One lane: its queue and its writer.
struct Lane {
    tx: mpsc::UnboundedSender<Msg>,
    writer: tokio::task::JoinHandle<()>,
}

impl Lane {
    fn start<F, Fut>(send: F) -> Self
    where
        F: FnMut(Op) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            writer: tokio::spawn(write(rx, send)),
        }
    }

    fn sync(&self) -> Option<oneshot::Receiver<()>> {
        let (done, wait) = oneshot::channel();
        self.tx.send(Msg::Sync(done)).ok().map(|_| wait)
    }
}

/// The background writers of one task. Dropping it drops what was not written yet (see the module doc).
pub(crate) struct Writes {
    status: Lane,
    annotations: Lane,
}

impl Writes {
    /// Start the writers for KKInstance `name`.
    pub(crate) fn start(api: Api<KKInstance>, name: String) -> Self {
        Self::with(move |op| {
            let (api, name) = (api.clone(), name.clone());
            async move { send(&api, &name, op).await }
        })
    }

    /// Start writers that hand the writes to `send` (at most one status and one annotation patch at a time,
    /// each lane on its own).
    fn with<F, Fut>(send: F) -> Self
    where
        F: FnMut(Op) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self {
            status: Lane::start(send.clone()),
            annotations: Lane::start(send),
        }
    }

    /// Queue a write.
    pub(crate) fn queue(&self, op: Op) {
        let lane = match op {
            Op::Status(_) => &self.status,
            Op::Annotate(_) => &self.annotations,
        };
        // A writer only ends when this handle is dropped.
        let _ = lane.tx.send(Msg::Op(op));
    }

    /// Wait until everything queued so far was written (or failed, which is logged).
    pub(crate) async fn sync(&self) {
        let waits = [self.status.sync(), self.annotations.sync()];
        for wait in waits.into_iter().flatten() {
            let _ = wait.await;
        }
    }
}

impl Drop for Writes {
    fn drop(&mut self) {
        self.status.writer.abort();
        self.annotations.writer.abort();
    }
}

async fn send(api: &Api<KKInstance>, name: &str, op: Op) {
    let start = std::time::Instant::now();
    let what = match &op {
        Op::Status(_) => "status",
        Op::Annotate(_) => "annotations",
    };
    match op {
        Op::Status(s) => {
            if let Err(e) = apply_status(api, name, &s, HOSTWORK_FIELD_MANAGER).await {
                warn!(kkinstance = %name, error = %e, "Writing progress failed");
            }
        }
        Op::Annotate(a) => {
            let set: Vec<(&str, Option<String>)> = a.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            if let Err(e) = annotate(api, name, &set).await {
                warn!(kkinstance = %name, error = %e, "Annotating failed");
            }
        }
    }
    debug!(kkinstance = %name, what, ms = start.elapsed().as_millis() as u64, "Host work wrote");
}

/// Send what was queued on one lane; what queued up during a write goes out together ([`coalesce`]).
async fn write<F, Fut>(mut rx: mpsc::UnboundedReceiver<Msg>, mut send: F)
where
    F: FnMut(Op) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, usize::MAX).await > 0 {
        let mut ops = Vec::new();
        let mut syncs = Vec::new();
        for m in batch.drain(..) {
            match m {
                Msg::Op(op) => ops.push(op),
                Msg::Sync(s) => syncs.push(s),
            }
        }
        for op in coalesce(ops) {
            send(op).await;
        }
        for s in syncs {
            let _ = s.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(step: &str) -> Op {
        Op::Status(Box::new(KKInstanceStatus {
            step: Some(step.into()),
            ..Default::default()
        }))
    }

    fn annotations(set: &[(&str, Option<&str>)]) -> Op {
        Op::Annotate(
            set.iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
                .collect(),
        )
    }

    #[test]
    fn what_queued_up_becomes_the_last_status_and_one_annotation_patch() {
        let ops = [
            status("step 1/5"),
            annotations(&[("completed", Some("bootstrap")), ("block-move", Some("true"))]),
            status("step 2/5"),
            annotations(&[("completed", Some("bootstrap,repository"))]),
            status("step 3/5"),
            annotations(&[("block-move", None)]),
        ];
        assert_eq!(
            coalesce(ops),
            [
                status("step 3/5"),
                annotations(&[("completed", Some("bootstrap,repository")), ("block-move", None)]),
            ]
        );
        assert_eq!(coalesce([status("a"), status("b")]), [status("b")]);
        assert_eq!(coalesce([]), []);
    }

    /// A writer whose writes take `delay` each and are recorded.
    fn recording(delay: std::time::Duration) -> (Writes, std::sync::Arc<std::sync::Mutex<Vec<Op>>>) {
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = sent.clone();
        let w = Writes::with(move |op| {
            let log = log.clone();
            async move {
                tokio::time::sleep(delay).await;
                log.lock().unwrap().push(op);
            }
        });
        (w, sent)
    }

    #[tokio::test(start_paused = true)]
    async fn what_queues_up_during_a_write_goes_out_together_and_sync_waits_for_it() {
        let (w, sent) = recording(std::time::Duration::from_millis(50));
        w.queue(status("connecting"));
        // The writer takes the first write at once; the rest queue up behind it.
        tokio::task::yield_now().await;
        w.queue(status("step 1/5"));
        w.queue(annotations(&[("completed", Some("bootstrap"))]));
        w.queue(status("step 2/5"));
        w.queue(status("step 3/5"));
        w.sync().await;
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 3, "{sent:?}");
        assert!(sent.contains(&status("connecting")));
        assert!(sent.contains(&annotations(&[("completed", Some("bootstrap"))])));
        assert_eq!(sent[2], status("step 3/5"), "the latest status last: {sent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_does_not_wait_for_an_annotation_patch_in_flight() {
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = sent.clone();
        let w = Writes::with(move |op| {
            let log = log.clone();
            async move {
                // A slow annotation patch (a loaded API server), a quick status.
                let ms = if matches!(op, Op::Annotate(_)) { 500 } else { 10 };
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                log.lock().unwrap().push((op, tokio::time::Instant::now()));
            }
        });
        let t0 = tokio::time::Instant::now();
        w.queue(annotations(&[("completed", Some("bootstrap,provisioning"))]));
        tokio::task::yield_now().await;
        w.queue(status("step 5/5: done"));
        w.sync().await;
        let sent = sent.lock().unwrap();
        let done = |op: &Op| sent.iter().find(|(o, _)| o == op).map(|(_, t)| *t - t0);
        assert_eq!(
            done(&status("step 5/5: done")),
            Some(std::time::Duration::from_millis(10))
        );
        assert_eq!(
            done(&annotations(&[("completed", Some("bootstrap,provisioning"))])),
            Some(std::time::Duration::from_millis(500)),
            "sync waits for both lanes"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_writer_does_not_write_what_it_had_not_written_yet() {
        let (w, sent) = recording(std::time::Duration::from_millis(50));
        w.queue(status("step 1/5"));
        tokio::task::yield_now().await;
        w.queue(status("step 2/5"));
        drop(w);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(
            sent.lock().unwrap().is_empty(),
            "the write in flight was cancelled too"
        );
    }
}

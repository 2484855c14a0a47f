//! The writes of one host task (its part of the status, its annotations), made in the background and in
//! order, so the host's commands do not wait for the API server.
//!
//! Host work used to write between its commands: the phase's status before each phase, the completed-phases
//! annotation after it (about 12 writes per host, each one API round trip in the middle of host work). They
//! are queued instead; one writer per task sends them in the order they were queued, and what queued up
//! while a write was in flight goes out together: of consecutive status writes only the last (each is the
//! whole of host work's part, applied with SSA), consecutive annotation patches merged into one. The task
//! waits for the writes ([`Writes::sync`]) only before it ends, so the reconcile it triggers then reads them.
//!
//! Nothing needed after a restart or `clusterctl move` is lost by the delay: the completed-phases annotation
//! may land later than the host finished the phase, and a manager that stops in between runs that phase
//! again, which every phase allows (`HostServices::run` must be idempotent). That window existed before, for
//! the time of one write. A task that is aborted (its KKInstance released or deleted) drops what it had not
//! written yet, as an aborted task dropped its in-flight write before: a reset that follows must not find
//! the provisioning task's progress written over its own.

use std::{collections::BTreeMap, future::Future};

use capkk_api::{KKInstance, KKInstanceStatus};
use kube::Api;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::annotate;
use crate::reconcile::{HOSTWORK_FIELD_MANAGER, apply_status};

/// One queued write.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Host work's part of the status (server-side apply with its own field manager).
    Status(Box<KKInstanceStatus>),
    /// Annotations to set (`Some`) or remove (`None`), one merge patch.
    Annotate(BTreeMap<String, Option<String>>),
}

/// The writes that reach the API for `ops` queued in this order: consecutive status writes become the last
/// of them, consecutive annotation patches one patch (a later value for a key wins); the order between a
/// status write and an annotation patch is kept.
pub fn coalesce(ops: impl IntoIterator<Item = Op>) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::new();
    for op in ops {
        match (out.last_mut(), op) {
            (Some(Op::Status(last)), Op::Status(s)) => *last = s,
            (Some(Op::Annotate(last)), Op::Annotate(a)) => last.extend(a),
            (_, op) => out.push(op),
        }
    }
    out
}

enum Msg {
    Op(Op),
    Sync(oneshot::Sender<()>),
}

/// The background writer of one task. Dropping it drops what was not written yet (see the module doc).
pub struct Writes {
    tx: mpsc::UnboundedSender<Msg>,
    writer: tokio::task::JoinHandle<()>,
}

impl Writes {
    /// Start the writer for KKInstance `name`.
    pub fn start(api: Api<KKInstance>, name: String) -> Self {
        Self::with(move |op| {
            let (api, name) = (api.clone(), name.clone());
            async move { send(&api, &name, op).await }
        })
    }

    /// Start a writer that hands each write to `send`, one at a time.
    fn with<F, Fut>(send: F) -> Self
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

    /// Queue a write.
    pub fn queue(&self, op: Op) {
        // The writer only ends when this handle is dropped.
        let _ = self.tx.send(Msg::Op(op));
    }

    /// Wait until everything queued so far was written (or failed, which is logged).
    pub async fn sync(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Sync(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

impl Drop for Writes {
    fn drop(&mut self) {
        self.writer.abort();
    }
}

async fn send(api: &Api<KKInstance>, name: &str, op: Op) {
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
}

/// Send what was queued, in order; what queued up during a write goes out together ([`coalesce`]).
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
    fn consecutive_status_writes_become_the_last_one() {
        assert_eq!(
            coalesce([status("step 1/5"), status("step 2/5"), status("step 3/5")]),
            [status("step 3/5")]
        );
    }

    #[test]
    fn consecutive_annotation_patches_merge_and_a_later_value_wins() {
        assert_eq!(
            coalesce([
                annotations(&[("completed", Some("bootstrap")), ("block-move", Some("true"))]),
                annotations(&[("completed", Some("bootstrap,repository"))]),
                annotations(&[("block-move", None)]),
            ]),
            [annotations(&[
                ("completed", Some("bootstrap,repository")),
                ("block-move", None)
            ])]
        );
    }

    #[test]
    fn the_order_between_status_and_annotations_is_kept() {
        let ops = [
            status("step 1/5"),
            annotations(&[("completed", Some("bootstrap"))]),
            status("step 2/5"),
            status("step 3/5"),
            annotations(&[("completed", Some("bootstrap,repository"))]),
        ];
        assert_eq!(
            coalesce(ops),
            [
                status("step 1/5"),
                annotations(&[("completed", Some("bootstrap"))]),
                status("step 3/5"),
                annotations(&[("completed", Some("bootstrap,repository"))]),
            ]
        );
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
        assert_eq!(
            *sent.lock().unwrap(),
            [
                status("connecting"),
                status("step 1/5"),
                annotations(&[("completed", Some("bootstrap"))]),
                status("step 3/5"),
            ]
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
        assert!(sent.lock().unwrap().is_empty(), "the write in flight was cancelled too");
    }
}

//! The in-place upgrades (CAPI's `UpdateMachine` hook) this manager runs and their outcomes, by Machine UID:
//! one upgrade per Machine and per host, outcomes kept for CAPI's next call, bounded. Kept here, beside the other
//! background-work registries, so that the context names no reconciler's types (the hook's handler,
//! `crate::inplace::update`, runs the upgrades; this only tracks them).

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::task::JoinHandle;

/// How long a finished upgrade's outcome is kept (CAPI reads it within a retry or two).
pub(crate) const OUTCOME_TTL: Duration = Duration::from_secs(15 * 60);
/// At most this many upgrades are tracked (running or finished); more are refused until some finish.
pub(crate) const MAX_TRACKED: usize = 1024;

#[derive(Debug)]
enum State {
    Running,
    Done(String),
    Failed(String),
}

/// One Machine's upgrade.
#[derive(Debug)]
struct Entry {
    /// The Machine's namespace and name (to forget the entry once that Machine is gone).
    ns: String,
    name: String,
    /// The host's KKInstance (`namespace/name`): one task per host.
    host: String,
    version: String,
    state: State,
    /// When the state last changed.
    since: Instant,
}

/// The upgrade tasks, by Machine UID, with the version each one is for.
#[derive(Debug)]
pub(crate) struct Updates {
    tasks: Mutex<HashMap<String, Entry>>,
    /// The running tasks' handles, by Machine UID (aborted with the manager's other host work).
    handles: Mutex<HashMap<String, JoinHandle<()>>>,
    /// Set once the tasks were aborted: the manager stops, nothing starts any more.
    stopped: AtomicBool,
    ttl: Duration,
    max: usize,
}

impl Default for Updates {
    fn default() -> Self {
        Self::with_limits(OUTCOME_TTL, MAX_TRACKED)
    }
}

/// What a call finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nothing for this version: start one.
    None,
    /// Running for this long (seconds).
    Running(u64),
    /// Done, with what happened.
    Done(String),
    /// Failed (forgotten now: the next call starts a new attempt).
    Failed(String),
}

/// Whether a task could be started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Started: the caller runs it.
    Started,
    /// A task of this Machine, or of its host, runs already.
    Busy,
    /// [`MAX_TRACKED`] upgrades are tracked already.
    Full,
    /// The manager stops (lost its leadership, or was told to): its successor answers.
    Stopping,
}

/// A Machine whose upgrade is tracked: (UID, namespace, name, host).
pub(crate) struct Target<'a> {
    /// The stored Machine's UID.
    pub uid: &'a str,
    /// Its namespace.
    pub ns: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its host's KKInstance, `namespace/name`.
    pub host: &'a str,
}

impl Updates {
    /// Outcomes kept for `ttl`, at most `max` entries.
    pub(crate) fn with_limits(ttl: Duration, max: usize) -> Self {
        Self {
            tasks: Mutex::default(),
            handles: Mutex::default(),
            stopped: AtomicBool::new(false),
            ttl,
            max,
        }
    }

    /// The state of Machine `uid`'s upgrade to `version`; a failure is reported once and forgotten.
    pub(crate) fn seen(&self, uid: &str, version: &str) -> Seen {
        let Ok(mut t) = self.tasks.lock() else {
            return Seen::None;
        };
        match t.get(uid) {
            Some(e) if e.version == version => match &e.state {
                State::Running => Seen::Running(e.since.elapsed().as_secs()),
                State::Done(m) => Seen::Done(m.clone()),
                State::Failed(m) => {
                    let m = m.clone();
                    t.remove(uid);
                    Seen::Failed(m)
                }
            },
            _ => Seen::None,
        }
    }

    /// Mark `target` running for `version`, unless a task of that Machine or of its host runs (for any
    /// version), or [`MAX_TRACKED`] entries are kept.
    pub(crate) fn start(&self, target: &Target<'_>, version: &str) -> Start {
        let Ok(mut t) = self.tasks.lock() else {
            return Start::Busy;
        };
        if self.stopped.load(Ordering::SeqCst) {
            return Start::Stopping;
        }
        let running = |e: &Entry| matches!(e.state, State::Running);
        if t.get(target.uid).is_some_and(running) || t.values().any(|e| running(e) && e.host == target.host) {
            return Start::Busy;
        }
        if !t.contains_key(target.uid) && t.len() >= self.max {
            return Start::Full;
        }
        t.insert(
            target.uid.to_owned(),
            Entry {
                ns: target.ns.to_owned(),
                name: target.name.to_owned(),
                host: target.host.to_owned(),
                version: version.to_owned(),
                state: State::Running,
                since: Instant::now(),
            },
        );
        Start::Started
    }

    /// Run `task`, the upgrade of Machine `uid` that [`Updates::start`] started, in the background, where
    /// [`Updates::abort_all`] reaches it.
    pub(crate) fn spawn<F>(&self, uid: &str, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Ok(mut h) = self.handles.lock() else {
            return;
        };
        h.retain(|_, t| !t.is_finished());
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        h.insert(uid.to_owned(), tokio::spawn(task));
    }

    /// Abort every running upgrade and start none any more (the manager stops: it lost its leadership, or was
    /// told to). An upgrade cut on the host is run again by the next leader when CAPI asks again; it finds
    /// in place what was done.
    pub(crate) fn abort_all(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Ok(mut h) = self.handles.lock() {
            for (_, t) in h.drain() {
                t.abort();
            }
        }
        if let Ok(mut t) = self.tasks.lock() {
            t.retain(|_, e| !matches!(e.state, State::Running));
        }
    }

    /// Record how Machine `uid`'s upgrade to `version` ended.
    pub(crate) fn finish(&self, uid: &str, version: &str, outcome: Result<String, String>) {
        if let Ok(mut t) = self.tasks.lock()
            && let Some(e) = t.get_mut(uid)
            && e.version == version
        {
            e.state = match outcome {
                Ok(m) => State::Done(m),
                Err(m) => State::Failed(m),
            };
            e.since = Instant::now();
        }
    }

    /// Forget finished outcomes older than the TTL and those of Machines that are gone: `alive(ns, name, uid)`
    /// says whether that Machine still exists. Running tasks stay until they finish.
    pub(crate) fn sweep(&self, alive: impl Fn(&str, &str, &str) -> bool) {
        if let Ok(mut t) = self.tasks.lock() {
            t.retain(|uid, e| {
                matches!(e.state, State::Running)
                    || (e.since.elapsed() < self.ttl && alive(&e.ns, &e.name, uid))
            });
        }
    }

    /// How many upgrades are tracked.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tasks.lock().map(|t| t.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(uid: &'a str, host: &'a str) -> Target<'a> {
        Target {
            uid,
            ns: "ns",
            name: "m",
            host,
        }
    }

    #[test]
    fn a_running_upgrade_is_not_started_twice_a_failure_is_reported_once_and_done_stays_done() {
        let u = Updates::default();
        let m = target("uid-1", "ns/c.h1");
        assert_eq!(u.seen("uid-1", "v1.36.3"), Seen::None);
        assert_eq!(u.start(&m, "v1.36.3"), Start::Started);
        assert_eq!(u.start(&m, "v1.36.3"), Start::Busy, "one task per Machine");
        assert!(matches!(u.seen("uid-1", "v1.36.3"), Seen::Running(_)));
        assert_eq!(
            u.seen("uid-1", "v1.37.0"),
            Seen::None,
            "another version is another upgrade"
        );
        u.finish("uid-1", "v1.36.3", Err("kubeadm upgrade node exited 1".into()));
        assert_eq!(
            u.seen("uid-1", "v1.36.3"),
            Seen::Failed("kubeadm upgrade node exited 1".into())
        );
        assert_eq!(
            u.seen("uid-1", "v1.36.3"),
            Seen::None,
            "the next call starts a new attempt"
        );
        assert_eq!(u.start(&m, "v1.36.3"), Start::Started);
        u.finish("uid-1", "v1.36.3", Ok("done".into()));
        assert_eq!(u.seen("uid-1", "v1.36.3"), Seen::Done("done".into()));
        assert_eq!(u.seen("uid-1", "v1.36.3"), Seen::Done("done".into()));
    }

    #[test]
    fn a_recreated_machine_of_the_same_name_is_another_machine_and_is_not_answered_done() {
        let u = Updates::default();
        assert_eq!(u.start(&target("uid-old", "ns/c.h1"), "v1.36.3"), Start::Started);
        u.finish("uid-old", "v1.36.3", Ok("done".into()));
        // Same namespace, name and version; another UID.
        assert_eq!(u.seen("uid-new", "v1.36.3"), Seen::None);
        assert_eq!(u.start(&target("uid-new", "ns/c.h1"), "v1.36.3"), Start::Started);
    }

    #[test]
    fn one_upgrade_runs_on_a_host_whatever_machine_asks() {
        let u = Updates::default();
        assert_eq!(u.start(&target("uid-1", "ns/c.h1"), "v1.36.3"), Start::Started);
        assert_eq!(
            u.start(&target("uid-2", "ns/c.h1"), "v1.36.3"),
            Start::Busy,
            "a second Machine naming the same host waits"
        );
        assert_eq!(u.start(&target("uid-3", "ns/c.h2"), "v1.36.3"), Start::Started);
        u.finish("uid-1", "v1.36.3", Ok("done".into()));
        assert_eq!(u.start(&target("uid-2", "ns/c.h1"), "v1.36.3"), Start::Started);
    }

    #[test]
    fn finished_outcomes_expire_are_forgotten_with_their_machine_and_the_tracked_upgrades_are_bounded() {
        // Expiry: a zero TTL forgets every finished outcome at the next sweep; a running task stays.
        let u = Updates::with_limits(Duration::ZERO, 8);
        u.start(&target("uid-1", "ns/c.h1"), "v1.36.3");
        u.start(&target("uid-2", "ns/c.h2"), "v1.36.3");
        u.finish("uid-1", "v1.36.3", Ok("done".into()));
        u.sweep(|_, _, _| true);
        assert_eq!(u.seen("uid-1", "v1.36.3"), Seen::None, "expired");
        assert!(matches!(u.seen("uid-2", "v1.36.3"), Seen::Running(_)));
        assert_eq!(u.len(), 1);

        // Gone: a finished outcome of a Machine that no longer exists (or exists with another UID) is dropped.
        let u = Updates::with_limits(OUTCOME_TTL, 8);
        u.start(&target("uid-1", "ns/c.h1"), "v1.36.3");
        u.start(&target("uid-2", "ns/c.h2"), "v1.36.3");
        u.finish("uid-1", "v1.36.3", Ok("done".into()));
        u.finish("uid-2", "v1.36.3", Ok("done".into()));
        u.sweep(|ns, name, uid| ns == "ns" && name == "m" && uid == "uid-2");
        assert_eq!(u.seen("uid-1", "v1.36.3"), Seen::None, "gone");
        assert_eq!(u.seen("uid-2", "v1.36.3"), Seen::Done("done".into()));

        // Bounded: no more than `max` upgrades are tracked.
        let u = Updates::with_limits(OUTCOME_TTL, 2);
        assert_eq!(u.start(&target("a", "ns/h-a"), "v1.36.3"), Start::Started);
        assert_eq!(u.start(&target("b", "ns/h-b"), "v1.36.3"), Start::Started);
        assert_eq!(u.start(&target("c", "ns/h-c"), "v1.36.3"), Start::Full);
        u.finish("a", "v1.36.3", Ok("done".into()));
        u.sweep(|_, _, _| false);
        assert_eq!(u.start(&target("c", "ns/h-c"), "v1.36.3"), Start::Started);
        assert_eq!(u.len(), 2);
    }
}

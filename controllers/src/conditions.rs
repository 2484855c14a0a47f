//! `metav1.Condition` helpers: transition time changes only when the status changes.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

/// Longest message kept in a condition (the API allows 32 KiB; keep status small).
pub(crate) const MAX_MESSAGE: usize = 4096;

/// Set (or add) the condition `type_`.
pub(crate) fn set(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    set_raw(conds, type_, status, reason, message, generation)
}

/// Set the condition `type_` to `True` with reason `Ready` (the condition holds).
pub(crate) fn set_ready(
    conds: &mut Vec<Condition>,
    type_: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    set(
        conds,
        type_,
        true,
        capkk_api::consts::reasons::READY,
        message,
        generation,
    )
}

/// Set a condition with a raw status (`True`, `False`, `Unknown`).
pub(crate) fn set_raw(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    let mut message = message.into();
    if message.len() > MAX_MESSAGE {
        let mut cut = message.len() - MAX_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut += 1;
        }
        message = format!("...{}", &message[cut..]);
    }
    let now = Time(Timestamp::now());
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = now;
        }
        c.status = status.to_owned();
        c.reason = reason.to_owned();
        c.message = message;
        c.observed_generation = generation;
    } else {
        conds.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time: now,
        });
    }
}

/// Carry the transition times of `written` (the conditions last written, which the cache may not show yet)
/// into `conds`, computed from an older status: a condition whose status is the written one keeps the
/// written time; one whose status differs from it transitions now (unless its time is already later).
pub(crate) fn keep_transitions(conds: &mut [Condition], written: &[Condition]) {
    for c in conds.iter_mut() {
        let Some(w) = get(written, &c.type_) else {
            continue;
        };
        if c.status == w.status {
            c.last_transition_time = w.last_transition_time.clone();
        } else if c.last_transition_time.0 <= w.last_transition_time.0 {
            c.last_transition_time = Time(Timestamp::now());
        }
    }
}

/// The condition `type_`, if present.
pub(crate) fn get<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// True when `type_` is present with status `True`.
pub(crate) fn is_true(conds: &[Condition], type_: &str) -> bool {
    get(conds, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut c = Vec::new();
        set(&mut c, "Ready", false, "A", "m", Some(1));
        let t0 = c[0].last_transition_time.clone();
        std::thread::sleep(std::time::Duration::from_millis(5));
        set(&mut c, "Ready", false, "B", "m2", Some(2));
        assert_eq!(c[0].last_transition_time, t0);
        assert_eq!(c[0].reason, "B");
        assert_eq!(c[0].observed_generation, Some(2));
        set(&mut c, "Ready", true, "C", "", Some(2));
        assert_ne!(c[0].last_transition_time, t0);
        assert!(is_true(&c, "Ready"));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn long_messages_keep_their_tail() {
        let mut c = Vec::new();
        let msg = format!("{}END", "x".repeat(10_000));
        set(&mut c, "T", false, "R", msg, None);
        assert!(c[0].message.len() <= MAX_MESSAGE + 3);
        assert!(c[0].message.ends_with("END"));
    }

    #[test]
    fn times_computed_from_an_older_status_become_the_written_ones_unless_the_status_moved_on() {
        let at = |s: &str| Time(s.parse::<Timestamp>().unwrap());
        let cond = |type_: &str, status: &str, t: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(t),
        };
        let written = [
            cond("Paused", "False", "2026-01-01T00:00:01Z"),
            cond("Ready", "False", "2026-01-01T00:00:01Z"),
        ];
        // From a cached status without the written conditions: both were stamped "now" (here: later).
        let mut conds = vec![
            cond("Paused", "False", "2026-01-01T00:00:05Z"),
            cond("Ready", "True", "2026-01-01T00:00:00Z"),
            cond("New", "True", "2026-01-01T00:00:05Z"),
        ];
        keep_transitions(&mut conds, &written);
        assert_eq!(
            conds[0].last_transition_time,
            at("2026-01-01T00:00:01Z"),
            "unchanged: the written time"
        );
        assert!(
            conds[1].last_transition_time.0 > at("2026-01-01T00:00:01Z").0,
            "False -> True against what was written is a transition now"
        );
        assert_eq!(
            conds[2].last_transition_time,
            at("2026-01-01T00:00:05Z"),
            "not written: as computed"
        );
    }
}

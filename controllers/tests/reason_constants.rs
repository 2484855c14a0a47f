//! Every condition type, condition reason and event reason the controllers set is a constant of
//! `capkk_api::consts` (`conditions`, `reasons`, `events`), never a string literal: `docs/conditions.md` is
//! generated from those constants, so a literal would be a reason the reference does not know.
//!
//! What is read: the non-test code of `controllers/src` (files under `reconcile_tests/`, `fixtures.rs` and
//! everything after a file's first `#[cfg(test)]` are tests). Each call of the helpers that set a condition or
//! publish an event is split into its arguments, and the type and reason arguments must not be string
//! literals:
//!
//! | call | arguments | type, reason at |
//! |---|---|---|
//! | `conditions::set(conds, type, status, reason, message, generation)`, `set_raw(...)` | 6 | 1, 3 |
//! | `conditions::set_ready(conds, type, message, generation)` | 4 | 1 |
//! | `.event(object, warning, reason, action, note)` (the context's) | 5 | 2 |
//! | `.event(warning, reason, note)` (a host task's) | 3 | 1 |
//! | `.set(type, ok, reason, message)` (a host task's) | 4 | 0, 2 |

use std::{
    fs,
    path::{Path, PathBuf},
};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            if !p.ends_with("reconcile_tests") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("fixtures.rs") {
            out.push(p);
        }
    }
}

/// The top-level arguments of the call whose `(` is at `open`, as text; `None` when the parentheses never
/// close.
fn call_args(src: &str, open: usize) -> Option<Vec<String>> {
    let b = src.as_bytes();
    let mut depth = 0usize;
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut i = open;
    while i < b.len() {
        let c = b[i] as char;
        match c {
            '"' => {
                // A string literal, escapes included.
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                cur.push_str(&src[start..=i.min(b.len() - 1)]);
            }
            // A char literal ('"', '\'', '(') is not a string or a bracket; a lifetime is copied as is.
            '\'' if b.get(i + 2) == Some(&b'\'') && b.get(i + 1) != Some(&b'\\') => {
                cur.push_str(&src[i..i + 3]);
                i += 2;
            }
            '\'' if b.get(i + 1) == Some(&b'\\') => {
                let end = (i + 2..b.len()).find(|&j| b[j] == b'\'').unwrap_or(b.len() - 1);
                cur.push_str(&src[i..=end]);
                i = end;
            }
            '(' | '[' | '{' => {
                depth += 1;
                if depth > 1 {
                    cur.push(c);
                }
            }
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    args.push(cur.trim().to_owned());
                    return Some(args.into_iter().filter(|a| !a.is_empty()).collect());
                }
                cur.push(c);
            }
            ',' if depth == 1 => args.push(std::mem::take(&mut cur).trim().to_owned()),
            _ => cur.push(c),
        }
        i += 1;
    }
    None
}

/// `file:line: what` for every type or reason argument written as a string literal in `src`.
fn literal_reasons(file: &str, src: &str) -> Vec<String> {
    let code = src.split("#[cfg(test)]").next().unwrap_or_default();
    let mut problems = Vec::new();
    for (needle, positions) in [
        ("conditions::set(", &[(6, &[1usize, 3][..])][..]),
        ("conditions::set_raw(", &[(6, &[1, 3][..])][..]),
        ("conditions::set_ready(", &[(4, &[1][..])][..]),
        (".event(", &[(5, &[2][..]), (3, &[1][..])][..]),
        (".set(", &[(4, &[0, 2][..])][..]),
    ] {
        let mut from = 0;
        while let Some(at) = code[from..].find(needle) {
            let open = from + at + needle.len() - 1;
            from = open + 1;
            let Some(args) = call_args(code, open) else {
                continue;
            };
            let Some((_, idx)) = positions.iter().find(|(n, _)| *n == args.len()) else {
                continue;
            };
            for &i in *idx {
                if args[i].starts_with('"') {
                    let line = code[..open].lines().count();
                    problems.push(format!(
                        "{file}:{line}: {} with the literal {} (a constant of capkk_api::consts, documented, \
                         belongs there)",
                        needle.trim_end_matches('('),
                        args[i]
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn the_controllers_set_condition_types_and_reasons_only_from_constants() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    assert!(files.len() > 30, "too few sources found: {files:?}");
    let mut problems = Vec::new();
    let mut calls = 0;
    for f in &files {
        let src = fs::read_to_string(f).unwrap();
        let code = src.split("#[cfg(test)]").next().unwrap_or_default();
        calls += code.matches("conditions::set(").count() + code.matches(".event(").count();
        let rel = f.strip_prefix(root).unwrap().display().to_string();
        problems.extend(literal_reasons(&rel, &src));
    }
    // It cannot pass by finding no call: the controllers set conditions and publish events in dozens of places.
    assert!(calls > 30, "only {calls} condition/event calls found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_literal_reason_is_found_and_a_constant_or_a_message_literal_is_not() {
    let src = r#"
fn f() {
    conditions::set(&mut c, cond::READY, false, reasons::IN_PROGRESS, "host work pending", g);
    ctx.event(km, false, "HostClaimed", "Claim", format!("claimed host {h} ({})", a)).await;
    t.event(true, reasons::UNREACHABLE, msg.replace('"', "'")).await;
    t.set(cond::DELETING, false, "Gone", &msg);
}
#[cfg(test)]
mod tests { fn g() { ctx.event(km, false, "InTests", "Claim", "x").await; } }
"#;
    let problems = literal_reasons("x.rs", src);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].starts_with("x.rs:4: .event with the literal \"HostClaimed\""),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].starts_with("x.rs:6: .set with the literal \"Gone\""),
        "{}",
        problems[1]
    );
}

//! The docs name only what exists: every `make TARGET` in README.md, CONTRIBUTING.md, docs/ and the READMEs
//! of the tree is a target `make help` lists (the Makefile and its fragments), and every manager flag they
//! name is one of the manager's (its clap definition, [`Args`], aliases included). The README's flag table
//! names every flag the manager has, and says "shipped: V" wherever `config/default` passes a value other than
//! the binary's default (and then the value it passes).
//!
//! What is read: code only, i.e. fenced blocks and inline code spans (prose "make sure" is English). Within
//! code, commands are split at `|`, `&&`, `;`, `(`, `)`; a command's word after environment assignments and
//! wrappers (`sudo`, `env`, `nice -n 19`, ...) says whose flags follow:
//! - `make`: the words after it that look like target names are targets (`VAR=value` and options skipped;
//!   `make -C dir` is another Makefile and not checked).
//! - `manager` (any path): every `--flag` is the manager's.
//! - a tool of [`FOREIGN_TOOLS`] (clusterctl, kubectl, kubeadm, podman, ...): its flags are its own, not checked.
//! - anything else, e.g. a lone `` `--watch-filter` `` in a sentence or a table: every `--flag` is taken for
//!   the manager's, unless [`FOREIGN_FLAGS`] names it with the tool it belongs to (`--flavor` is clusterctl's).
//!
//! So a flag of another tool written alone in the docs needs a line in [`FOREIGN_FLAGS`]; a manager flag that
//! was renamed or removed is reported wherever it is written, except after another tool's name.
//! CHANGELOG.md is history (it names what was removed) and is not read.
//!
//! Run by `make verify` (`make verify-docs`) and by the unit tier.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

use capkk_controllers::manager::Args;
use clap::CommandFactory;

/// Commands whose flags are their own: a flag after one of them is not checked against the manager's.
/// The project's other tools are here too (`capkk-bench`, `sandbox`, `vm`, `capkk-mirror`, `mgmt.sh`, ...).
#[rustfmt::skip]
const FOREIGN_TOOLS: &[&str] = &[
    "apt-get", "awk", "bash", "capkk-bench", "capkk-chaos", "capkk-mirror", "cargo", "clusterctl", "clusterctl-kubekey.sh",
    "containerd", "crictl", "ctr",
    "curl", "cyclonedx-sbom", "diff", "docker", "du", "etcd", "find", "flanneld", "flux", "git", "go", "grep",
    "haproxy", "helm", "hosts.py", "ip", "journalctl", "keepalived", "kube-apiserver", "kube-controller-manager", "kube-proxy", "kubeadm",
    "kubectl", "kubelet", "longest-gap", "mgmt.sh", "mgmtctl", "mmdebstrap", "nft", "openssl", "parallel-tests",
    "podman", "python3", "qemu-img", "qemu-system-x86_64", "real.sh", "rsync", "runc", "sandbox", "scp", "sed",
    "sh", "ssh", "ssh-keygen", "sysctl", "systemctl", "tar", "tcg-knobs.py", "tee", "vm", "xargs",
    "e2e.test", "ginkgo", // the conformance suite (docs/conformance.md)
];

/// Flags of other tools that the docs write alone (not after the tool's name), with the tool.
/// No entry may be a manager flag (the first test fails on one).
#[rustfmt::skip]
const FOREIGN_FLAGS: &[(&str, &str)] = &[
    ("--addons-after-init", "test/vm/tcg-knobs.py"),
    ("--all-targets", "cargo"),
    ("--allocate-node-cidrs", "kube-controller-manager"),
    ("--artifact-mib", "capkk-bench"),
    ("--authorization-mode", "kube-apiserver"),
    ("--cgroup-v1", "test/vm/tcg-knobs.py"),
    ("--cgroupns", "podman run"),
    ("--check", "clusterctl-kubekey.sh"),
    ("--cluster-cidr", "kube-controller-manager"),
    ("--config", "clusterctl"),
    ("--cni-from", "test/vm/tcg-knobs.py"),
    ("--container-hosts", "test/vm/tcg-knobs.py"),
    ("--control-plane", "kubeadm join"),
    ("--control-plane-lb", "test/vm/tcg-knobs.py"),
    ("--control-plane-machine-count", "clusterctl generate cluster"),
    ("--cri-socket", "kubeadm"),
    ("--data-order", "capkk-bench"),
    ("--describe", "clusterctl generate provider"),
    ("--dest", "clusterctl-kubekey.sh"),
    ("--disable-admission-plugins", "kube-apiserver"),
    ("--flavor", "clusterctl generate cluster"),
    ("--from", "clusterctl-kubekey.sh"),
    ("--from-file", "kubectl create secret"),
    ("--guard-pid", "test/vm's vm"),
    ("--host-log", "capkk-bench"),
    ("--iface-can-reach", "flanneld"),
    ("--ignore-preflight-errors", "kubeadm"),
    ("--image-repository", "clusterctl-kubekey.sh"),
    ("--include-crd", "clusterctl delete"),
    ("--infrastructure", "clusterctl"),
    ("--ip-masq", "flanneld"),
    ("--k8s-io-mirror-secret", "test/vm/tcg-knobs.py"),
    ("--keep", "capkk-bench"),
    ("--kube-subnet-mgr", "flanneld"),
    ("--kubernetes-version", "clusterctl generate cluster"),
    ("--list-variables", "clusterctl generate cluster"),
    ("--local-config", "test/release/release-manifests.sh"),
    ("--machines", "capkk-bench"),
    ("--manager-log", "capkk-bench"),
    ("--manager-v", "test/mgmt's mgmtctl"),
    ("--methods", "capkk-bench"),
    ("--native-speed", "test/vm/tcg-knobs.py"),
    ("--network", "podman run"),
    ("--no-fail-fast", "cargo test"),
    ("--no-component-overrides", "test/vm/tcg-knobs.py"),
    ("--no-hosts", "podman run"),
    ("--node-ip", "kubelet"),
    ("--node-labels", "kubelet"),
    ("--now", "systemctl enable"),
    ("--one-file-system", "rm"),
    ("--privileged", "podman run"),
    ("--provider-id", "kubelet"),
    ("--runs", "capkk-bench"),
    ("--runtime", "podman run"),
    ("--service-cluster-ip-range", "kube-apiserver"),
    ("--show-conditions", "clusterctl describe cluster"),
    ("--simulate", "apt-get install"),
    ("--source", "test/vm's vm up"),
    ("--systemd", "podman run"),
    ("--target", "cargo-cyclonedx"),
    ("--test", "cargo test"),
    ("--timeout-s", "capkk-bench"),
    ("--tmpfs", "podman run"),
    ("--to-kubeconfig", "clusterctl move"),
    ("--ulimit", "podman run"),
    ("--wait-provider-timeout", "CAPI's e2e framework (test/capi-e2e)"),
    ("--wait-providers", "CAPI's e2e framework (test/capi-e2e)"),
    ("--warmup", "capkk-bench"),
    ("--worker-machine-count", "clusterctl generate cluster"),
    ("--workload", "capkk-bench"),
];

/// Targets of other projects' Makefiles that the docs name, with the project.
const FOREIGN_MAKE_TARGETS: &[(&str, &str)] = &[("static", "runc's Makefile (test/vm/artifacts/README.md)")];

/// Environment and wrapper commands before the command word (their own option values included).
const WRAPPERS: &[&str] = &["sudo", "env", "time", "exec", "nohup", "nice", "timeout", "watch"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The Markdown files read: README.md, CONTRIBUTING.md, docs/**/*.md and every other README.md of the tree.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>, all_md: bool) {
        let Ok(rd) = fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    walk(&p, out, all_md || name == "docs");
                }
            } else if name == "README.md" || (all_md && name.ends_with(".md")) {
                out.push(p);
            }
        }
    }
    let mut out = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    for dir in [
        "docs",
        "api",
        "controllers",
        "pkg",
        "test",
        "hack",
        "templates",
        "config",
    ] {
        walk(&root.join(dir), &mut out, dir == "docs");
    }
    out.retain(|p| p.is_file());
    out.sort();
    out.dedup();
    out
}

/// A piece of code in a Markdown file: a fenced block's line (continuations joined) or an inline code span.
#[derive(Debug)]
struct Code {
    line: usize,
    text: String,
}

/// The code of a Markdown document.
fn code_of(md: &str) -> Vec<Code> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    let mut para: Vec<(usize, &str)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    let lines: Vec<&str> = md.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        let t = line.trim_start();
        let fence_here = ['`', '~'].into_iter().find_map(|c| {
            let len = t.chars().take_while(|&x| x == c).count();
            (len >= 3).then_some((c, len))
        });
        if let Some((c, len)) = fence {
            if fence_here.is_some_and(|(c2, l2)| c2 == c && l2 >= len) && t.trim_end().chars().all(|x| x == c)
            {
                fence = None;
                if let Some((l, s)) = pending.take() {
                    out.push(Code { line: l, text: s });
                }
                continue;
            }
            // A block line; a trailing backslash continues the command on the next line.
            let (l, mut s) = pending.take().unwrap_or((n, String::new()));
            s.push(' ');
            s.push_str(line);
            if let Some(cut) = s.trim_end().strip_suffix('\\') {
                pending = Some((l, cut.to_owned()));
            } else {
                out.push(Code { line: l, text: s });
            }
            continue;
        }
        if fence_here.is_some() {
            spans(&para, &mut out);
            para.clear();
            fence = fence_here;
            continue;
        }
        if t.is_empty() {
            spans(&para, &mut out);
            para.clear();
        } else {
            para.push((n, line));
        }
    }
    spans(&para, &mut out);
    out
}

/// The inline code spans of a paragraph (a span may cross lines; a backtick run without its match is text).
fn spans(para: &[(usize, &str)], out: &mut Vec<Code>) {
    let mut text = String::new();
    let mut line_at = Vec::new();
    for (n, l) in para {
        line_at.extend(std::iter::repeat_n(*n, l.len() + 1));
        text.push_str(l);
        text.push('\n');
    }
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let run = b[i..].iter().take_while(|&&c| c == b'`').count();
        let start = i + run;
        let mut j = start;
        let mut end = None;
        while j < b.len() {
            if b[j] == b'`' {
                let r = b[j..].iter().take_while(|&&c| c == b'`').count();
                if r == run {
                    end = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match end {
            Some(e) => {
                out.push(Code {
                    line: line_at[i.min(line_at.len() - 1)],
                    text: text[start..e].replace('\n', " "),
                });
                i = e + run;
            }
            None => i = start,
        }
    }
}

/// What one piece of code names.
#[derive(Debug, Default, PartialEq, Eq)]
struct Names {
    targets: Vec<String>,
    /// Flags taken for the manager's: (flag, true when written as a prefix `--flag-*`).
    flags: Vec<(String, bool)>,
    /// Flags of [`FOREIGN_FLAGS`] found where a manager flag could be (counted, not checked).
    foreign: Vec<String>,
}

fn is_target_name(w: &str) -> bool {
    let mut c = w.chars();
    c.next().is_some_and(|f| f.is_ascii_alphanumeric())
        && w.chars().all(|x| x.is_ascii_alphanumeric() || "_.-".contains(x))
        && !w.ends_with('.')
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty()
            && k.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The `--flags` written in `s`: `--name`, `--name=value`, `<--name>`, `(--name)`, `--a/--b`, `--prefix-*`.
fn flags_in(s: &str) -> Vec<(String, bool)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < b.len() {
        let starts = b[i] == b'-'
            && b[i + 1] == b'-'
            && b[i + 2].is_ascii_lowercase()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-' || b[i - 1] == b'_'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while j < b.len()
            && (b[j].is_ascii_lowercase() || b[j].is_ascii_digit() || b[j] == b'-' || b[j] == b'.')
        {
            j += 1;
        }
        let name = s[i..j].trim_end_matches('.');
        let prefix = name.ends_with('-') && b.get(j) == Some(&b'*');
        out.push((name.trim_end_matches('-').to_owned(), prefix));
        i = j;
    }
    out
}

/// The targets and manager flags one piece of code names.
fn names_in(code: &str) -> Names {
    let mut names = Names::default();
    // A shell comment is prose: `# (make release instead adds ...)`.
    let code: String = code
        .split('\n')
        .map(|l| {
            let comment = l
                .char_indices()
                .find(|&(i, c)| c == '#' && (i == 0 || l.as_bytes()[i - 1].is_ascii_whitespace()));
            comment.map_or(l, |(i, _)| &l[..i])
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut s = code.replace("&&", "\n").replace("||", "\n").replace("$(", "\n");
    for sep in [';', '|', '(', ')'] {
        s = s.replace(sep, "\n");
    }
    for command in s.split('\n') {
        let words: Vec<&str> = command
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '\'' || c == '\\'))
            .filter(|w| !w.is_empty())
            .collect();
        let mut k = 0;
        while k < words.len() {
            let w = words[k];
            if w == "$" || is_assignment(w) {
                k += 1;
            } else if w == "flock" {
                // `flock [-o] FILE command`.
                k += 1;
                while k < words.len() && words[k].starts_with('-') {
                    k += 1;
                }
                k += 1;
            } else if WRAPPERS.contains(&w) {
                k += 1;
                // The wrapper's own options and value: `nice -n 19`, `timeout 60`.
                while k < words.len()
                    && (words[k].starts_with('-') || words[k].chars().all(|c| c.is_ascii_digit() || c == 's'))
                {
                    k += 1;
                }
            } else {
                break;
            }
        }
        let Some(&word) = words.get(k) else {
            continue;
        };
        if word.starts_with('#') {
            continue;
        }
        let tool = word.rsplit('/').next().unwrap_or(word);
        let rest = &words[k + 1..];
        if tool == "make" {
            if rest
                .iter()
                .any(|w| *w == "-C" || *w == "-f" || w.starts_with("--directory"))
            {
                continue;
            }
            for w in rest {
                if w.starts_with('-') || is_assignment(w) {
                    continue;
                }
                if is_target_name(w) {
                    if !FOREIGN_MAKE_TARGETS.iter().any(|(t, _)| t == w) {
                        names.targets.push((*w).to_owned());
                    }
                } else {
                    break;
                }
            }
        } else if tool == "manager" || tool == "capkk-manager" {
            names.flags.extend(flags_in(&rest.join(" ")));
        } else if FOREIGN_TOOLS.contains(&tool) {
            continue;
        } else {
            for (f, prefix) in flags_in(&words[k..].join(" ")) {
                if FOREIGN_FLAGS.iter().any(|(ff, _)| *ff == f) {
                    names.foreign.push(f);
                } else {
                    names.flags.push((f, prefix));
                }
            }
        }
    }
    names
}

/// The targets `make help` lists: rules with a `## ` description in the Makefile and the files it includes.
fn make_targets(root: &Path) -> BTreeSet<String> {
    let mut files = vec![root.join("Makefile")];
    let mut targets = BTreeSet::new();
    let mut i = 0;
    while i < files.len() {
        let text = fs::read_to_string(&files[i]).unwrap_or_else(|e| panic!("{}: {e}", files[i].display()));
        for line in text.lines() {
            if let Some(inc) = line.strip_prefix("include ") {
                files.extend(inc.split_whitespace().map(|f| root.join(f)));
                continue;
            }
            if line.starts_with(['\t', '#', ' ', '.']) || !line.contains(':') || !line.contains("## ") {
                continue;
            }
            let (lhs, rhs) = line.split_once(':').expect("a colon");
            if rhs.starts_with('=') || lhs.contains('=') {
                continue;
            }
            targets.extend(
                lhs.split_whitespace()
                    .filter(|t| is_target_name(t))
                    .map(str::to_owned),
            );
        }
        i += 1;
    }
    targets
}

/// Every long flag of the manager, aliases included (hidden ones too: the docs name them as accepted).
fn manager_flags() -> BTreeSet<String> {
    let mut cmd = Args::command();
    cmd.build();
    let mut out = BTreeSet::new();
    for a in cmd.get_arguments() {
        if let Some(l) = a.get_long() {
            out.insert(format!("--{l}"));
        }
        for alias in a.get_all_aliases().unwrap_or_default() {
            out.insert(format!("--{alias}"));
        }
    }
    out
}

/// The long flags the manager documents in `--help` (not hidden), without clap's own.
fn documented_manager_flags() -> BTreeSet<String> {
    let mut cmd = Args::command();
    cmd.build();
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| *l != "help" && *l != "version")
        .map(|l| format!("--{l}"))
        .collect()
}

/// Problems found in one document: `file:line: what`.
fn check_doc(
    file: &str,
    md: &str,
    targets: &BTreeSet<String>,
    flags: &BTreeSet<String>,
    seen: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for code in code_of(md) {
        let names = names_in(&code.text);
        *seen.entry("foreign flags".into()).or_default() += names.foreign.len();
        for t in names.targets {
            *seen.entry("targets".into()).or_default() += 1;
            if !targets.contains(&t) {
                problems.push(format!(
                    "{file}:{}: `make {t}`: no such target in `make help` (the Makefile and its fragments)",
                    code.line
                ));
            }
        }
        for (f, prefix) in names.flags {
            *seen.entry("flags".into()).or_default() += 1;
            let ok = if prefix {
                flags.iter().any(|m| m.starts_with(&format!("{f}-")))
            } else {
                flags.contains(&f)
            };
            if !ok {
                problems.push(format!(
                    "{file}:{}: `{f}{}` is not a manager flag (controllers/src/manager/args.rs); if it is another \
                     tool's, write the tool's name before it or add it to FOREIGN_FLAGS with the tool",
                    code.line,
                    if prefix { "-*" } else { "" }
                ));
            }
        }
    }
    problems
}

#[test]
fn the_docs_name_only_make_targets_and_manager_flags_that_exist() {
    let root = root();
    let targets = make_targets(&root);
    let flags = manager_flags();
    assert!(
        targets.len() > 50 && targets.contains("verify"),
        "make targets not read: {targets:?}"
    );
    assert!(
        flags.contains("--watch-filter") && flags.contains("--metrics-bind-addr"),
        "{flags:?}"
    );
    let files = doc_files(&root);
    assert!(files.len() >= 20, "too few docs found: {files:?}");
    let mut seen = BTreeMap::new();
    let mut problems = Vec::new();
    for f in &files {
        let md = fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        problems.extend(check_doc(&rel, &md, &targets, &flags, &mut seen));
    }
    // It cannot pass by reading nothing: today's docs name well over a hundred of each.
    assert!(
        seen.get("targets").copied().unwrap_or(0) > 100,
        "too few make targets found: {seen:?}"
    );
    assert!(
        seen.get("flags").copied().unwrap_or(0) > 100,
        "too few manager flags found: {seen:?}"
    );
    assert!(
        problems.is_empty(),
        "{} stale names in the docs:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // An entry of the allow-list never hides a manager flag.
    let managers: Vec<_> = FOREIGN_FLAGS.iter().filter(|(f, _)| flags.contains(*f)).collect();
    assert!(
        managers.is_empty(),
        "FOREIGN_FLAGS entries that are manager flags: {managers:?}"
    );
}

#[test]
fn the_readme_flag_table_names_every_manager_flag() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("### Manager flags")
        .expect("README has a Manager flags section");
    let section = &readme[start..];
    let section = &section[..section[4..].find("\n#").map(|i| i + 4).unwrap_or(section.len())];
    let named: BTreeSet<String> = flags_in(section).into_iter().map(|(f, _)| f).collect();
    let missing: Vec<_> = documented_manager_flags()
        .into_iter()
        .filter(|f| !named.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "README's Manager flags section lacks {missing:?} (`manager --help` lists them)"
    );
}

/// The manager args of `config/default` (what `clusterctl init` installs): flag -> value, a clusterctl variable
/// `${NAME:=default}` read as its default, a bare flag as `true`.
fn shipped_args(root: &Path) -> BTreeMap<String, String> {
    let text = fs::read_to_string(root.join("config/default/manager_args_patch.yaml")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(arg) = line.trim_start().strip_prefix("- --") else {
            continue;
        };
        let (flag, value) = arg.split_once('=').unwrap_or((arg, "true"));
        let value = match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
            Some(var) => var.split_once(":=").map_or("", |(_, d)| d),
            None => value,
        };
        out.insert(format!("--{}", flag.trim()), value.trim().to_owned());
    }
    out
}

/// What a README flag-table row says is shipped: `(shipped: `V`)` or `(shipped: on|off)`, as `V`/`true`/`false`.
fn readme_shipped(row: &str) -> Option<String> {
    let rest = row.split_once("shipped: ")?.1;
    let value = match rest.strip_prefix('`') {
        Some(r) => r.split('`').next().unwrap_or_default(),
        None => rest.split([')', ',', ';', ' ']).next().unwrap_or_default(),
    };
    Some(match value {
        "on" => "true".to_owned(),
        "off" => "false".to_owned(),
        v => v.to_owned(),
    })
}

#[test]
fn the_readme_flag_table_shows_what_the_shipped_manifests_pass() {
    let root = root();
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    let mut cmd = Args::command();
    cmd.build();
    let shipped = shipped_args(&root);
    assert!(shipped.len() >= 5, "config/default's args not read: {shipped:?}");
    let mut problems = Vec::new();
    for (flag, value) in &shipped {
        let default: Vec<String> = cmd
            .get_arguments()
            .find(|a| a.get_long().is_some_and(|l| format!("--{l}") == *flag))
            .map(|a| {
                a.get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let row = readme.lines().find(|l| {
            l.starts_with("| ")
                && l.split('|')
                    .nth(1)
                    .is_some_and(|c| c.contains(&format!("`{flag}`")))
        });
        let Some(row) = row else {
            problems.push(format!("{flag}: no row in README's Manager flags table"));
            continue;
        };
        match readme_shipped(row) {
            Some(v) if v != *value => {
                problems.push(format!("{flag}: README says shipped `{v}`, config/default passes `{value}`"))
            }
            None if default.join(",") != *value => problems.push(format!(
                "{flag}: config/default passes `{value}` (the binary's default: {default:?}); README's row must say \
                 (shipped: `{value}`)"
            )),
            _ => {}
        }
    }
    assert!(
        problems.is_empty(),
        "README's flag table and config/default disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_shipped_manifests_pass_only_manager_flags() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap().filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() && !p.ends_with("crd/bases") {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p);
            }
        }
    }
    let root = root();
    let mut files = Vec::new();
    walk(&root.join("config"), &mut files);
    let flags = manager_flags();
    let mut found = 0;
    let mut problems = Vec::new();
    for f in files {
        for (n, line) in fs::read_to_string(&f).unwrap().lines().enumerate() {
            // The manager container's args: `- --flag` or `- --flag=value` items (config/ has no other container).
            let Some(arg) = line.trim_start().strip_prefix("- --") else {
                continue;
            };
            found += 1;
            let flag = format!("--{}", arg.split('=').next().unwrap_or_default().trim());
            if !flags.contains(&flag) {
                problems.push(format!(
                    "{}:{}: {flag}",
                    f.strip_prefix(&root).unwrap().display(),
                    n + 1
                ));
            }
        }
    }
    assert!(found >= 5, "no manager args found under config/");
    assert!(
        problems.is_empty(),
        "manifests pass flags the manager does not have:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_missing_target_and_a_missing_manager_flag_are_reported_with_their_line() {
    let targets: BTreeSet<String> = ["verify".to_owned()].into();
    let flags: BTreeSet<String> = ["--watch-filter".to_owned()].into();
    let md = "Run `make verify` then\n`make no-such-target`.\n\n```sh\nmanager --watch-filter x \\\n  --no-such-flag\n```\n\nSet `--gone-flag` and `--flavor x`.\n";
    let problems = check_doc("x.md", md, &targets, &flags, &mut BTreeMap::new());
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].starts_with("x.md:2: `make no-such-target`"),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].starts_with("x.md:5: `--no-such-flag`"),
        "{}",
        problems[1]
    );
    assert!(
        problems[2].starts_with("x.md:9: `--gone-flag`"),
        "{}",
        problems[2]
    );
}

#[test]
fn prose_and_other_tools_flags_are_not_taken_for_names() {
    let names = names_in("clusterctl init --infrastructure kubekey && kubectl get kki --watch");
    assert_eq!(names, Names::default());
    // English "make" outside code is never read.
    assert!(code_of("make sure the hosts answer; make it so\n").is_empty());
    let names = names_in("REAL_NAME=x nice -n 19 make e2e-real REAL_KEEP=1 2>&1 | tee log");
    assert_eq!(names.targets, ["e2e-real"]);
    assert_eq!(
        flags_in("<--private-key-dir>/ns (--v 2) --webhook-port/--webhook-cert-dir --runtime-extension-*")
            .len(),
        5
    );
    assert!(flags_in("--runtime-extension-*")[0].1, "a prefix");
}

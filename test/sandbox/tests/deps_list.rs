//! `hack/deps.list` names every command that the tests and scripts run on this machine, so that a fresh machine
//! that ran `make deps` passes `make test` (shellcheck once slipped: CI passed only where it was installed).
//!
//! What is read (no command runs; the check takes milliseconds):
//! - Rust, every `.rs` of the workspace: `Command::new("x")`, `find_tool("x")`, `which("x")`, a helper
//!   `run("x", …)` called with a program name, and the `("tool", "package")` rows of `REQUIRED_TOOLS` and
//!   `require_tools(&[…])` (whose package must also be the one deps.list names for that tool).
//! - Shell, every script of `hack/`, `test/` and `.ci/` (`*.sh`, or a `sh`/`bash` first line): the command word of
//!   each simple command, also inside `$(…)`, backquotes and `<(…)`, and the command a wrapper (`sudo`, `env`,
//!   `timeout`, `xargs`, `ip netns exec`, …) runs. Here-document bodies, quoted text, `[[ … ]]`, `(( … ))` and
//!   `case` patterns are not commands; words holding `$` or `/` are variables or paths, not names to look up.
//! - Make, the recipes of `Makefile` and every `*.mk`, read as shell once make's own `$(…)` are set aside.
//!
//! Every command found must be one of: a `provides` entry of hack/deps.list; a bash builtin or keyword
//! ([`SHELL`]); a command of a Debian package every Debian system has ([`BASE`], with the package); a command
//! hack/deps.list need not install, with the reason ([`NOT_LISTED`]: toolchains hack/deps.sh checks itself,
//! make, git, tools of targets outside `make test`); something the project builds ([`BUILT`]); or a function a
//! scanned script defines. Anything else fails the test, naming the command and where it is run. An entry goes
//! into an allow-list only with its reason.
//!
//! Run by `make verify` (`make verify-deps`) and by the unit tier (capkk-sandbox's tests).
//!
//! Not seen (so not checked): command text Rust builds at run time for `sh -c`, programs behind a variable
//! (`"$KUBECTL"`), commands run on sandbox hosts or VMs by the host scripts (`pkg/service/host`: the node's
//! business), and Python. It cannot pass by finding nothing: it fails unless it scanned a minimum of files and
//! found commands known to be run from each kind of source ([`SENTINELS`]), and the last test shows it failing
//! on a deps.list without shellcheck.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Bash builtins and reserved words: part of the shell, never a package.
#[rustfmt::skip]
const SHELL: &[&str] = &[
    "!", ".", ":", "[", "[[", "]]", "alias", "bg", "bind", "break", "builtin", "caller", "case", "cd", "command",
    "compgen", "complete", "continue", "declare", "dirs", "disown", "do", "done", "echo", "elif", "else",
    "enable", "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi", "for", "function", "getopts",
    "hash", "help", "history", "if", "in", "jobs", "kill", "let", "local", "logout", "mapfile", "popd",
    "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "select", "set", "shift", "shopt",
    "source", "suspend", "test", "then", "time", "times", "trap", "true", "type", "typeset", "ulimit", "umask",
    "unalias", "unset", "until", "wait", "while", "{", "}",
];

/// Packages every Debian system has (`Essential: yes`, or `Priority: required` and part of a minimal
/// `mmdebstrap --variant=minbase`/Debian container), with the commands of theirs that the scripts run. A command
/// from any other package belongs in hack/deps.list.
#[rustfmt::skip]
const BASE: &[(&str, &[&str])] = &[
    ("coreutils", &[
        "base64", "basename", "cat", "chgrp", "chmod", "chown", "chroot", "comm", "cp", "cut", "date", "dd", "df",
        "dirname", "du", "env", "expr", "fold", "head", "id", "install", "ln", "ls", "mkdir", "mkfifo", "mknod",
        "mktemp", "mv", "nice", "nohup", "nproc", "od", "paste", "printenv", "readlink", "realpath", "rm", "rmdir",
        "seq", "sha256sum", "sleep", "sort", "split", "stat", "stdbuf", "sync", "tac", "tail", "tee", "timeout",
        "touch", "tr", "truncate", "uname", "uniq", "wc", "whoami", "yes",
    ]),
    ("bash", &["bash"]),
    ("dash", &["sh"]),
    ("grep", &["grep", "egrep"]),
    ("sed", &["sed"]),
    ("mawk (awk)", &["awk"]),
    ("findutils", &["find", "xargs"]),
    ("tar", &["tar"]),
    ("gzip", &["gzip", "gunzip", "zcat"]),
    ("diffutils", &["cmp", "diff"]),
    ("util-linux", &["flock", "getopt", "mountpoint"]),
    ("mount", &["mount", "umount", "losetup"]),
    ("hostname", &["hostname"]),
    ("passwd", &["chpasswd", "useradd", "usermod", "groupadd", "userdel"]),
    ("login", &["su"]),
    ("debianutils", &["which", "run-parts"]),
    ("dpkg", &["dpkg", "dpkg-deb", "dpkg-query"]),
    ("apt", &["apt-get", "apt-cache", "apt-config"]),
    ("ncurses-bin", &["tput"]),
    ("libc-bin", &["ldd", "getent", "ldconfig"]),
];

/// Commands hack/deps.list does not install, each with the reason it need not.
const NOT_LISTED: &[(&str, &str)] = &[
    (
        "cargo",
        "Rust: hack/deps.sh checks the version against rust-version (rustup, not Debian)",
    ),
    ("rustc", "Rust: hack/deps.sh checks it"),
    ("rustup", "Rust's installer; used only when present"),
    (
        "go",
        "Go: hack/deps.sh checks the version against test/mgmt/tools/*/go.mod (go.dev, not Debian)",
    ),
    (
        "make",
        "every entry point is a make target: a machine that runs them has make",
    ),
    (
        "docker",
        "only `make docker-build`, for those who build with Docker; `make test` never runs it",
    ),
    (
        "dot",
        "Graphviz, only `make docs-diagrams` (the diagrams are committed rendered); it names the package",
    ),
    (
        "shasum",
        "macOS's SHA-256 tool: the release's clusterctl-kubekey.sh runs it only where coreutils' sha256sum is missing (a user's Mac)",
    ),
];

/// Shell scripts whose commands run on a VM guest or a node, never on this machine, each with the reason: the
/// scan skips them (the guest's image provides what they run); a listed file that is gone fails the test.
const ON_GUESTS: &[(&str, &str)] = &[(
    "test/bench/src/real-vm-verify.sh",
    "capkk-bench real-vm pipes it to `bash -s` over SSH on the VM it provisioned (containerd's tools, journalctl)",
)];

/// Commands the project builds itself (cargo, `make mgmt-bin`, the node artifacts): never a machine package.
const BUILT: &[(&str, &str)] = &[
    ("kubectl", "make mgmt-bin"),
    ("clusterctl", "make mgmt-bin"),
    ("etcd", "make mgmt-bin"),
    ("kube-apiserver", "make mgmt-bin"),
    ("crdgen", "cargo (api)"),
    ("manager", "cargo (controllers)"),
    ("cargo-fuzz", "`make fuzz-cloudinit` installs it with cargo"),
];

/// Commands known to be run from each kind of source. If the scanner stops seeing one of them, the scanner is
/// broken (or the source moved): the test fails rather than pass on what it no longer reads.
const SENTINELS: &[(Kind, &str)] = &[
    (Kind::Rust, "shellcheck"),
    (Kind::Rust, "qemu-img"),
    (Kind::Rust, "ssh-keygen"),
    (Kind::Shell, "dpkg-scanpackages"),
    (Kind::Shell, "mmdebstrap"),
    (Kind::Shell, "curl"),
    (Kind::Make, "column"),
];

/// Where a command was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Rust,
    Shell,
    Make,
}

/// What the sources run: command -> (kind, first place it is run).
#[derive(Default)]
struct Scan {
    commands: BTreeMap<String, Vec<(Kind, String)>>,
    /// `("tool", "package")` rows of the Rust tool tables, with their place.
    tool_rows: Vec<(String, String, String)>,
    /// Functions the scripts define (called like commands).
    functions: BTreeSet<String>,
    files: BTreeMap<Kind, usize>,
}

impl Scan {
    fn add(&mut self, cmd: &str, kind: Kind, at: String) {
        self.commands.entry(cmd.to_string()).or_default().push((kind, at));
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Files under `dir` (recursively), skipping build output and VCS directories.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                walk(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

fn scan_tree(root: &Path) -> Scan {
    let mut scan = Scan::default();
    let mut all = Vec::new();
    walk(root, &mut all);
    all.sort();
    for p in &all {
        let r = rel(root, p);
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if r.starts_with("pkg/cloudinit/fuzz/") || ON_GUESTS.iter().any(|(f, _)| *f == r) {
            continue;
        }
        if name.ends_with(".rs") {
            rust_commands(&fs::read_to_string(p).unwrap(), &r, &mut scan);
            *scan.files.entry(Kind::Rust).or_default() += 1;
        } else if name == "Makefile" || name.ends_with(".mk") {
            make_commands(&fs::read_to_string(p).unwrap(), &r, &mut scan);
            *scan.files.entry(Kind::Make).or_default() += 1;
        } else if ["hack/", "test/", ".ci/"].iter().any(|d| r.starts_with(d)) {
            let Ok(text) = fs::read_to_string(p) else { continue };
            let first = text.lines().next().unwrap_or("");
            let shell_line = first.starts_with("#!") && (first.ends_with("sh") || first.contains("bash"));
            if name.ends_with(".sh") || shell_line {
                shell_commands(&text, &r, Kind::Shell, &mut scan);
                *scan.files.entry(Kind::Shell).or_default() += 1;
            }
        }
    }
    scan
}

// ---------------------------------------------------------------------------------------------------- Rust

/// The string literal starting right after `prefix` at each occurrence, when the call is not a method call.
fn literal_args<'a>(line: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = line[from..].find(prefix) {
        let at = from + i;
        from = at + prefix.len();
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c == '.' || c == '_' || c.is_alphanumeric()) {
            continue;
        }
        let rest = &line[from..];
        if let Some(end) = rest.find('"') {
            out.push(&rest[..end]);
        }
    }
    out
}

fn is_name(w: &str) -> bool {
    !w.is_empty()
        && w.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && w.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
}

fn rust_commands(text: &str, file: &str, scan: &mut Scan) {
    let mut in_table = false;
    for (n, line) in text.lines().enumerate() {
        let at = format!("{file}:{}", n + 1);
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for prefix in ["Command::new(\"", "find_tool(\"", "which(\""] {
            for w in literal_args(line, prefix) {
                if is_name(w) {
                    scan.add(w, Kind::Rust, at.clone());
                }
            }
        }
        // A helper taking the program first: `run("shellcheck", &[…])` (not `run("a script …")`).
        for w in literal_args(line, "run(\"") {
            let after = &line[line.find(&format!("run(\"{w}\"")).unwrap() + w.len() + 6..];
            if is_name(w) && after.starts_with(',') {
                scan.add(w, Kind::Rust, at.clone());
            }
        }
        if line.contains("REQUIRED_TOOLS: [") || line.contains("require_tools(&[") {
            in_table = true;
            continue;
        }
        if in_table {
            if code.starts_with(']') {
                in_table = false;
            } else if let Some(row) = code.strip_prefix("(\"") {
                let parts: Vec<&str> = row.split('"').collect();
                if parts.len() >= 3 && parts[1] == ", " {
                    scan.add(parts[0], Kind::Rust, at.clone());
                    scan.tool_rows
                        .push((parts[0].to_string(), parts[2].to_string(), at.clone()));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------- Shell

/// A token of a shell line.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A word; `plain` when it is made only of unquoted literal characters (a name that can be looked up).
    Word { text: String, plain: bool },
    /// An operator that ends a simple command: `;` `&` `|` `&&` `||` `(` `)` newline.
    Sep,
    /// `;;` (or `;&`, `;;&`): the end of a `case` branch.
    CaseEnd,
    /// `)` closing a `case` pattern is a Sep too; kept apart so patterns can end.
    Close,
    /// A redirection operator: the next word is its target.
    Redirect,
}

/// Index of the `close` that matches the `open` at `chars[start]` (quotes and nesting respected).
fn matching(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '\'' => {
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

/// Tokens of `s`; the commands of `$(…)`, backquotes and `<(…)` are scanned into `subs` (each a token list).
fn tokens(s: &str, subs: &mut Vec<Vec<Tok>>) -> Vec<Tok> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    let mut plain = true;
    let mut in_word = false;
    let flush = |out: &mut Vec<Tok>, word: &mut String, plain: &mut bool, in_word: &mut bool| {
        if *in_word {
            out.push(Tok::Word {
                text: std::mem::take(word),
                plain: *plain,
            });
        }
        *plain = true;
        *in_word = false;
    };
    let sub = |inner: &str, subs: &mut Vec<Vec<Tok>>| {
        let t = tokens(inner, subs);
        subs.push(t);
    };
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        match ch {
            '#' if !in_word => {
                while i + 1 < c.len() && c[i + 1] != '\n' {
                    i += 1;
                }
            }
            ' ' | '\t' => flush(&mut out, &mut word, &mut plain, &mut in_word),
            '\n' => {
                flush(&mut out, &mut word, &mut plain, &mut in_word);
                out.push(Tok::Sep);
            }
            '\\' => {
                in_word = true;
                plain = false;
                i += 1;
            }
            '\'' => {
                in_word = true;
                plain = false;
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                plain = false;
                let end = {
                    let mut j = i + 1;
                    while j < c.len() && c[j] != '"' {
                        if c[j] == '\\' {
                            j += 1;
                        } else if c[j] == '$' && c.get(j + 1) == Some(&'(') {
                            let close = matching(&c, j + 1, '(', ')');
                            if c.get(j + 2) != Some(&'(') {
                                sub(&c[j + 2..close.min(c.len())].iter().collect::<String>(), subs);
                            }
                            j = close;
                        } else if c[j] == '`' {
                            let close = (j + 1..c.len()).find(|&k| c[k] == '`').unwrap_or(c.len());
                            sub(&c[j + 1..close].iter().collect::<String>(), subs);
                            j = close;
                        }
                        j += 1;
                    }
                    j
                };
                i = end;
            }
            '`' => {
                in_word = true;
                plain = false;
                let close = (i + 1..c.len()).find(|&k| c[k] == '`').unwrap_or(c.len());
                sub(&c[i + 1..close].iter().collect::<String>(), subs);
                i = close;
            }
            '$' => {
                in_word = true;
                plain = false;
                match c.get(i + 1) {
                    Some('(') => {
                        let close = matching(&c, i + 1, '(', ')');
                        if c.get(i + 2) != Some(&'(') {
                            sub(&c[i + 2..close.min(c.len())].iter().collect::<String>(), subs);
                        }
                        i = close;
                    }
                    Some('{') => {
                        let close = matching(&c, i + 1, '{', '}');
                        let inner: String = c[i + 2..close.min(c.len())].iter().collect();
                        // `${CARGO:-cargo}` in command position runs `cargo` by default.
                        if let Some((_, default)) = inner.split_once(":-")
                            && is_name(default)
                            && word.is_empty()
                        {
                            word.push_str(default);
                            plain = c.get(close + 1).is_none_or(|n| " \t;|&)".contains(*n));
                        }
                        i = close;
                    }
                    _ => {}
                }
            }
            '<' | '>' => {
                // Process substitution runs commands; any other redirection takes the next word as its target.
                if c.get(i + 1) == Some(&'(') {
                    let close = matching(&c, i + 1, '(', ')');
                    sub(&c[i + 2..close.min(c.len())].iter().collect::<String>(), subs);
                    in_word = true;
                    plain = false;
                    i = close;
                } else {
                    // `2>` `&>`: the digits/`&` before belong to the operator, not to a word.
                    if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                        word.clear();
                        in_word = false;
                        plain = true;
                    }
                    flush(&mut out, &mut word, &mut plain, &mut in_word);
                    while i + 1 < c.len() && "<>&|-".contains(c[i + 1]) {
                        i += 1;
                    }
                    // `>&2`, `2>&1`: a descriptor, not a file word.
                    let mut j = i + 1;
                    while j < c.len() && c[j].is_ascii_digit() {
                        j += 1;
                    }
                    if j > i + 1 && (j == c.len() || " \t;|&)\n".contains(c[j])) {
                        i = j - 1;
                    } else {
                        out.push(Tok::Redirect);
                    }
                }
            }
            ';' => {
                flush(&mut out, &mut word, &mut plain, &mut in_word);
                if c.get(i + 1) == Some(&';') || c.get(i + 1) == Some(&'&') {
                    i += 1;
                    if c.get(i + 1) == Some(&'&') {
                        i += 1;
                    }
                    out.push(Tok::CaseEnd);
                } else {
                    out.push(Tok::Sep);
                }
            }
            '&' if c.get(i + 1) == Some(&'>') => {
                // `&>file`: both outputs to a file.
                flush(&mut out, &mut word, &mut plain, &mut in_word);
                i += 1;
                while i + 1 < c.len() && c[i + 1] == '>' {
                    i += 1;
                }
                out.push(Tok::Redirect);
            }
            '|' | '&' => {
                flush(&mut out, &mut word, &mut plain, &mut in_word);
                if c.get(i + 1) == Some(&ch) {
                    i += 1;
                }
                out.push(Tok::Sep);
            }
            '(' if in_word && word.ends_with('=') => {
                // An array assignment `a=(x y)`: values, not commands.
                let close = matching(&c, i, '(', ')');
                plain = false;
                i = close;
            }
            '(' if !in_word && c.get(i + 1) == Some(&'(') => {
                // `(( arithmetic ))`
                i = matching(&c, i, '(', ')');
            }
            '(' => {
                let fn_def = in_word && c.get(i + 1) == Some(&')');
                flush(&mut out, &mut word, &mut plain, &mut in_word);
                if fn_def {
                    out.push(Tok::Word {
                        text: "()".into(),
                        plain: false,
                    });
                    i += 1;
                } else {
                    out.push(Tok::Sep);
                }
            }
            ')' => {
                flush(&mut out, &mut word, &mut plain, &mut in_word);
                out.push(Tok::Close);
            }
            _ => {
                in_word = true;
                word.push(ch);
            }
        }
        i += 1;
    }
    flush(&mut out, &mut word, &mut plain, &mut in_word);
    out
}

/// Options with a separate value, per wrapper that runs the command after its arguments.
const WRAPPERS: &[(&str, &[&str], usize)] = &[
    // (wrapper, options taking a value, positional arguments before the command)
    ("sudo", &["-u", "-g", "-C", "-D", "-h", "-p"], 0),
    ("env", &["-u", "-C", "-S"], 0),
    ("exec", &["-a"], 0),
    ("command", &[], 0),
    ("time", &[], 0),
    ("nice", &["-n"], 0),
    ("nohup", &[], 0),
    ("setsid", &[], 0),
    ("timeout", &["-s", "-k"], 1),
    ("xargs", &["-I", "-n", "-P", "-L", "-d", "-a", "-s", "-E"], 0),
    ("flock", &["-w", "-E"], 1),
    ("nsenter", &["-t", "-S", "-G", "-n", "-m", "-u", "-p"], 0),
    ("unshare", &[], 0),
    ("stdbuf", &["-i", "-o", "-e"], 0),
    ("runuser", &["-u", "-g"], 0),
];

/// Shell state while reading the tokens of one script.
#[derive(Default)]
struct ShellState {
    /// Open `case` statements: `true` while reading patterns.
    cases: Vec<bool>,
    /// Inside `case WORD in` before `in`, or `for NAME in …` before `do`/`;`.
    skip_until: Option<&'static str>,
    in_test: bool,
}

fn shell_commands(text: &str, file: &str, kind: Kind, scan: &mut Scan) {
    let mut st = ShellState::default();
    let mut heredoc: Option<String> = None;
    let mut logical = String::new();
    let mut start = 0;
    for (n, raw) in text.lines().enumerate() {
        if let Some(end) = &heredoc {
            if raw.trim() == end {
                heredoc = None;
            }
            continue;
        }
        if logical.is_empty() {
            start = n + 1;
        }
        // Here-document: its body is data (or another language), not commands.
        if let Some(i) = raw.find("<<")
            && !raw[i..].starts_with("<<<")
            && !raw[..i].ends_with('<')
            && !raw[..i].ends_with('$')
        {
            let tag: String = raw[i + 2..]
                .trim_start_matches('-')
                .trim_start()
                .trim_start_matches(['\'', '"'])
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // Tags are capitals (EOF, YAML): `a << b` in quoted text is no here-document.
            if tag.len() >= 2
                && tag
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                heredoc = Some(tag);
            }
        }
        if logical.is_empty() && raw.trim_start().starts_with('#') {
            continue;
        }
        if let Some(cont) = raw.strip_suffix('\\') {
            logical.push_str(cont);
            logical.push(' ');
            continue;
        }
        logical.push_str(raw);
        if open_quote(&logical) {
            // A quoted string (often a program for python3 -c or awk) goes on over the next lines.
            logical.push('\n');
            continue;
        }
        let line = std::mem::take(&mut logical);
        let mut subs = Vec::new();
        let toks = tokens(&line, &mut subs);
        let at = format!("{file}:{start}");
        commands_of(&toks, &at, kind, &mut st, scan);
        let mut i = 0;
        while i < subs.len() {
            let t = subs[i].clone();
            commands_of(&t, &at, kind, &mut ShellState::default(), scan);
            i += 1;
        }
    }
}

/// True when `s` ends inside a single- or double-quoted string.
fn open_quote(s: &str) -> bool {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut word = false;
    while i < c.len() {
        match c[i] {
            '\\' => i += 1,
            '#' if !word => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            q @ ('\'' | '"') => {
                i += 1;
                while i < c.len() && c[i] != q {
                    if q == '"' && c[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= c.len() {
                    return true;
                }
            }
            _ => {}
        }
        word = i < c.len() && !c[i].is_whitespace() && !";|&()".contains(c[i]);
        i += 1;
    }
    false
}

/// Records the command words of `toks` (one logical line) in `scan`.
fn commands_of(toks: &[Tok], at: &str, kind: Kind, st: &mut ShellState, scan: &mut Scan) {
    let mut expect_cmd = true;
    let mut wrapper: Option<(&[&str], usize)> = None;
    let mut skip_value = false;
    let mut after_redirect = false;
    let mut ip_netns = 0;
    let mut prev_word: Option<String> = None;
    for (idx, t) in toks.iter().enumerate() {
        match t {
            Tok::Sep | Tok::Close | Tok::CaseEnd => {
                if *t == Tok::CaseEnd
                    && let Some(top) = st.cases.last_mut()
                {
                    *top = true;
                }
                if *t == Tok::Close
                    && let Some(top) = st.cases.last_mut()
                    && *top
                {
                    *top = false;
                }
                if st.skip_until == Some("do") && *t == Tok::Sep {
                    st.skip_until = None;
                }
                expect_cmd = true;
                wrapper = None;
                ip_netns = 0;
                after_redirect = false;
                prev_word = None;
            }
            Tok::Redirect => after_redirect = true,
            Tok::Word { text, plain } => {
                let w = text.as_str();
                if after_redirect {
                    after_redirect = false;
                    continue;
                }
                if w == "()" {
                    if let Some(f) = &prev_word {
                        scan.functions.insert(f.clone());
                    }
                    expect_cmd = true;
                    continue;
                }
                if st.in_test {
                    if w == "]]" {
                        st.in_test = false;
                    }
                    continue;
                }
                if let Some(until) = st.skip_until {
                    if w == until {
                        st.skip_until = None;
                        if until == "in" {
                            st.cases.push(true);
                        }
                        expect_cmd = true;
                    }
                    continue;
                }
                if st.cases.last() == Some(&true) {
                    if w == "esac" {
                        st.cases.pop();
                    }
                    continue;
                }
                // A function definition `name() {` is tokenised as `name`, `()`.
                if matches!(toks.get(idx + 1), Some(Tok::Word { text, .. }) if text == "()") {
                    prev_word = Some(w.to_string());
                    continue;
                }
                prev_word = Some(w.to_string());
                if ip_netns > 0 {
                    // `ip netns exec NAME CMD` runs CMD; any other `ip` command's words are arguments.
                    let expected = match ip_netns {
                        3 => w == "netns",
                        2 => w == "exec",
                        _ => true,
                    };
                    ip_netns = if expected { ip_netns - 1 } else { 0 };
                    expect_cmd = expected && ip_netns == 0;
                    continue;
                }
                if let Some((opts, positional)) = wrapper {
                    if skip_value {
                        skip_value = false;
                        continue;
                    }
                    if w.starts_with('-') {
                        skip_value = opts.contains(&w);
                        continue;
                    }
                    if w.contains('=') && !w.starts_with('=') {
                        continue;
                    }
                    if positional > 0 {
                        wrapper = Some((opts, positional - 1));
                        continue;
                    }
                    wrapper = None;
                    expect_cmd = true;
                }
                if !expect_cmd {
                    continue;
                }
                let assignment = w.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty()
                        && k.trim_end_matches('+')
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '_')
                });
                if assignment {
                    continue;
                }
                match w {
                    "if" | "then" | "elif" | "else" | "do" | "while" | "until" | "!" | "{" | "}" | "fi"
                    | "done" => continue,
                    "case" => {
                        st.skip_until = Some("in");
                        continue;
                    }
                    "esac" => {
                        st.cases.pop();
                        continue;
                    }
                    "for" | "select" => {
                        st.skip_until = Some("do");
                        continue;
                    }
                    "function" => {
                        if let Some(Tok::Word { text, .. }) = toks.get(idx + 1) {
                            scan.functions.insert(text.trim_end_matches("()").to_string());
                        }
                        expect_cmd = false;
                        continue;
                    }
                    "[[" => {
                        st.in_test = true;
                        continue;
                    }
                    _ => {}
                }
                expect_cmd = false;
                if !plain || !is_name(w) {
                    continue;
                }
                scan.add(w, kind, at.to_string());
                if w == "ip" {
                    ip_netns = 3;
                }
                if let Some((_, opts, positional)) = WRAPPERS.iter().find(|(n, _, _)| *n == w) {
                    wrapper = Some((opts, *positional));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------- Make

fn make_commands(text: &str, file: &str, scan: &mut Scan) {
    let mut recipe = String::new();
    let mut start = 0;
    let mut cont = false;
    for (n, line) in text.lines().enumerate() {
        if !(line.starts_with('\t') || cont) {
            continue;
        }
        if !cont {
            start = n + 1;
        }
        let body = line.trim_start_matches('\t');
        let body = if cont {
            body
        } else {
            body.trim_start_matches(['@', '-', '+'])
        };
        cont = body.ends_with('\\');
        recipe.push_str(body.trim_end_matches('\\'));
        recipe.push(' ');
        if cont {
            continue;
        }
        // Make's own `$(VAR)`/`${VAR}` become an opaque word; `$$` is the shell's `$`.
        let mut sh = String::new();
        let c: Vec<char> = std::mem::take(&mut recipe).chars().collect();
        let mut i = 0;
        while i < c.len() {
            if c[i] == '$' {
                match c.get(i + 1) {
                    Some('$') => {
                        sh.push('$');
                        i += 2;
                        continue;
                    }
                    Some('(') | Some('{') => {
                        let (o, cl) = if c[i + 1] == '(' { ('(', ')') } else { ('{', '}') };
                        i = matching(&c, i + 1, o, cl) + 1;
                        sh.push_str("$MAKEVAR");
                        continue;
                    }
                    _ => {
                        sh.push_str("$MAKEVAR");
                        i += 2;
                        continue;
                    }
                }
            }
            sh.push(c[i]);
            i += 1;
        }
        shell_commands(&sh, &format!("{file}:{start}"), Kind::Make, scan);
    }
}

// ---------------------------------------------------------------------------------------------------- deps.list

/// `provides` command -> package, from the text of hack/deps.list (absolute paths and `py:` modules left out).
fn provides(list: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in list.lines() {
        let mut cols = line.split_whitespace();
        let (Some(pkg), Some(prov)) = (cols.next(), cols.next()) else {
            continue;
        };
        if pkg.starts_with('#') {
            continue;
        }
        for p in prov.split(',') {
            if !p.starts_with('/') && !p.starts_with("py:") {
                out.insert(p.to_string(), pkg.to_string());
            }
        }
    }
    out
}

/// Every problem: a command no list accounts for, a tool table naming another package than deps.list.
fn problems(scan: &Scan, list: &str) -> Vec<String> {
    let prov = provides(list);
    let base: BTreeSet<&str> = BASE.iter().flat_map(|(_, c)| c.iter().copied()).collect();
    let mut out = Vec::new();
    for (cmd, places) in &scan.commands {
        let c = cmd.as_str();
        let known = prov.contains_key(c)
            || SHELL.contains(&c)
            || base.contains(c)
            || NOT_LISTED.iter().any(|(t, _)| *t == c)
            || BUILT.iter().any(|(t, _)| *t == c)
            || scan.functions.contains(c);
        if !known {
            let (kind, at) = &places[0];
            out.push(format!(
                "`{c}` is run ({kind:?}, {at}{}) but hack/deps.list does not provide it: add its Debian package \
                 there (or, with a reason, to an allow-list of test/sandbox/tests/deps_list.rs)",
                if places.len() > 1 { format!(" and {} more places", places.len() - 1) } else { String::new() }
            ));
        }
    }
    for (tool, pkg, at) in &scan.tool_rows {
        if let Some(listed) = prov.get(tool)
            && listed != pkg
        {
            out.push(format!(
                "{at}: `{tool}` is said to come from {pkg}, hack/deps.list says {listed}"
            ));
        }
    }
    out
}

fn deps_list() -> String {
    fs::read_to_string(root().join("hack/deps.list")).unwrap()
}

fn sane(scan: &Scan) {
    for (kind, min) in [(Kind::Rust, 50), (Kind::Shell, 20), (Kind::Make, 5)] {
        let n = scan.files.get(&kind).copied().unwrap_or(0);
        assert!(
            n >= min,
            "scanned {n} {kind:?} files, expected at least {min}: is the tree where it was?"
        );
    }
    for (file, _) in ON_GUESTS {
        assert!(
            root().join(file).is_file(),
            "ON_GUESTS names {file}, which is gone: remove it from the list"
        );
    }
    for (kind, cmd) in SENTINELS {
        assert!(
            scan.commands
                .get(*cmd)
                .is_some_and(|p| p.iter().any(|(k, _)| k == kind)),
            "the scanner no longer sees `{cmd}` run from {kind:?} sources: it is broken, or SENTINELS is stale"
        );
    }
}

#[test]
fn every_command_the_tests_and_scripts_run_is_in_the_deps_list() {
    let scan = scan_tree(&root());
    sane(&scan);
    let problems = problems(&scan, &deps_list());
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn a_deps_list_without_shellcheck_fails_the_check_naming_it() {
    let scan = scan_tree(&root());
    let list: String = deps_list()
        .lines()
        .filter(|l| !l.starts_with("shellcheck "))
        .map(|l| format!("{l}\n"))
        .collect();
    let problems = problems(&scan, &list);
    assert!(
        problems.iter().any(|p| p.starts_with("`shellcheck` is run")),
        "removing shellcheck from deps.list went unnoticed: {problems:?}"
    );
}

#[test]
fn the_shell_reader_finds_commands_where_bash_runs_them() {
    let mut scan = Scan::default();
    let script = r#"#!/usr/bin/env bash
set -euo pipefail # not a comment's words: podman
f() { alpha --x; }
x=$(beta | gamma) y="$(delta "$(epsilon)")" arr=(notcmd1 notcmd2)
sudo -u nobody zeta >/dev/null 2>&1 && timeout 5 eta || ip netns exec ns theta
[[ -n $x && notcmd3 ]] && (( i++ ))
case $x in
  notcmd4|notcmd5) iota ;;
  *) kappa ;;
esac
cat <<EOF
notcmd6 --in a heredoc
EOF
for notcmd7 in a b; do lambda; done
f
"#;
    shell_commands(script, "t.sh", Kind::Shell, &mut scan);
    let found: BTreeSet<&str> = scan.commands.keys().map(String::as_str).collect();
    for want in [
        "alpha", "beta", "gamma", "delta", "epsilon", "sudo", "zeta", "timeout", "eta", "ip", "theta",
        "iota", "kappa", "cat", "lambda", "set", "f",
    ] {
        assert!(found.contains(want), "missed {want}: {found:?}");
    }
    assert!(
        found.iter().all(|c| !c.starts_with("notcmd")),
        "took data for a command: {found:?}"
    );
    assert!(
        !found.contains("podman") && !found.contains("nobody") && !found.contains("ns"),
        "{found:?}"
    );
    assert!(scan.functions.contains("f"));
}

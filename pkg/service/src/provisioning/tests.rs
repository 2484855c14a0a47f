//! Plan-rendering unit tests with a fake executor that records every request (no host involved), plus
//! rendered file-writing bodies executed by a real local `sh` in a temp dir.

use std::sync::Mutex;

use async_trait::async_trait;
use base64::Engine as _;
use capkk_cloudinit::{Action, TemplateVars, parse};
use capkk_executor::{ExecError, ExecOutput, ExecRequest, Executor, PutRequest};

use super::*;
use crate::journal::RecordingProgress;

/// Emulates what the host scripts do with their journal and sentinel (a fake, for plan-rendering tests):
/// every step found in a script "runs" with exit code 0 unless listed in `fail`, command items are
/// journaled whatever their exit code, other steps only on success; the sentinel appears once
/// `sentinel_after` ran.
#[derive(Default)]
struct FakeHost {
    requests: Mutex<Vec<ExecRequest>>,
    journal: Mutex<Vec<String>>,
    sentinel: Mutex<bool>,
    fail: Vec<String>,
    sentinel_after: Option<String>,
    busy: bool,
    ran: Mutex<Vec<String>>,
}

impl FakeHost {
    fn new() -> Self {
        Self::default()
    }
    fn with_state(self, journal: &str, sentinel: bool) -> Self {
        *self.journal.lock().unwrap() = journal.lines().map(str::to_owned).collect();
        *self.sentinel.lock().unwrap() = sentinel;
        self
    }
    fn requests(&self) -> Vec<ExecRequest> {
        self.requests.lock().unwrap().clone()
    }
    fn ran(&self) -> Vec<String> {
        self.ran.lock().unwrap().clone()
    }
    fn finished(&self, id: &str) -> Option<String> {
        self.journal.lock().unwrap().iter().rev().find_map(|l| {
            let (i, rc) = l.split_once(' ')?;
            (i == id && rc != "start").then(|| rc.to_owned())
        })
    }
    fn script(&self, script: &str) -> String {
        let mut out = String::new();
        let mut lines = script.lines().skip_while(|l| *l != "# capkk probe");
        if lines.next().is_some() {
            // The probe's variables (RERUN_FAILED) come before its arguments.
            let ids: Vec<&str> = lines
                .find_map(|l| l.strip_prefix("set --"))
                .unwrap()
                .split_whitespace()
                .collect();
            let empty = self.journal.lock().unwrap().is_empty();
            let all_done = ids.iter().all(|id| self.finished(id).is_some());
            if *self.sentinel.lock().unwrap() && (empty || all_done) {
                return "@@capkk sentinel 1\n@@capkk skipall\n".into();
            }
            out.push_str("@@capkk journal\n");
            for l in self.journal.lock().unwrap().iter() {
                out.push_str(&format!("{l}\n"));
            }
            out.push_str("@@capkk journal-end\n");
        }
        for line in script.lines() {
            let Some(rest) = line.strip_prefix("# capkk step ") else {
                continue;
            };
            let (id, is_cmd) = match rest.strip_suffix(" command") {
                Some(id) => (id, true),
                None => (rest, false),
            };
            if let Some(rc) = self.finished(id) {
                out.push_str(&format!("@@capkk already {id} {rc}\n"));
                continue;
            }
            self.ran.lock().unwrap().push(id.to_owned());
            let rc = if self.fail.iter().any(|f| f == id) { 2 } else { 0 };
            let mut journal = self.journal.lock().unwrap();
            if is_cmd {
                journal.push(format!("{id} start"));
                journal.push(format!("{id} {rc}"));
            } else if rc == 0 {
                journal.push(format!("{id} 0"));
            }
            drop(journal);
            if self.sentinel_after.as_deref() == Some(id) {
                *self.sentinel.lock().unwrap() = true;
            }
            let tail = base64::engine::general_purpose::STANDARD.encode(format!("output of {id}\n"));
            out.push_str(&format!("@@capkk step {id} {rc} 7 {tail}\n"));
            if rc != 0 && !is_cmd {
                break;
            }
        }
        out.push_str(&format!(
            "@@capkk sentinel {}\n",
            u8::from(*self.sentinel.lock().unwrap())
        ));
        out
    }
}

#[async_trait]
impl Executor for FakeHost {
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        self.requests.lock().unwrap().push(req.clone());
        let stdout = if self.busy {
            "@@capkk busy\n".to_owned()
        } else {
            self.script(&String::from_utf8_lossy(req.stdin.as_deref().unwrap_or_default()))
        };
        Ok(ExecOutput {
            exit_code: Some(0),
            stdout: stdout.into_bytes(),
            ..Default::default()
        })
    }
    async fn put(&self, _: PutRequest) -> Result<u64, ExecError> {
        unreachable!("provisioning never uses put")
    }
    async fn get(&self, _: &str, _: usize, _: bool) -> Result<Vec<u8>, ExecError> {
        unreachable!("provisioning never uses get")
    }
    fn target(&self) -> String {
        "fake@host".into()
    }
}

fn fixture(name: &str) -> Plan {
    let path = format!(
        "{}/../cloudinit/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let vars = TemplateVars::new()
        .local_hostname("node-a")
        .provider_id("kk://default/node-a");
    parse(&std::fs::read(path).unwrap(), "cloud-config", &vars).unwrap()
}

fn kubeadm_step(plan: &Plan) -> String {
    plan.steps
        .iter()
        .find(|s| matches!(&s.action, Action::Command(c) if c.script.starts_with("kubeadm")))
        .unwrap()
        .id
        .clone()
}

fn stdin_text(req: &ExecRequest) -> String {
    String::from_utf8(req.stdin.clone().unwrap_or_default()).unwrap()
}

#[tokio::test]
async fn worker_join_runs_in_one_probe_one_batch_and_one_exec_per_command() {
    let plan = fixture("join-worker.yaml");
    let host = FakeHost {
        sentinel_after: Some(kubeadm_step(&plan)),
        ..FakeHost::new()
    };
    let progress = RecordingProgress::default();
    let outcome = run(&host, &plan, &progress, &Redactor::default()).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Provisioned {
            already: false,
            failed_items: vec![]
        }
    );
    let reqs = host.requests();
    assert_eq!(
        reqs.len(),
        3,
        "probe with the batch of 7 non-command steps, then one exec per runcmd item"
    );
    assert!(reqs.iter().all(|r| r.privileged && r.stdin.is_some()));
    assert!(stdin_text(&reqs[0]).contains("@@capkk skipall"));
    assert!(
        !stdin_text(&reqs[1]).contains("@@capkk skipall"),
        "the probe runs once"
    );
    let batch = stdin_text(&reqs[0]);
    for step in &plan.steps[..7] {
        assert!(
            batch.contains(&format!("# capkk step {}\n", step.id)),
            "{} in batch",
            step.name()
        );
    }
    // Secrets never on a command line, and not in clear text in the scripts either (base64 in here-docs).
    for r in &reqs {
        assert!(!r.command.contains("abcdef.0123456789abcdef"));
        assert!(!r.command.contains("kubeadm"));
        assert!(!stdin_text(r).contains("abcdef.0123456789abcdef"));
        assert!(r.command.starts_with(&format!(
            "P=/var/lib/capkk\nD=/var/lib/capkk/provisioning\nN={}\n",
            r.stdin.as_ref().map_or(0, Vec::len)
        )));
    }
    let records = progress.records();
    assert_eq!(records.len(), plan.steps.len());
    assert!(
        records
            .iter()
            .all(|r| r.phase == PHASE && r.exit_code == Some(0) && !r.skipped)
    );
    assert_eq!(records[7].name, "runcmd[0]: swapoff -a");
    assert!(records[8].name.starts_with("runcmd[1]: kubeadm join --config"));
    assert_eq!(
        records[0].output_tail,
        format!("output of {}\n", plan.steps[0].id)
    );
}

#[tokio::test]
async fn a_failing_item_does_not_stop_later_items_and_is_named_first() {
    let plan = fixture("init-control-plane.yaml");
    let cmds: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| matches!(s.action, Action::Command(_)))
        .collect();
    let host = FakeHost {
        fail: vec![cmds[0].id.clone(), cmds[3].id.clone()],
        ..FakeHost::new()
    };
    let outcome = run(&host, &plan, &RecordingProgress::default(), &Redactor::default())
        .await
        .unwrap();
    assert_eq!(
        host.ran()
            .iter()
            .filter(|id| cmds.iter().any(|c| &c.id == *id))
            .count(),
        4,
        "all items ran"
    );
    let Outcome::Failed {
        first_failure: Some(first),
        failed_items,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(first.name, "runcmd[0]");
    assert_eq!(first.command.as_deref(), Some("modprobe br_netfilter"));
    assert_eq!(first.exit_code, Some(2));
    assert_eq!(first.output_tail, format!("output of {}\n", cmds[0].id));
    assert_eq!(failed_items.len(), 2);
}

#[tokio::test]
async fn a_failed_post_kubeadm_item_still_counts_as_provisioned() {
    let plan = fixture("init-control-plane.yaml");
    let last = plan.steps.last().unwrap().id.clone();
    let host = FakeHost {
        fail: vec![last.clone()],
        sentinel_after: Some(kubeadm_step(&plan)),
        ..FakeHost::new()
    };
    let outcome = run(&host, &plan, &RecordingProgress::default(), &Redactor::default())
        .await
        .unwrap();
    let Outcome::Provisioned {
        already: false,
        failed_items,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(failed_items[0].step_id, last);
}

#[tokio::test]
async fn sentinel_without_an_unfinished_journal_runs_nothing() {
    let plan = fixture("join-worker.yaml");
    let host = FakeHost::new().with_state("", true);
    let progress = RecordingProgress::default();
    let outcome = run(&host, &plan, &progress, &Redactor::default()).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Provisioned {
            already: true,
            failed_items: vec![]
        }
    );
    assert_eq!(host.requests().len(), 1, "only the probe");
    assert!(host.ran().is_empty());
    assert!(progress.records()[0].skipped);
}

#[tokio::test]
async fn a_journal_resumes_at_the_first_unfinished_step() {
    let plan = fixture("init-control-plane.yaml");
    let cmds: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| matches!(s.action, Action::Command(_)))
        .collect();
    // Every file and the first two items completed; the kubeadm item started but never finished.
    let mut journal = String::new();
    for s in plan
        .steps
        .iter()
        .take_while(|s| !matches!(s.action, Action::Command(_)))
    {
        journal.push_str(&format!("{} 0\n", s.id));
    }
    journal.push_str(&format!(
        "{} start\n{} 0\n{} start\n{} 1\n{} start\n",
        cmds[0].id, cmds[0].id, cmds[1].id, cmds[1].id, cmds[2].id
    ));
    // The sentinel may even exist already: an unfinished journal still resumes.
    let host = FakeHost {
        sentinel_after: Some(cmds[2].id.clone()),
        ..FakeHost::new()
    }
    .with_state(&journal, true);
    let progress = RecordingProgress::default();
    let outcome = run(&host, &plan, &progress, &Redactor::default()).await.unwrap();
    assert_eq!(
        host.ran(),
        [cmds[2].id.clone(), cmds[3].id.clone()],
        "only unfinished steps run"
    );
    let Outcome::Provisioned {
        already: false,
        failed_items,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(failed_items.len(), 1, "the earlier run's failure is remembered");
    assert_eq!(
        (
            failed_items[0].name.as_str(),
            failed_items[0].output_tail.as_str()
        ),
        ("runcmd[1]", "")
    );
    let records = progress.records();
    assert_eq!(records.len(), plan.steps.len());
    assert_eq!(records.iter().filter(|r| r.skipped).count(), plan.steps.len() - 2);
}

#[tokio::test]
async fn a_failing_file_step_stops_the_run_and_is_not_journaled_as_done() {
    let plan = fixture("join-worker.yaml");
    let file = plan
        .steps
        .iter()
        .find(|s| s.name() == "write_files /run/kubeadm/kubeadm-join-config.yaml")
        .unwrap();
    let host = FakeHost {
        fail: vec![file.id.clone()],
        ..FakeHost::new()
    };
    let outcome = run(&host, &plan, &RecordingProgress::default(), &Redactor::default())
        .await
        .unwrap();
    assert_eq!(
        host.requests().len(),
        1,
        "the batch stopped and no command item ran"
    );
    let first = outcome.first_failure().unwrap();
    assert_eq!(
        (first.name.as_str(), first.command.as_deref()),
        ("write_files /run/kubeadm/kubeadm-join-config.yaml", None)
    );
    // The batch script journals a step only when it exited 0.
    let batch = stdin_text(&host.requests()[0]);
    assert!(batch.contains(&format!("# capkk step {}\n", file.id)));
    assert!(batch.contains("if [ $rc -eq 0 ] && [ -z \"$r\" ]; then echo \"$ID 0\" >> \"$J\"; fi"));
}

#[tokio::test]
async fn a_busy_host_is_a_transient_error() {
    let plan = fixture("join-worker.yaml");
    let host = FakeHost {
        busy: true,
        ..FakeHost::new()
    };
    let err = run(&host, &plan, &RecordingProgress::default(), &Redactor::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::HostBusy { .. }) && err.is_transient(),
        "{err}"
    );
}

#[tokio::test]
async fn batch_commands_sends_a_whole_cabpk_payload_in_one_exec_with_the_same_semantics() {
    let plan = fixture("init-control-plane.yaml");
    let cmds: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| matches!(s.action, Action::Command(_)))
        .collect();
    let opts = RunOptions {
        batch_commands: true,
        ..RunOptions::default()
    };
    let host = FakeHost {
        fail: vec![cmds[0].id.clone()],
        sentinel_after: Some(cmds[2].id.clone()),
        ..FakeHost::new()
    };
    let progress = RecordingProgress::default();
    let outcome = run_with(&host, &plan, &progress, &Redactor::default(), &opts)
        .await
        .unwrap();
    assert_eq!(
        host.requests().len(),
        1,
        "one round trip for {} steps",
        plan.steps.len()
    );
    assert_eq!(
        host.ran().len(),
        plan.steps.len(),
        "a failing item does not stop the batch"
    );
    let Outcome::Provisioned {
        already: false,
        failed_items,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(failed_items[0].step_id, cmds[0].id);
    let records = progress.records();
    assert_eq!(records.len(), plan.steps.len());
    // A second run finds everything journaled and the sentinel present: one exec, nothing runs.
    let again = run_with(
        &host,
        &plan,
        &RecordingProgress::default(),
        &Redactor::default(),
        &opts,
    )
    .await
    .unwrap();
    assert!(
        matches!(again, Outcome::Provisioned { already: true, .. }),
        "{again:?}"
    );
    assert_eq!(host.ran().len(), plan.steps.len());
}

#[tokio::test]
async fn an_empty_plan_reports_the_sentinel_state() {
    let plan = parse(b"#cloud-config\n", "", &TemplateVars::new()).unwrap();
    let host = FakeHost::new();
    let outcome = run(&host, &plan, &RecordingProgress::default(), &Redactor::default())
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Failed {
            first_failure: None,
            failed_items: vec![]
        }
    );
    let host = FakeHost::new().with_state("", true);
    let outcome = run(&host, &plan, &RecordingProgress::default(), &Redactor::default())
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Provisioned { already: true, .. }));
}

#[tokio::test]
async fn command_text_and_output_are_redacted() {
    let plan = parse(
        b"#cloud-config\nruncmd:\n- echo hunter2-canary && false\n",
        "",
        &TemplateVars::new(),
    )
    .unwrap();
    let host = FakeHost {
        fail: vec![plan.steps[0].id.clone()],
        ..FakeHost::new()
    };
    let progress = RecordingProgress::default();
    let outcome = run(&host, &plan, &progress, &Redactor::new(["hunter2-canary"]))
        .await
        .unwrap();
    let first = outcome.first_failure().unwrap();
    assert_eq!(first.command.as_deref(), Some("echo <redacted> && false"));
    assert!(!format!("{outcome:?}{:?}", progress.records()).contains("hunter2"));
}

#[test]
fn disk_and_filesystem_steps_never_destroy_existing_data_by_default() {
    let plan = fixture("join-worker.yaml");
    let disk = script::body(&plan.steps[0].action);
    let check = disk.find("blkid -p -o value -s PTTYPE").unwrap();
    assert!(check < disk.find("sgdisk").unwrap());
    assert!(disk.contains("not partitioned (overwrite is false)\"; exit 0"));
    assert!(disk.contains("OVERWRITE=0\n"));
    let fs = script::body(&plan.steps[1].action);
    assert!(fs.find("blkid -p -o value -s TYPE").unwrap() < fs.find("\"$@\"").unwrap());
    assert!(fs.contains("set -- mkfs.ext4"), "{fs}");
    assert!(
        fs.contains("OVERWRITE=0\n") && fs.contains("[ \"$OVERWRITE\" = 0 ]"),
        "overwrite false is rendered into the guard: {fs}"
    );
    assert!(fs.contains("DEV=/dev/vdb1"));
    let p = parse(
        b"#cloud-config\ndisk_setup:\n  /dev/sdb: {layout: true, overwrite: true}\nfs_setup:\n- {device: /dev/sdb, filesystem: xfs, replace_fs: ntfs}\n",
        "",
        &TemplateVars::new(),
    )
    .unwrap();
    let disk = script::body(&p.steps[0].action);
    assert!(disk.contains("OVERWRITE=1\n") && disk.contains("TABLE=mbr\n"));
    let fs = script::body(&p.steps[1].action);
    assert!(fs.contains("REPLACE=ntfs\n") && fs.contains("WHOLE=1\n"), "{fs}");
}

#[test]
fn mounts_users_and_ntp_render_expected_commands() {
    let plan = fixture("join-worker.yaml");
    let mount = script::body(&plan.steps[2].action);
    assert!(mount.contains("MP=/var/lib/data\n") && mount.contains("mount \"$MP\""));
    let user = script::body(&plan.steps[5].action);
    for needle in [
        "UGROUPS=adm,sudo\n",
        "groupadd -- \"$g\"",
        "set -- --comment 'CAPKK operator' --shell /bin/bash --groups adm,sudo --create-home -- capkk\n",
        "LOCK=1\n",
        "visudo -cf",
        "SUDO_FILE=/etc/sudoers.d/90-capkk-capkk\n",
        "chmod 600 \"$ak\"",
    ] {
        assert!(user.contains(needle), "{needle} in {user}");
    }
    assert!(!user.contains("NOPASSWD"), "sudo rules travel base64-encoded");
    let Action::ConfigureNtp(n) = &plan.steps[6].action else {
        panic!()
    };
    assert_eq!(
        script::chrony_conf(n)
            .lines()
            .filter(|l| l.starts_with("server "))
            .collect::<Vec<_>>(),
        [
            "server time1.example.internal iburst",
            "server time2.example.internal iburst"
        ]
    );
    assert!(script::timesyncd_conf(n).contains("NTP=time1.example.internal time2.example.internal"));
    let ntp = script::body(&plan.steps[6].action);
    assert!(ntp.find("command -v chronyd").unwrap() < ntp.find("systemd-timesyncd ]").unwrap());
    assert_eq!(
        script::sudoers_file("first.last"),
        "/etc/sudoers.d/90-capkk-first_last"
    );
}

/// Run a rendered write_files body with the local `sh`, retargeted into a temp dir.
fn run_write_body(dir: &std::path::Path, yaml: &str) {
    let plan = parse(
        format!("#cloud-config\nwrite_files:\n{yaml}").as_bytes(),
        "",
        &TemplateVars::new(),
    )
    .unwrap();
    for step in &plan.steps {
        let Action::WriteFile(f) = &step.action else {
            panic!()
        };
        let mut f = f.clone();
        f.path = format!("{}{}", dir.display(), f.path);
        let body = script::body(&Action::WriteFile(f));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("set -e\n{body}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn rendered_file_bodies_write_exact_bytes_modes_and_append() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = std::env::temp_dir().join(format!("capkk-prov-unit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = (0..=255u8).collect::<Vec<u8>>();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
    let uid = current_uid();
    run_write_body(
        &dir,
        &format!(
            "- {{path: /a/b/bin, encoding: b64, content: '{b64}', permissions: '0600', owner: '{uid}'}}\n\
             - {{path: /a/log, content: \"one\\n\"}}\n- {{path: /a/log, content: \"two\\n\", append: true, permissions: '0640'}}\n\
             - {{path: /a/trunc, content: \"a long first version\\n\"}}\n- {{path: /a/trunc, content: \"short\\n\"}}\n"
        ),
    );
    assert_eq!(std::fs::read(dir.join("a/b/bin")).unwrap(), data);
    let meta = std::fs::metadata(dir.join("a/b/bin")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(meta.uid().to_string(), uid);
    assert_eq!(std::fs::read_to_string(dir.join("a/log")).unwrap(), "one\ntwo\n");
    assert_eq!(
        std::fs::metadata(dir.join("a/log")).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    assert_eq!(std::fs::read_to_string(dir.join("a/trunc")).unwrap(), "short\n");
    assert_eq!(
        std::fs::metadata(dir.join("a/b")).unwrap().permissions().mode() & 0o777,
        0o755
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("a"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".capkk"))
        .collect();
    assert!(leftovers.is_empty());
    // root:root in a setgid directory still ends up root:root (the directory's group is not inherited).
    if current_uid() == "0" {
        std::fs::create_dir_all(dir.join("sgid")).unwrap();
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "chgrp 4 {0} && chmod 2775 {0}",
                dir.join("sgid").display()
            ))
            .status()
            .unwrap();
        assert!(st.success());
        run_write_body(&dir, "- {path: /sgid/f, content: x, owner: 'root:root'}\n");
        assert_eq!(std::fs::metadata(dir.join("sgid/f")).unwrap().gid(), 0);
        run_write_body(&dir, "- {path: /sgid/g, content: x, owner: root}\n");
        assert_eq!(
            std::fs::metadata(dir.join("sgid/g")).unwrap().gid(),
            4,
            "owner without group keeps it"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The current user's uid as text (chown to ourselves works without root).
fn current_uid() -> String {
    let out = std::process::Command::new("id").arg("-u").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn paths_owners_and_contents_with_shell_metacharacters_are_written_verbatim() {
    let dir = std::env::temp_dir().join(format!("capkk-prov-meta-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    run_write_body(
        &dir,
        "- {path: \"/we ird/it's $HOME `x` *.txt\", content: \"CAPKK_DATA\\n$(touch /tmp/capkk-pwned)\\n\"}\n",
    );
    let written = dir.join("we ird/it's $HOME `x` *.txt");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "CAPKK_DATA\n$(touch /tmp/capkk-pwned)\n"
    );
    assert!(!std::path::Path::new("/tmp/capkk-pwned").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `base64` in front of the real one that logs the mode and name of the file it writes to (the temp file
/// of a write), so a test sees the file while it is being written.
fn base64_spy(dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let bin = dir.join("spy-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("spy.log");
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v base64"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::fs::write(
        bin.join("base64"),
        format!(
            "#!/bin/sh\nexec 3>&1\necho \"$(stat -L -c %a /proc/self/fd/3) $(readlink /proc/self/fd/3)\" >> {}\nexec 3>&-\nexec {} \"$@\"\n",
            log.display(),
            real.trim()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["755"])
        .arg(bin.join("base64"))
        .status()
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    (path, log)
}

#[test]
fn write_files_are_written_through_an_unpredictable_0600_temp_file() {
    let dir = std::env::temp_dir().join(format!("capkk-prov-tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (path, log) = base64_spy(&dir);
    let plan = parse(
        b"#cloud-config\nwrite_files:\n- {path: /etc/registry-auth, content: secret, permissions: '0644'}\n",
        "",
        &TemplateVars::new(),
    )
    .unwrap();
    let Action::WriteFile(f) = &plan.steps[0].action else {
        panic!()
    };
    let mut f = f.clone();
    f.path = format!("{}/etc/registry-auth", dir.display());
    let body = script::body(&Action::WriteFile(f.clone()));
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("set -e\n{body}"))
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = std::fs::read_to_string(&log).unwrap();
    let (mode, name) = seen.trim().split_once(' ').unwrap();
    assert_eq!(mode, "600", "the temp file is private while written: {seen}");
    let suffix = name.rsplit_once(".capkk.").unwrap().1;
    assert!(
        suffix.len() == 6 && !suffix.bytes().all(|b| b.is_ascii_digit()),
        "a mktemp name, not the shell's pid: {name}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&f.path).unwrap().permissions().mode() & 0o777,
        0o644
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn only_kubeadm_init_and_join_items_count_as_kubeadm_items() {
    for yes in [
        "kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > /run/cluster-api/bootstrap-success.complete",
        "/usr/local/bin/kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml",
        "set -e\nkubeadm  join phase control-plane-prepare all",
    ] {
        assert!(script::runs_kubeadm(yes), "{yes}");
    }
    for no in [
        "kubeadm version",
        "echo kubeadm-init",
        "kubeadm reset -f",
        "kubeadm-wrapper init",
        "",
    ] {
        assert!(!script::runs_kubeadm(no), "{no}");
    }
}

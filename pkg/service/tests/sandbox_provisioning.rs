//! Provisioning against real sandbox hosts (netns + overlay root + OpenSSH, see `capkk-sandbox`) through the
//! real SSH executor: exact bytes/mode/owner, append, truncation, failing runcmd items, idempotent re-runs,
//! resume after a dropped connection, after the host killed the running step and after a reboot emptied /run.
//!
//! One sandbox (`prov-tests`) is shared by the tests of this binary; every test owns one host, because the
//! sentinel is per host. Without root/sshd the tests fail naming what is missing (skipped only with CAPKK_ALLOW_SKIP=1).

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

use capkk_cloudinit::{Encoding, Plan, TemplateVars, parse};
use capkk_sandbox::{Host, NOPASSWD_USER, PASSWD_USER, Sandbox, SandboxConfig, skip_unless_supported};
use capkk_service::{
    Error,
    journal::{RecordingProgress, Redactor},
    provisioning::{self, Outcome, RunOptions, STATE_DIR},
};
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};
use sha2::{Digest, Sha256};

// One host per test (the sentinel is per host).
const FILES: usize = 0;
const FAILING: usize = 1;
const DROPPED: usize = 2;
const CRASHED: usize = 3;
const SUDO: usize = 4;
const CABPK: usize = 5;
const DROPPED_BATCH: usize = 6;
const USERS_NTP: usize = 7;
const RETRY: usize = 8;
const REBOOTED: usize = 9;
const KUBEADM_CUT: usize = 10;
const SHUTDOWN: usize = 11;

fn sandbox() -> Option<&'static Sandbox> {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    if skip_unless_supported() {
        return None;
    }
    Some(SB.get_or_init(|| Sandbox::shared(&SandboxConfig::new("prov-tests", 12)).expect("sandbox up")))
}

fn target(sb: &Sandbox, idx: usize, user: &str) -> HostTarget {
    let host = &sb.hosts()[idx];
    HostTarget::new(
        host.address(),
        user,
        Auth::key_file(&sb.credentials().ed25519_key),
    )
    .host_key(HostKeyPolicy::pinned(host.fingerprint()))
}

fn pool() -> SshPool {
    SshPool::new(PoolConfig {
        connect_timeout: Duration::from_secs(10),
        ..Default::default()
    })
}

fn plan(yaml: &str) -> Plan {
    parse(
        format!("#cloud-config\n{yaml}").as_bytes(),
        "cloud-config",
        &TemplateVars::new(),
    )
    .expect("plan")
}

fn inside(host: &Host<'_>, script: &str) -> String {
    host.sh_inside(script).expect("inside the host")
}

fn counter(host: &Host<'_>) -> Vec<String> {
    inside(host, "cat /root/counter 2>/dev/null; true")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// One provisioning run with a throwaway progress journal and no secrets to redact.
async fn run_plan(exec: &dyn capkk_executor::Executor, p: &Plan) -> Result<Outcome, capkk_service::Error> {
    provisioning::run(exec, p, &RecordingProgress::default(), &Redactor::default()).await
}

/// CABPK's sentinel write (its placeholder file creates /run/cluster-api; so does this item).
const SENTINEL_ITEM: &str =
    "- \"mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\"\n";

#[tokio::test]
async fn files_land_exactly_failing_items_are_reported_and_a_second_run_is_a_no_op() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[FILES];
    inside(
        host,
        "mkdir -p /etc/capkk-test && printf 'existing\\n' > /etc/capkk-test/append.txt && \
                  printf 'a much longer previous version\\n' > /etc/capkk-test/trunc.txt && rm -f /root/counter",
    );
    let binary: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    let gz = String::from_utf8(Encoding::GzipBase64.encode(&binary)).unwrap();
    let p = plan(&format!(
        "write_files:\n\
         - {{path: /etc/capkk-test/deep/dir/bin.dat, encoding: gz+b64, content: '{gz}', permissions: '0600', owner: '{NOPASSWD_USER}:adm'}}\n\
         - {{path: /etc/capkk-test/append.txt, content: \"added\\n\", append: true, permissions: '0640', owner: 'root:adm'}}\n\
         - {{path: /etc/capkk-test/trunc.txt, content: \"new\\n\"}}\n\
         - path: /etc/capkk-test/setuid\n  permissions: '4755'\n  content: |\n    #!/bin/sh\n\
         runcmd:\n\
         - echo item0 >> /root/counter\n\
         - [sh, -c, \"echo item1 >> /root/counter; echo item1 failed on purpose >&2; exit 3\"]\n\
         - echo item2 >> /root/counter\n{SENTINEL_ITEM}- echo item4 >> /root/counter\n\
         - mkdir -p /opt/capkk-item/dir && echo made > /opt/capkk-item/dir/file\n"
    ));
    let pool = pool();
    let exec = pool.executor(&target(sb, FILES, "root"));
    let progress = RecordingProgress::default();
    let outcome = provisioning::run(exec.as_ref(), &p, &progress, &Redactor::default())
        .await
        .unwrap();
    let Outcome::Provisioned {
        already: false,
        failed_items,
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(failed_items.len(), 1);
    assert_eq!(failed_items[0].name, "runcmd[1]");
    assert_eq!(failed_items[0].exit_code, Some(3));
    assert!(
        failed_items[0].output_tail.contains("item1 failed on purpose"),
        "{:?}",
        failed_items[0]
    );
    assert_eq!(
        counter(host),
        ["item0", "item1", "item2", "item4"],
        "a failing item does not stop later ones"
    );

    let sum = inside(host, "sha256sum /etc/capkk-test/deep/dir/bin.dat | cut -d' ' -f1");
    assert_eq!(sum.trim(), hex::encode(Sha256::digest(&binary)));
    let stat = |path: &str| {
        inside(host, &format!("stat -c '%a %U:%G' {path}"))
            .trim()
            .to_owned()
    };
    assert_eq!(
        stat("/etc/capkk-test/deep/dir/bin.dat"),
        format!("600 {NOPASSWD_USER}:adm")
    );
    assert_eq!(stat("/etc/capkk-test/deep/dir"), "755 root:root");
    assert_eq!(
        inside(host, "cat /etc/capkk-test/append.txt"),
        "existing\nadded\n"
    );
    assert_eq!(stat("/etc/capkk-test/append.txt"), "640 root:adm");
    assert_eq!(
        inside(host, "cat /etc/capkk-test/trunc.txt"),
        "new\n",
        "non-append writes truncate"
    );
    assert_eq!(stat("/etc/capkk-test/setuid"), "4755 root:root");
    assert_eq!(stat(STATE_DIR), "700 root:root");
    // runcmd items run with cloud-init's umask 022, not the runner's 077.
    assert_eq!(stat("/opt/capkk-item/dir"), "755 root:root");
    assert_eq!(stat("/opt/capkk-item/dir/file"), "644 root:root");
    assert_eq!(
        stat("/run/cluster-api/bootstrap-success.complete"),
        "644 root:root"
    );
    assert_eq!(stat(&format!("{STATE_DIR}/{}.journal", p.hash)), "600 root:root");
    let leftovers = inside(
        host,
        &format!(
            "ls -A {STATE_DIR} /etc/capkk-test | grep -e '^\\.run' -e '\\.sh$' -e '\\.out$' -e '^\\.capkk' || true"
        ),
    );
    assert_eq!(leftovers, "", "no script, output or temp file is left behind");
    let records = progress.records();
    assert_eq!(records.len(), p.steps.len());
    assert_eq!(records.iter().filter(|r| r.exit_code == Some(3)).count(), 1);

    // Second run: the sentinel exists and the journal is complete, so nothing runs.
    let progress = RecordingProgress::default();
    let again = provisioning::run(exec.as_ref(), &p, &progress, &Redactor::default())
        .await
        .unwrap();
    let Outcome::Provisioned {
        already: true,
        failed_items,
    } = &again
    else {
        panic!("{again:?}")
    };
    assert_eq!(failed_items.len(), 1, "the earlier failure is still reported");
    assert!(failed_items[0].output_tail.contains("item1 failed on purpose"));
    assert_eq!(counter(host).len(), 4);
    assert_eq!(
        inside(host, "cat /etc/capkk-test/append.txt"),
        "existing\nadded\n",
        "no second append"
    );
    assert!(progress.records().iter().all(|r| r.skipped));

    // A reboot empties /run (the sentinel goes); the journal remembers the plan provisioned the host.
    inside(host, "rm -f /run/cluster-api/bootstrap-success.complete");
    let after_reboot = run_plan(exec.as_ref(), &p).await.unwrap();
    assert!(
        matches!(after_reboot, Outcome::Provisioned { already: true, .. }),
        "{after_reboot:?}"
    );
    assert_eq!(counter(host).len(), 4);
}

#[tokio::test]
async fn without_the_sentinel_the_first_failing_item_is_named_and_reruns_change_nothing() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[FAILING];
    inside(
        host,
        "rm -f /root/counter /run/cluster-api/bootstrap-success.complete",
    );
    let p = plan(
        "runcmd:\n- echo a >> /root/counter\n- \"echo a-join-went-wrong >&2; exit 7\"\n- echo c >> /root/counter\n- \"exit 9\"\n",
    );
    let pool = pool();
    let exec = pool.executor(&target(sb, FAILING, "root"));
    let outcome = run_plan(exec.as_ref(), &p).await.unwrap();
    let Outcome::Failed {
        first_failure: Some(first),
        failed_items,
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!((first.name.as_str(), first.exit_code), ("runcmd[1]", Some(7)));
    assert_eq!(
        first.command.as_deref(),
        Some("echo a-join-went-wrong >&2; exit 7")
    );
    assert_eq!(first.output_tail, "a-join-went-wrong\n");
    assert_eq!(failed_items.len(), 2);
    assert_eq!(counter(host), ["a", "c"]);
    // cloud-init semantics: a run item is never run again; the outcome is rebuilt from the host journal.
    let again = run_plan(exec.as_ref(), &p).await.unwrap();
    assert_eq!(
        again
            .first_failure()
            .map(|f| (f.name.clone(), f.exit_code, f.output_tail.clone())),
        Some(("runcmd[1]".into(), Some(7), "a-join-went-wrong\n".into())),
        "the host kept the failed item's output tail"
    );
    assert_eq!(counter(host), ["a", "c"]);
}

#[tokio::test]
async fn a_retry_runs_the_failed_items_again_once_the_host_is_fixed_and_nothing_that_succeeded() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[RETRY];
    inside(
        host,
        "rm -f /root/counter /root/fixed /run/cluster-api/bootstrap-success.complete",
    );
    // Like CABPK's init item: the sentinel only after the command succeeded, which needs a host fix.
    let p = plan(
        "runcmd:\n- echo a >> /root/counter\n- \"echo b >> /root/counter; test -e /root/fixed || { echo not-fixed; exit 4; }; mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\"\n",
    );
    let pool = pool();
    let exec = pool.executor(&target(sb, RETRY, "root"));
    let run = |rerun_failed: bool| {
        let opts = RunOptions {
            rerun_failed,
            ..Default::default()
        };
        let (exec, p) = (exec.clone(), p.clone());
        async move {
            provisioning::run_with(
                exec.as_ref(),
                &p,
                &RecordingProgress::default(),
                &Redactor::default(),
                &opts,
            )
            .await
            .unwrap()
        }
    };
    let first = run(false).await;
    assert_eq!(
        first.first_failure().map(|f| (f.name.clone(), f.exit_code)),
        Some(("runcmd[1]".into(), Some(4)))
    );
    assert_eq!(counter(host), ["a", "b"]);
    inside(host, "touch /root/fixed");
    // A resumed run (no retry asked) reports the recorded failure and runs nothing.
    let resumed = run(false).await;
    assert_eq!(
        resumed
            .first_failure()
            .map(|f| (f.exit_code, f.output_tail.clone())),
        Some((Some(4), "not-fixed\n".into()))
    );
    assert_eq!(counter(host), ["a", "b"]);
    // The retry runs the failed item again, and only it.
    let retried = run(true).await;
    assert_eq!(
        retried,
        Outcome::Provisioned {
            already: false,
            failed_items: vec![]
        }
    );
    assert_eq!(counter(host), ["a", "b", "b"]);
    assert_eq!(
        inside(host, &format!("ls {STATE_DIR} | grep -c '\\.tail$'; true")).trim(),
        "0",
        "the failed item's kept output tail is gone with its journal lines"
    );
    // Retrying a provisioned host changes nothing.
    let again = run(true).await;
    assert!(again.is_provisioned(), "{again:?}");
    assert_eq!(counter(host), ["a", "b", "b"]);
}

/// Items count their runs in /root/counter; item 1 sleeps long enough to be interrupted.
fn resumable_plan() -> Plan {
    plan(&format!(
        "write_files:\n- {{path: /etc/capkk-test/before, content: \"x\\n\", append: true}}\n\
         runcmd:\n- echo i0 >> /root/counter\n- \"echo i1-start >> /root/counter; sleep 4; echo i1-end >> /root/counter\"\n\
         - echo i2 >> /root/counter\n{SENTINEL_ITEM}"
    ))
}

async fn wait_for_line(host: &Host<'_>, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !counter(host).iter().any(|l| l == line) {
        assert!(Instant::now() < deadline, "{line} never appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Found by the fault campaign (docs/reliability.md): a control-plane host restarted while `kubeadm init` ran
/// resumed with every `write_files` item journaled done, but /run had been emptied by the boot, and the re-run
/// kubeadm found no `/run/kubeadm/kubeadm.yaml`.
#[tokio::test]
async fn a_reboot_that_emptied_run_gets_the_journaled_files_written_again_and_nothing_else() {
    let Some(sb) = sandbox() else { return };
    let host = sb.hosts()[REBOOTED].clone();
    let p = plan(&format!(
        "write_files:\n- {{path: /run/capkk-test/conf, content: \"a\\n\"}}\n\
         - {{path: /run/capkk-test/conf, content: \"b\\n\", append: true}}\n\
         - {{path: /etc/capkk-test/kept, content: \"as written\\n\"}}\n\
         runcmd:\n- cat /run/capkk-test/conf >> /root/counter\n{SENTINEL_ITEM}"
    ));
    let writes: Vec<&str> = p.steps.iter().take(3).map(|s| s.id.as_str()).collect();
    // The host as a reboot leaves it after the files were written and journaled but before the command ran:
    // /run empty, the journal (on /var) and /etc kept; the kept file changed since by someone else.
    let journal: String = writes.iter().map(|id| format!("{id} 0\n")).collect();
    inside(
        &host,
        &format!(
            "rm -rf /root/counter /run/capkk-test /run/cluster-api; mkdir -p {STATE_DIR} /etc/capkk-test\n\
             printf '%s' '{journal}' > {STATE_DIR}/{}.journal\necho changed > /etc/capkk-test/kept",
            p.hash
        ),
    );
    let pool = pool();
    let exec = pool.executor(&target(sb, REBOOTED, "root"));
    let progress = RecordingProgress::default();
    let outcome = provisioning::run(exec.as_ref(), &p, &progress, &Redactor::default())
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Provisioned { .. }), "{outcome:?}");
    assert_eq!(
        counter(&host),
        ["a", "b"],
        "the command read the file as its items write it: the rewrite and then the append"
    );
    assert_eq!(
        inside(&host, "cat /etc/capkk-test/kept"),
        "changed\n",
        "a journaled file still there is not written again"
    );
    let skipped: Vec<(String, bool)> = progress
        .records()
        .iter()
        .filter(|r| r.name.starts_with("write_files"))
        .map(|r| (r.name.clone(), r.skipped))
        .collect();
    assert_eq!(
        skipped,
        [
            ("write_files /run/capkk-test/conf".to_owned(), false),
            ("write_files /run/capkk-test/conf".to_owned(), false),
            ("write_files /etc/capkk-test/kept".to_owned(), true),
        ]
    );
    // One exit code per step in the journal: the rewrites are not journaled a second time.
    let lines = inside(&host, &format!("cat {STATE_DIR}/{}.journal", p.hash));
    for id in &writes {
        assert_eq!(
            lines.lines().filter(|l| *l == format!("{id} 0")).count(),
            1,
            "{lines}"
        );
    }
}

/// The other half of the campaign's finding: the restart had cut `kubeadm init` short, and kubeadm refuses to
/// run over its own half-done state. A stand-in kubeadm refuses the same way (an existing static pod manifest),
/// and its reset removes what kubeadm's does (`/etc/kubernetes/pki` among it).
#[tokio::test]
async fn a_kubeadm_item_cut_short_by_the_hosts_death_is_reset_before_it_runs_again() {
    let Some(sb) = sandbox() else { return };
    let host = sb.hosts()[KUBEADM_CUT].clone();
    let p = plan(
        "write_files:\n- {path: /etc/kubernetes/pki/ca.crt, content: \"ca\\n\"}\n\
         - {path: /run/kubeadm/kubeadm.yaml, content: \"cfg\\n\"}\n\
         runcmd:\n- echo pre >> /root/counter\n\
         - \"kubeadm init --config /run/kubeadm/kubeadm.yaml && mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\"\n",
    );
    let ids: Vec<&str> = p.steps.iter().map(|s| s.id.as_str()).collect();
    // The host after a power cut during `kubeadm init`: files and the first item journaled, the kubeadm item
    // started, its manifest left behind, /run emptied by the boot.
    let journal = format!(
        "{} 0\n{} 0\n{} start\n{} 0\n{} start\n",
        ids[0], ids[1], ids[2], ids[2], ids[3]
    );
    inside(
        &host,
        &format!(
            "rm -rf /root/counter /run/kubeadm /run/cluster-api /etc/kubernetes; mkdir -p {STATE_DIR} /etc/kubernetes/pki /etc/kubernetes/manifests\n\
             echo ca > /etc/kubernetes/pki/ca.crt; touch /etc/kubernetes/manifests/kube-apiserver.yaml\n\
             printf '%s' '{journal}' > {STATE_DIR}/{}.journal\n\
             cat > /usr/local/bin/kubeadm <<'EOF'\n\
             #!/bin/sh\n\
             echo \"kubeadm $*\" >> /root/counter\n\
             case $1 in\n\
             reset) rm -rf /etc/kubernetes/pki /etc/kubernetes/manifests ;;\n\
             init) [ ! -e /etc/kubernetes/manifests/kube-apiserver.yaml ] || {{ echo 'FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml' >&2; exit 1; }}\n\
             \x20 [ -e /etc/kubernetes/pki/ca.crt ] && [ -e \"$3\" ] || {{ echo 'no CA or no config' >&2; exit 1; }}\n\
             \x20 mkdir -p /etc/kubernetes/manifests && touch /etc/kubernetes/manifests/kube-apiserver.yaml ;;\n\
             esac\n\
             EOF\n\
             chmod 755 /usr/local/bin/kubeadm",
            p.hash
        ),
    );
    let pool = pool();
    let exec = pool.executor(&target(sb, KUBEADM_CUT, "root"));
    let outcome = run_plan(exec.as_ref(), &p).await.unwrap();
    assert!(matches!(outcome, Outcome::Provisioned { .. }), "{outcome:?}");
    assert_eq!(
        counter(&host),
        [
            "kubeadm reset -f",
            "kubeadm init --config /run/kubeadm/kubeadm.yaml"
        ],
        "reset once, then the kubeadm item again; the completed first item not again"
    );
    assert_eq!(
        inside(&host, "cat /etc/kubernetes/pki/ca.crt /run/kubeadm/kubeadm.yaml"),
        "ca\ncfg\n",
        "the files the reset and the boot removed were written again before kubeadm ran"
    );
    let lines = inside(&host, &format!("cat {STATE_DIR}/{}.journal", p.hash));
    assert_eq!(
        lines
            .lines()
            .filter(|l| l.starts_with(ids[3]))
            .collect::<Vec<_>>(),
        [
            format!("{} start", ids[3]),
            format!("{} start", ids[3]),
            format!("{} 0", ids[3])
        ]
    );
    // Provisioned now: a later run resets nothing.
    run_plan(exec.as_ref(), &p).await.unwrap();
    assert_eq!(counter(&host).len(), 2);
    inside(&host, "rm -f /usr/local/bin/kubeadm");
}

/// A reboot stops containerd under a running `kubeadm init`, which then fails rather than being killed (CI's
/// test-real-smoke): an item that fails while the host shuts down is not journaled as run, so the run after
/// the boot runs it again. The sandbox's systemctl reports the state a test writes.
#[tokio::test]
async fn an_item_that_fails_while_the_host_shuts_down_runs_again_after_the_boot() {
    let Some(sb) = sandbox() else { return };
    let host = sb.hosts()[SHUTDOWN].clone();
    inside(
        &host,
        "rm -f /root/counter /run/cluster-api/bootstrap-success.complete /run/capkk-units/system-state /root/booted",
    );
    // The first run of the item fails as the host starts shutting down; after the "boot" it succeeds.
    let p = plan(&format!(
        "runcmd:\n- echo i0 >> /root/counter\n\
         - \"echo i1 >> /root/counter; [ -e /root/booted ] || {{ mkdir -p /run/capkk-units; echo stopping > /run/capkk-units/system-state; exit 1; }}\"\n\
         {SENTINEL_ITEM}"
    ));
    let pool = pool();
    let exec = pool.executor(&target(sb, SHUTDOWN, "root"));
    let err = run_plan(exec.as_ref(), &p)
        .await
        .expect_err("the run stops when the host shuts down");
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("shutting down"), "{err}");
    let i1 = &p.steps[1].id;
    let journal = inside(&host, &format!("cat {STATE_DIR}/{}.journal", p.hash));
    assert!(
        journal.lines().any(|l| l == format!("{i1} start"))
            && !journal.lines().any(|l| l.starts_with(&format!("{i1} 1"))),
        "the failure during the shutdown is not journaled: {journal}"
    );
    inside(&host, "rm -f /run/capkk-units/system-state; touch /root/booted");
    let outcome = run_plan(exec.as_ref(), &p).await.unwrap();
    assert!(
        matches!(outcome, Outcome::Provisioned { ref failed_items, .. } if failed_items.is_empty()),
        "{outcome:?}"
    );
    assert_eq!(counter(&host), ["i0", "i1", "i1"], "i1 again, i0 not");
}

#[tokio::test]
async fn a_run_cut_off_by_a_dropped_connection_resumes_without_repeating_steps() {
    dropped_connection_resumes(DROPPED, RunOptions::default()).await;
}

#[tokio::test]
async fn a_batched_run_cut_off_by_a_dropped_connection_resumes_without_repeating_steps() {
    dropped_connection_resumes(
        DROPPED_BATCH,
        RunOptions {
            batch_commands: true,
            ..RunOptions::default()
        },
    )
    .await;
}

async fn dropped_connection_resumes(idx: usize, opts: RunOptions) {
    let Some(sb) = sandbox() else { return };
    let host = sb.hosts()[idx].clone();
    inside(
        &host,
        "rm -f /root/counter /etc/capkk-test/before /run/cluster-api/bootstrap-success.complete",
    );
    let p = resumable_plan();
    let pool = pool();
    let exec = pool.executor(&target(sb, idx, "root"));
    let running = {
        let (exec, p, opts) = (exec.clone(), p.clone(), opts.clone());
        tokio::spawn(async move {
            provisioning::run_with(
                exec.as_ref(),
                &p,
                &RecordingProgress::default(),
                &Redactor::default(),
                &opts,
            )
            .await
        })
    };
    wait_for_line(&host, "i1-start").await;
    host.kill_sshd().expect("kill sshd");
    let cut = running.await.unwrap();
    let err = cut.expect_err("the connection was cut mid-run");
    assert!(matches!(&err, Error::Exec { .. }) && err.is_transient(), "{err}");
    host.start_sshd().expect("start sshd");
    // The resumed run waits on the host lock for item 1 (still running on the host), then finishes.
    let progress = RecordingProgress::default();
    let outcome = provisioning::run_with(exec.as_ref(), &p, &progress, &Redactor::default(), &opts)
        .await
        .unwrap();
    assert!(
        matches!(outcome, Outcome::Provisioned { already: false, .. }),
        "{outcome:?}"
    );
    assert_eq!(
        counter(&host),
        ["i0", "i1-start", "i1-end", "i2"],
        "every completed step ran exactly once"
    );
    assert_eq!(inside(&host, "cat /etc/capkk-test/before"), "x\n");
    let skipped: Vec<String> = progress
        .records()
        .iter()
        .filter(|r| r.skipped)
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(
        skipped.len(),
        3,
        "file, i0 and i1 came from the journal: {skipped:?}"
    );
}

#[tokio::test]
async fn a_step_killed_on_the_host_is_rerun_and_completed_steps_are_not() {
    let Some(sb) = sandbox() else { return };
    let host = sb.hosts()[CRASHED].clone();
    inside(
        &host,
        "rm -f /root/counter /etc/capkk-test/before /run/cluster-api/bootstrap-success.complete",
    );
    let p = resumable_plan();
    let pool = pool();
    let exec = pool.executor(&target(sb, CRASHED, "root"));
    let running = {
        let (exec, p) = (exec.clone(), p.clone());
        tokio::spawn(async move { run_plan(exec.as_ref(), &p).await })
    };
    wait_for_line(&host, "i1-start").await;
    // Like a host crash for our processes: kill every process whose command line names the state dir
    // (launcher, runner, item) at once: all are stopped first so none can react to another's death; the
    // pattern is assembled so this script does not match itself.
    inside(
        &host,
        "a=capkk/provi; pat=\"${a}sioning\"; pids=; for p in /proc/[0-9]*; do [ \"${p#/proc/}\" = $$ ] && continue; \
         tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -qF \"$pat\" && pids=\"$pids ${p#/proc/}\"; done; \
         kill -STOP $pids; kill -9 $pids; true",
    );
    let err = running.await.unwrap().expect_err("the runner was killed");
    assert!(err.is_transient(), "{err}");
    let outcome = run_plan(exec.as_ref(), &p).await.unwrap();
    assert!(matches!(outcome, Outcome::Provisioned { .. }), "{outcome:?}");
    // The interrupted item ran again (its start twice); everything completed before it ran once.
    assert_eq!(counter(&host), ["i0", "i1-start", "i1-start", "i1-end", "i2"]);
    assert_eq!(
        inside(&host, "cat /etc/capkk-test/before"),
        "x\n",
        "the append was not repeated"
    );
}

#[tokio::test]
async fn a_non_root_login_provisions_through_sudo() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[SUDO];
    inside(
        host,
        "rm -f /root/counter /run/cluster-api/bootstrap-success.complete",
    );
    let p = plan(&format!(
        "write_files:\n- {{path: /etc/kubernetes/pki/ca.key, content: \"-----BEGIN RSA PRIVATE KEY-----\\nsecret\\n\", permissions: '0600'}}\n\
         runcmd:\n- id -u >> /root/counter\n{SENTINEL_ITEM}"
    ));
    let pool = pool();
    let exec = pool.executor(&target(sb, SUDO, NOPASSWD_USER));
    assert!(exec.target().starts_with(NOPASSWD_USER));
    let outcome = run_plan(exec.as_ref(), &p).await.unwrap();
    assert!(outcome.is_provisioned(), "{outcome:?}");
    assert_eq!(counter(host), ["0"], "items run as root");
    assert_eq!(
        inside(host, "stat -c '%a %U' /etc/kubernetes/pki/ca.key").trim(),
        "600 root"
    );

    // A login whose sudo needs a password (sent on stdin by the SSH layer, before the script).
    // (The sentinel from the first plan would make any plan a no-op: remove it, as a reset does.)
    inside(host, "rm -f /run/cluster-api/bootstrap-success.complete");
    let pw = sb.credentials().password.clone();
    let exec = pool.executor(&target(sb, SUDO, PASSWD_USER).sudo_password(pw.as_str()));
    let p2 = plan(
        "write_files:\n- {path: /etc/capkk-test/pw, content: \"via sudo -S\\n\", permissions: '0640'}\n\
         runcmd:\n- id -u >> /root/counter\n",
    );
    let outcome = provisioning::run(
        exec.as_ref(),
        &p2,
        &RecordingProgress::default(),
        &Redactor::new([pw.clone()]),
    )
    .await
    .unwrap();
    assert_eq!(outcome.first_failure(), None, "{outcome:?}");
    assert_eq!(counter(host), ["0", "0"]);
    assert_eq!(inside(host, "cat /etc/capkk-test/pw"), "via sudo -S\n");
}

#[tokio::test]
async fn a_cabpk_control_plane_payload_lands_byte_for_byte_and_names_the_kubeadm_item() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[CABPK];
    let fixture = format!(
        "{}/../cloudinit/tests/fixtures/init-control-plane.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let vars = TemplateVars::new()
        .local_hostname("cp-0")
        .provider_id("kk://default/cp-0");
    let p = parse(&std::fs::read(fixture).unwrap(), "cloud-config", &vars).unwrap();
    // The sandbox has no kubeadm: make the kubeadm item fail the way a broken kubeadm would.
    inside(
        host,
        "rm -f /run/cluster-api/bootstrap-success.complete /etc/modules-load.d/k8s.conf",
    );
    let pool = pool();
    let exec = pool.executor(&target(sb, CABPK, "root"));
    let started = Instant::now();
    let progress = RecordingProgress::default();
    let outcome = provisioning::run(exec.as_ref(), &p, &progress, &Redactor::default())
        .await
        .unwrap();
    let took = started.elapsed();
    for r in progress.records() {
        println!("  {:>12?} exit {:?} {}", r.duration, r.exit_code, r.name);
    }
    let Outcome::Failed { failed_items, .. } = &outcome else {
        panic!("no sentinel without kubeadm: {outcome:?}")
    };
    let kubeadm = failed_items
        .iter()
        .find(|f| {
            f.command
                .as_deref()
                .is_some_and(|c| c.starts_with("kubeadm init --config /run/kubeadm/kubeadm.yaml"))
        })
        .expect("the kubeadm item failed");
    assert_eq!(kubeadm.exit_code, Some(127), "{kubeadm:?}");
    assert!(kubeadm.output_tail.contains("kubeadm"), "{kubeadm:?}");
    // Every file exactly as the plan says: bytes, mode, owner.
    let mut check = String::new();
    for step in &p.steps {
        if let capkk_cloudinit::Action::WriteFile(f) = &step.action {
            check.push_str(&format!(
                "printf '%s ' \"$(stat -c '%a %U:%G' {0})\"; sha256sum {0}\n",
                f.path
            ));
        }
    }
    let got = inside(host, &check);
    let mut lines = got.lines();
    for step in &p.steps {
        if let capkk_cloudinit::Action::WriteFile(f) = &step.action {
            let want = format!(
                "{:o} {} {}  {}",
                f.mode,
                f.owner,
                hex::encode(Sha256::digest(&f.content)),
                f.path
            );
            assert_eq!(lines.next(), Some(want.as_str()));
        }
    }
    // A re-run on the warm connection is one probe round trip (the journal is complete; nothing runs).
    let started = Instant::now();
    let again = run_plan(exec.as_ref(), &p).await.unwrap();
    let probe = started.elapsed();
    assert_eq!(
        again.first_failure().map(|f| f.step_id.clone()),
        outcome.first_failure().map(|f| f.step_id.clone())
    );
    // The same payload (another host name, so another plan hash) with every step in one exec.
    let vars = TemplateVars::new()
        .local_hostname("cp-1")
        .provider_id("kk://default/cp-1");
    let fixture = format!(
        "{}/../cloudinit/tests/fixtures/init-control-plane.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let p1 = parse(&std::fs::read(fixture).unwrap(), "cloud-config", &vars).unwrap();
    let opts = RunOptions {
        batch_commands: true,
        ..RunOptions::default()
    };
    let started = Instant::now();
    let batched = provisioning::run_with(
        exec.as_ref(),
        &p1,
        &RecordingProgress::default(),
        &Redactor::default(),
        &opts,
    )
    .await
    .unwrap();
    let one_exec = started.elapsed();
    assert_eq!(
        batched.first_failure().map(|f| f.name.clone()),
        outcome.first_failure().map(|f| f.name.clone())
    );
    println!(
        "CABPK init payload: {} steps in {took:?} (5 execs, the first with the SSH handshake); \
         re-run {probe:?} (1 exec); batch_commands {one_exec:?} (1 exec)",
        p.steps.len()
    );
}

#[tokio::test]
async fn users_and_ntp_modules_configure_the_host() {
    let Some(sb) = sandbox() else { return };
    let host = &sb.hosts()[USERS_NTP];
    // The systemctl shim would start the real timesyncd; give it a harmless unit instead.
    inside(
        host,
        "mkdir -p /etc/systemd/system && printf '[Service]\\nExecStart=/bin/sleep 600\\n' > \
         /etc/systemd/system/systemd-timesyncd.service; rm -f /var/log/capkk-systemctl.log",
    );
    let ntp_server = host
        .address()
        .rsplit_once('.')
        .map(|(net, _)| format!("{net}.1"))
        .unwrap();
    let key1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOpsOpsOpsOpsOpsOpsOpsOpsOpsOpsOpsOpsOpsOps ops@one";
    let key2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITwoTwoTwoTwoTwoTwoTwoTwoTwoTwoTwoTwoTwoTw ops@two";
    let p = plan(&format!(
        "users:\n- name: ops\n  gecos: Ops Team\n  groups: [adm, capkk-ops]\n  shell: /bin/bash\n  \
         hashed_passwd: $6$saltsalt$hashhashhash\n  sudo: ALL=(ALL) NOPASSWD:ALL\n  ssh_authorized_keys: [{key1}]\n\
         ntp:\n  servers: [{ntp_server}]\n"
    ));
    let pool = pool();
    let exec = pool.executor(&target(sb, USERS_NTP, "root"));
    let outcome = run_plan(exec.as_ref(), &p).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Failed {
            first_failure: None,
            failed_items: vec![]
        },
        "no sentinel in this plan"
    );
    let groups = inside(host, "id -nG ops");
    assert!(
        groups.split_whitespace().any(|g| g == "adm") && groups.contains("capkk-ops"),
        "{groups}"
    );
    assert_eq!(
        inside(host, "getent passwd ops | cut -d: -f5,6,7").trim(),
        "Ops Team:/home/ops:/bin/bash"
    );
    assert_eq!(
        inside(host, "getent shadow ops | cut -d: -f2").trim(),
        "!$6$saltsalt$hashhashhash",
        "locked"
    );
    assert_eq!(
        inside(host, "cat /etc/sudoers.d/90-capkk-ops"),
        "ops ALL=(ALL) NOPASSWD:ALL\n"
    );
    let stat = |path: &str| {
        inside(host, &format!("stat -c '%a %U:%G' {path}"))
            .trim()
            .to_owned()
    };
    assert_eq!(stat("/etc/sudoers.d/90-capkk-ops"), "440 root:root");
    assert_eq!(
        inside(host, "cat /home/ops/.ssh/authorized_keys"),
        format!("{key1}\n")
    );
    assert_eq!(stat("/home/ops/.ssh"), "700 ops:ops");
    assert_eq!(stat("/home/ops/.ssh/authorized_keys"), "600 ops:ops");
    assert!(
        inside(host, "cat /etc/systemd/timesyncd.conf.d/capkk.conf").contains(&format!("NTP={ntp_server}\n"))
    );
    assert!(
        host.systemctl_calls()
            .unwrap()
            .iter()
            .any(|c| c == "restart systemd-timesyncd")
    );

    // Another plan for the same user: it exists, so it is updated (new key added once, old key kept).
    let p2 = plan(&format!(
        "users:\n- name: ops\n  groups: [adm]\n  ssh_authorized_keys: [{key1}, {key2}]\n"
    ));
    let outcome = run_plan(exec.as_ref(), &p2).await.unwrap();
    assert_eq!(outcome.first_failure(), None);
    assert_eq!(
        inside(host, "cat /home/ops/.ssh/authorized_keys"),
        format!("{key1}\n{key2}\n")
    );

    // mounts: an fstab entry, the mount point created and mounted; a second plan adds no duplicate.
    let p3 = plan("mounts:\n- [tmpfs, /mnt/capkk-data, tmpfs, size=1m]\n");
    let p4 = plan("mounts:\n- [tmpfs, /mnt/capkk-data, tmpfs, size=1m]\nruncmd: [touch /mnt/capkk-data/x]\n");
    for p in [&p3, &p4] {
        let outcome = provisioning::run(
            exec.as_ref(),
            p,
            &RecordingProgress::default(),
            &Redactor::default(),
        )
        .await
        .unwrap();
        assert_eq!(outcome.first_failure(), None, "{outcome:?}");
    }
    assert_eq!(
        inside(
            host,
            "grep -c '^tmpfs\t/mnt/capkk-data\ttmpfs\tsize=1m,comment=capkk\t0\t2$' /etc/fstab"
        )
        .trim(),
        "1"
    );
    assert_eq!(
        inside(host, "mountpoint -q /mnt/capkk-data && ls /mnt/capkk-data"),
        "x\n"
    );
}

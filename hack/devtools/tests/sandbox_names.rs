//! No two integration binaries (`mgmt_*`) use one sandbox name: building a sandbox first tears down whatever
//! has its name, so two binaries run at once (`make test-integration INTEGRATION_JOBS=N`) would tear down each
//! other's hosts. Read from the sources: the names the tests pass to `TestEnv::with_hosts`, `TestEnv::hosts`,
//! mgmt_inplace's `standalone` and `SandboxConfig::new`. Plain tier.

use std::{collections::BTreeMap, path::PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The string literal arguments of every call of `call` in `src`, each call's `n`-th (0-based) literal.
fn literal_args(src: &str, call: &str, n: usize) -> Vec<String> {
    src.match_indices(call)
        .filter_map(|(at, _)| {
            let args = &src[at + call.len()..];
            let args = &args[..args.find(')')?];
            args.split(',')
                .map(str::trim)
                .filter(|a| a.starts_with('"') && a.ends_with('"') && a.len() >= 2)
                .nth(n)
                .map(|a| a.trim_matches('"').to_owned())
        })
        .collect()
}

#[test]
fn every_sandbox_name_belongs_to_one_integration_binary() {
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut files = 0;
    for dir in ["controllers/tests", "test/mgmt/tests"] {
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if !name.starts_with("mgmt_") || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            files += 1;
            let src = std::fs::read_to_string(&path).unwrap();
            let mut names = literal_args(&src, "with_hosts(", 1);
            names.extend(literal_args(&src, "standalone(", 1));
            names.extend(literal_args(&src, ".hosts(", 0));
            names.extend(literal_args(&src, "SandboxConfig::new(", 0));
            names.sort();
            names.dedup();
            for n in names {
                owners.entry(n).or_default().push(name.clone());
            }
        }
    }
    assert!(files > 20, "found {files} integration test files");
    assert!(
        owners.len() > 10 && owners.contains_key("ctl-inplace-uid") && owners.contains_key("hostid"),
        "the sandbox names found: {owners:?}"
    );
    let shared: Vec<_> = owners.iter().filter(|(_, b)| b.len() > 1).collect();
    assert!(
        shared.is_empty(),
        "sandbox names used by more than one integration binary: {shared:?}"
    );
}

#[test]
fn the_literal_arguments_of_a_call_are_read_in_order() {
    let src =
        r#"let a = TestEnv::with_hosts("conc", "ctl-conc", 2).await?; let b = x.hosts("hostid-e2e", 1);"#;
    assert_eq!(literal_args(src, "with_hosts(", 1), vec!["ctl-conc"]);
    assert_eq!(literal_args(src, ".hosts(", 0), vec!["hostid-e2e"]);
    assert!(literal_args(src, "with_hosts(", 2).is_empty());
}

//! CAPKK's merge of a per-host `auth` over the global `spec.nodes.auth`, field by field: a field the host sets
//! (non-empty) wins, a field it leaves unset or empty is inherited. Every field, every combination.

use capkk_api::{Auth, KKCluster, SecretRef, SshTimeout};

/// One field of [`Auth`]: its name, a setter for a value, an "empty" setter (strings only) and a getter.
struct Field {
    name: &'static str,
    set: fn(&mut Auth, &str),
    empty: Option<fn(&mut Auth)>,
    get: fn(&Auth) -> Option<String>,
}

fn fields() -> Vec<Field> {
    vec![
        Field {
            name: "user",
            set: |a, v| a.user = Some(v.into()),
            empty: Some(|a| a.user = Some(String::new())),
            get: |a| a.user.clone(),
        },
        Field {
            name: "password",
            set: |a, v| a.password = Some(v.into()),
            empty: Some(|a| a.password = Some(String::new())),
            get: |a| a.password.clone(),
        },
        Field {
            name: "port",
            set: |a, v| a.port = Some(if v == "host" { 2222 } else { 22 }),
            empty: None,
            get: |a| {
                a.port
                    .map(|p| if p == 2222 { "host".into() } else { "global".into() })
            },
        },
        Field {
            name: "privateKey",
            set: |a, v| a.private_key = Some(v.into()),
            empty: Some(|a| a.private_key = Some(String::new())),
            get: |a| a.private_key.clone(),
        },
        Field {
            name: "privateKeyPath",
            set: |a, v| a.private_key_path = Some(v.into()),
            empty: Some(|a| a.private_key_path = Some(String::new())),
            get: |a| a.private_key_path.clone(),
        },
        Field {
            name: "secret",
            set: |a, v| a.secret = Some(v.into()),
            empty: Some(|a| a.secret = Some(String::new())),
            get: |a| a.secret.clone(),
        },
        Field {
            name: "secretRef",
            set: |a, v| a.secret_ref = Some(SecretRef { name: v.into() }),
            empty: Some(|a| a.secret_ref = Some(SecretRef::default())),
            get: |a| a.secret_ref.as_ref().map(|r| r.name.clone()),
        },
        Field {
            name: "timeout",
            set: |a, v| {
                a.timeout = Some(if v == "host" {
                    SshTimeout::Text("5s".into())
                } else {
                    SshTimeout::Nanos(30_000_000_000)
                })
            },
            empty: None,
            get: |a| {
                a.timeout.as_ref().map(|t| match t {
                    SshTimeout::Text(_) => "host".into(),
                    SshTimeout::Nanos(_) => "global".into(),
                })
            },
        },
    ]
}

#[derive(Clone, Copy, Debug)]
enum HostSide {
    Unset,
    Empty,
    Set,
}

#[test]
fn every_field_in_every_host_and_global_combination_follows_capkk() {
    let mut checked = 0;
    for f in fields() {
        for host in [HostSide::Unset, HostSide::Empty, HostSide::Set] {
            if matches!(host, HostSide::Empty) && f.empty.is_none() {
                continue;
            }
            for global_set in [false, true] {
                let mut h = Auth::default();
                match host {
                    HostSide::Unset => {}
                    HostSide::Empty => (f.empty.unwrap())(&mut h),
                    HostSide::Set => (f.set)(&mut h, "host"),
                }
                let mut g = Auth::default();
                if global_set {
                    (f.set)(&mut g, "global");
                }
                let want = match (host, global_set) {
                    (HostSide::Set, _) => Some("host".to_owned()),
                    (_, true) => Some("global".to_owned()),
                    (_, false) => None,
                };
                let got = (f.get)(&h.merged_over(&g));
                assert_eq!(
                    got,
                    want,
                    "{}: host {host:?}, global {}",
                    f.name,
                    if global_set { "set" } else { "unset" }
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6 * 6 + 2 * 4, "every (field, host, global) case ran");
}

#[test]
fn every_subset_of_host_fields_overrides_exactly_those_fields() {
    let fs = fields();
    let mut global = Auth::default();
    for f in &fs {
        (f.set)(&mut global, "global");
    }
    for mask in 0u32..(1 << fs.len()) {
        let mut host = Auth::default();
        for (i, f) in fs.iter().enumerate() {
            if mask & (1 << i) != 0 {
                (f.set)(&mut host, "host");
            }
        }
        let merged = host.merged_over(&global);
        for (i, f) in fs.iter().enumerate() {
            let want = if mask & (1 << i) != 0 { "host" } else { "global" };
            assert_eq!(
                (f.get)(&merged).as_deref(),
                Some(want),
                "{} with mask {mask:#010b}",
                f.name
            );
        }
    }
}

#[test]
fn an_exported_capkk_host_with_empty_auth_keeps_the_global_user() {
    // What `kubectl get kkcluster -o yaml` shows for a CAPKK cluster: the webhook-defaulted global auth
    // (timeout as nanoseconds) and `auth: {}` on every host.
    let kkc: KKCluster = serde_saphyr::from_str(
        r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: KKCluster
metadata: {name: exported}
spec:
  distribution: kubernetes
  nodes:
    auth: {user: ubuntu, password: secret-pw, port: 22, timeout: 30000000000}
    instances:
      - {name: kk-instance-abcde, address: 192.168.100.3, internalAddress: 192.168.100.3, arch: amd64, roles: [control-plane, worker], auth: {}}
      - {address: 192.168.100.4, auth: {user: ""}}
      - {address: 192.168.100.5, auth: {user: admin, privateKey: key}}
"#,
    )
    .unwrap();
    let global = &kkc.spec.nodes.auth;
    assert_eq!(global.timeout_seconds(), Some(30), "CAPKK's nanoseconds parse");
    let merged: Vec<Auth> = kkc
        .spec
        .nodes
        .instances
        .iter()
        .map(|h| h.auth.clone().unwrap_or_default().merged_over(global))
        .collect();
    assert_eq!(merged[0].user_or_default(), "ubuntu");
    assert_eq!(merged[0].password.as_deref(), Some("secret-pw"));
    assert_eq!(merged[0].port_or_default(), 22);
    assert_eq!(merged[1].user_or_default(), "ubuntu", "an empty user inherits");
    assert_eq!(merged[2].user_or_default(), "admin");
    assert_eq!(merged[2].private_key.as_deref(), Some("key"));
    assert_eq!(
        merged[2].password.as_deref(),
        Some("secret-pw"),
        "the global password stays available for sudo"
    );
    assert_eq!(kkc.spec.nodes.instances[0].host_name(), "kk-instance-abcde");
    assert_eq!(kkc.spec.nodes.instances[1].host_name(), "192-168-100-4");
}

#[test]
fn defaults_apply_only_when_neither_side_sets_a_field() {
    let merged = Auth::default().merged_over(&Auth::default());
    assert_eq!(merged.user_or_default(), "root");
    assert_eq!(merged.port_or_default(), 22);
    assert_eq!(
        merged.timeout, None,
        "no timeout default: the manager's --ssh-connect-timeout applies"
    );
    assert!(!merged.has_credentials());
    let with_ns = Auth {
        timeout: Some(SshTimeout::Nanos(1_500_000_000)),
        ..Default::default()
    };
    assert_eq!(
        with_ns.timeout_seconds(),
        Some(2),
        "nanoseconds round up to whole seconds"
    );
}

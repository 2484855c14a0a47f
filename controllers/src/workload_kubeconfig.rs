//! The workload cluster's kubeconfig, read from the `<cluster>-kubeconfig` Secret of the tenant's namespace.
//!
//! Anyone who can write Secrets in that namespace controls its content, and a kubeconfig can tell a client
//! to run a program (`exec`, `auth-provider`) or to read files (`tokenFile`, `certificate-authority`,
//! `client-certificate`, `client-key`) — in the manager, with the manager's service account token and
//! files at hand. Only inline data is accepted (`*-data`, `token`, basic auth): [`check`] refuses anything
//! else and names the field, before the kubeconfig becomes a client.

use kube::config::Kubeconfig;

/// A kubeconfig field that would run a program or read a file in the manager.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is not allowed in a workload kubeconfig ({why}); use inline data (*-data, token)")]
pub(crate) struct Refused {
    /// The field, e.g. `users[admin].exec`.
    pub field: String,
    /// What it would do.
    pub why: &'static str,
}

/// `Ok` when the kubeconfig carries only inline credentials and certificates.
pub(crate) fn check(kc: &Kubeconfig) -> Result<(), Refused> {
    let refuse = |field: String, why| Err(Refused { field, why });
    for c in &kc.clusters {
        let Some(cluster) = &c.cluster else { continue };
        if cluster
            .certificate_authority
            .as_deref()
            .is_some_and(|s| !s.is_empty())
        {
            return refuse(
                format!("clusters[{}].certificate-authority", c.name),
                "reads a file",
            );
        }
    }
    for u in &kc.auth_infos {
        let Some(a) = &u.auth_info else { continue };
        let field = |f: &str| format!("users[{}].{f}", u.name);
        if a.exec.is_some() {
            return refuse(field("exec"), "runs a program");
        }
        if a.auth_provider.is_some() {
            return refuse(field("auth-provider"), "runs a program or reads files");
        }
        for (name, value) in [
            ("tokenFile", &a.token_file),
            ("client-certificate", &a.client_certificate),
            ("client-key", &a.client_key),
        ] {
            if value.as_deref().is_some_and(|s| !s.is_empty()) {
                return refuse(field(name), "reads a file");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INLINE: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster:\n    server: https://198.18.0.10:6443\n    certificate-authority-data: Y2E=\nusers:\n- name: admin\n  user:\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\ncontexts:\n- name: admin@w\n  context: {cluster: w, user: admin}\ncurrent-context: admin@w\n";

    fn with_user(extra: &str) -> Kubeconfig {
        let text = INLINE.replace(
            "    client-key-data: a2V5\n",
            &format!("    client-key-data: a2V5\n{extra}"),
        );
        Kubeconfig::from_yaml(&text).unwrap()
    }

    #[test]
    fn workload_kubeconfig_that_runs_a_program_or_reads_a_file_is_refused_naming_the_field() {
        assert_eq!(check(&Kubeconfig::from_yaml(INLINE).unwrap()), Ok(()));
        for (extra, field) in [
            (
                "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch /tmp/capkk-pwned']}\n",
                "users[admin].exec",
            ),
            (
                "    auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}\n",
                "users[admin].auth-provider",
            ),
            (
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
                "users[admin].tokenFile",
            ),
            (
                "    client-certificate: /etc/passwd\n",
                "users[admin].client-certificate",
            ),
            ("    client-key: /etc/shadow\n", "users[admin].client-key"),
        ] {
            let err = check(&with_user(extra)).expect_err(extra);
            assert_eq!(err.field, field);
            assert!(err.to_string().contains(field));
        }
        let ca_file = INLINE.replace(
            "certificate-authority-data: Y2E=",
            "certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        );
        assert_eq!(
            check(&Kubeconfig::from_yaml(&ca_file).unwrap())
                .unwrap_err()
                .field,
            "clusters[w].certificate-authority"
        );
    }
}

//! What a plan's kubeadm configuration says about the images the node will need: whether it initialises or
//! joins a control plane (kubeadm pulls every control-plane image first) or joins as a worker (kubeadm pulls
//! nothing; the kubelet then needs the pod sandbox and kube-proxy), and the ClusterConfiguration's
//! `imageRepository` and `kubernetesVersion` when the bootstrap data carries one (only `kubeadm init`'s does:
//! a join reads it from the cluster).
//!
//! CABPK writes the configuration as a `write_files` entry of YAML documents (`kind: InitConfiguration`,
//! `ClusterConfiguration`, `JoinConfiguration`, API group `kubeadm.k8s.io`). Only those documents are read,
//! only these fields; nothing here is trusted for a shell: callers validate what they use.

use serde::Deserialize;

use crate::plan::{Action, Plan};

/// How the node joins the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeadmRole {
    /// `kubeadm init`, or `kubeadm join` with a `controlPlane` section.
    ControlPlane,
    /// `kubeadm join` without a `controlPlane` section.
    Worker,
}

/// The kubeadm configuration found in a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeadmIntent {
    /// Control plane or worker.
    pub role: KubeadmRole,
    /// The ClusterConfiguration's `imageRepository`, when set.
    pub image_repository: Option<String>,
    /// The ClusterConfiguration's `kubernetesVersion`, when set.
    pub kubernetes_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    image_repository: Option<String>,
    #[serde(default)]
    kubernetes_version: Option<String>,
    #[serde(default)]
    control_plane: Option<serde::de::IgnoredAny>,
}

impl Plan {
    /// The kubeadm configuration the plan writes, if any (`None`: no `write_files` entry holds a kubeadm
    /// InitConfiguration or JoinConfiguration, e.g. bootstrap data that does not run kubeadm).
    pub fn kubeadm(&self) -> Option<KubeadmIntent> {
        let mut role = None;
        let (mut image_repository, mut kubernetes_version) = (None, None);
        let files = self.steps.iter().filter_map(|s| match &s.action {
            Action::WriteFile(f) => Some(f),
            _ => None,
        });
        for f in files {
            let Ok(text) = std::str::from_utf8(&f.content) else {
                continue;
            };
            if !text.contains("kubeadm.k8s.io") {
                continue;
            }
            let Ok(docs) = serde_saphyr::from_str_multiple::<Doc, Vec<Doc>>(text) else {
                continue;
            };
            for d in docs.into_iter().filter(|d| {
                d.api_version
                    .as_deref()
                    .is_some_and(|v| v.starts_with("kubeadm.k8s.io/"))
            }) {
                match d.kind.as_deref() {
                    Some("InitConfiguration") => role = Some(KubeadmRole::ControlPlane),
                    Some("JoinConfiguration") => {
                        role = Some(if d.control_plane.is_some() {
                            KubeadmRole::ControlPlane
                        } else {
                            KubeadmRole::Worker
                        })
                    }
                    Some("ClusterConfiguration") => {
                        image_repository = d.image_repository.filter(|s| !s.is_empty());
                        kubernetes_version = d.kubernetes_version.filter(|s| !s.is_empty());
                    }
                    _ => {}
                }
            }
        }
        role.map(|role| KubeadmIntent {
            role,
            image_repository,
            kubernetes_version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TemplateVars, parse};

    fn plan(kubeadm_yaml: &str) -> Plan {
        let indented: String = kubeadm_yaml.lines().map(|l| format!("    {l}\n")).collect();
        let data = format!(
            "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  owner: root:root\n  permissions: '0640'\n  content: |\n{indented}runcmd:\n- kubeadm init --config /run/kubeadm/kubeadm.yaml\n"
        );
        parse(data.as_bytes(), "cloud-config", &TemplateVars::new()).unwrap()
    }

    #[test]
    fn init_data_names_a_control_plane_with_its_image_repository_and_version() {
        let p = plan(
            "---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nimageRepository: 198.18.0.1:5000\nkubernetesVersion: v1.36.3\netcd:\n  local:\n    imageTag: 3.6.8-0\napiServer:\n  extraArgs:\n  - name: v\n    value: \"2\"\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nbootstrapTokens:\n- token: abcdef.0123456789abcdef\n",
        );
        assert_eq!(
            p.kubeadm(),
            Some(KubeadmIntent {
                role: KubeadmRole::ControlPlane,
                image_repository: Some("198.18.0.1:5000".into()),
                kubernetes_version: Some("v1.36.3".into()),
            })
        );
    }

    #[test]
    fn a_join_is_a_worker_unless_it_has_a_control_plane_section() {
        let worker = plan(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.1:6443\n",
        );
        assert_eq!(
            worker.kubeadm().map(|k| (k.role, k.image_repository)),
            Some((KubeadmRole::Worker, None))
        );
        let cp = plan(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ncontrolPlane:\n  localAPIEndpoint:\n    advertiseAddress: 10.0.0.2\n",
        );
        assert_eq!(cp.kubeadm().map(|k| k.role), Some(KubeadmRole::ControlPlane));
    }

    #[test]
    fn bootstrap_data_without_a_kubeadm_configuration_names_no_role() {
        let p = parse(
            b"#cloud-config\nwrite_files:\n- path: /etc/app.yaml\n  content: 'kind: InitConfiguration'\nruncmd:\n- echo hi\n",
            "cloud-config",
            &TemplateVars::new(),
        )
        .unwrap();
        assert_eq!(p.kubeadm(), None);
    }
}

# Upgrade this node's local configuration to the Kubernetes version whose binaries the binary service just
# installed: `kubeadm upgrade node` rewrites the kubelet's configuration from the cluster's kubelet-config
# ConfigMap (on a control plane node it would also upgrade its static Pods; in place is offered for workers
# only). The kubeadm on the host must be VERSION's, else the binaries did not land and nothing is touched.
# kubeadm upgrade node is idempotent: a repeated call (CAPI calls UpdateMachine until it reports done) finds
# the node upgraded and changes nothing.
# Variables: VERSION (the Machine's desired spec.version), IGNORE (the preflight checks the node's KubeadmConfig
# ignores, comma-separated, maybe empty: `kubeadm upgrade node` runs the same checks), PATCHES (the node's kubeadm
# patches directory, maybe empty: the kubelet configuration it rewrites gets this node's patches again).
_have=$(kubeadm version -o short 2>/dev/null) || { echo "kubeadm is missing or does not answer 'version'"; exit 1; }
if [ "${_have#v}" != "${VERSION#v}" ]; then echo "kubeadm on the host is $_have, not $VERSION"; exit 1; fi
if [ ! -e /etc/kubernetes/kubelet.conf ]; then echo "/etc/kubernetes/kubelet.conf is missing: the host is not a joined node"; exit 1; fi
kubeadm upgrade node ${IGNORE:+"--ignore-preflight-errors=$IGNORE"} ${PATCHES:+--patches "$PATCHES"}
echo "kubeadm upgrade node done for $VERSION"; CHANGED=1

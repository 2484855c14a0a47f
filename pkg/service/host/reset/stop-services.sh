# The kubelet stops first, so that it starts no pod while the pods are removed. A pod the kubelet was still
# starting while `kubeadm reset` removed the others can survive it, and containerd's unit stops only the daemon
# (KillMode=process): that pod's shim and containers would outlive containerd. So every pod containerd's CRI
# still knows is removed before containerd stops (a few rounds: a removal can race with a late start).
# Variables: SOCK (the CRI socket kubeadm reset was given, path or unix:// URL; empty: containerd's default).
if command -v systemctl >/dev/null 2>&1; then
  if systemctl is-active -q kubelet >/dev/null 2>&1; then systemctl stop kubelet; echo "stopped kubelet"; CHANGED=1; fi
  if systemctl is-active -q containerd >/dev/null 2>&1; then
    _sock=${SOCK:-/run/containerd/containerd.sock}
    _sock=${_sock#unix://}
    _ep=unix://$_sock
    if command -v crictl >/dev/null 2>&1 && [ -S "$_sock" ]; then
      for _round in 1 2 3; do
        _pods=$(crictl --runtime-endpoint "$_ep" pods -q 2>/dev/null) || break
        [ -n "$_pods" ] || break
        # shellcheck disable=SC2086 # one pod ID per word
        crictl --runtime-endpoint "$_ep" rmp -f $_pods >/dev/null 2>&1 || true
        echo "removed the pods kubeadm reset left (round $_round)"; CHANGED=1
        sleep 2
      done
    fi
    systemctl stop containerd; echo "stopped containerd"; CHANGED=1
  fi
  if [ -e /etc/systemd/system/kubelet.service ] && systemctl is-enabled -q kubelet >/dev/null 2>&1; then systemctl disable kubelet; CHANGED=1; fi
fi

# The kubelet stops first, so that it starts no pod while the pods are removed. A pod the kubelet was still
# starting while `kubeadm reset` removed the others can survive it, and containerd's unit stops only the daemon
# (KillMode=process): that pod's shim and containers would outlive containerd. So every pod containerd's CRI
# still knows is removed before containerd stops (a few rounds: a removal can race with a late start). crictl's
# own timeout (2 s) is far shorter than stopping a handful of pods on a slow host, and a timed-out round used to
# look like a finished one, so each call gets a long one. What still runs in the kubelet's pod cgroups after that
# is killed through the cgroup, and a shim of CRI's namespace that outlives containerd is killed last.
# Only a containerd capkk installed (its stamp STAMP exists) is stopped, its pods removed and its shims killed: a
# containerd that was there before (the distribution's, Docker's) serves more than this node, and the reset
# leaves it running with whatever it runs (kubeadm reset has already removed the Kubernetes pods it knew).
# Variables: SOCK (the CRI socket kubeadm reset was given, path or unix:// URL; empty: containerd's default),
# STAMP (capkk's containerd stamp), UNIT (the containerd unit capkk writes).
_k8s_shims() { # PIDs of the shims serving CRI's namespace (k8s.io); other namespaces are not ours to stop
  for _p in /proc/[0-9]*; do
    case $(cat "$_p/comm" 2>/dev/null) in containerd-shim*) ;; *) continue ;; esac
    tr '\0' ' ' <"$_p/cmdline" 2>/dev/null | grep -q -- '-namespace k8s\.io ' && echo "${_p#/proc/}"
  done
  return 0
}
_kill_pod_cgroups() { # kill what runs in the kubelet's pod cgroups (cgroup v2's cgroup.kill; systemd and cgroupfs drivers)
  for _cg in /sys/fs/cgroup/kubepods.slice /sys/fs/cgroup/kubepods; do
    [ -w "$_cg/cgroup.kill" ] && echo 1 >"$_cg/cgroup.kill" && echo "killed what ran in $_cg"
  done
  return 0
}
if command -v systemctl >/dev/null 2>&1; then
  if systemctl is-active -q kubelet >/dev/null 2>&1; then systemctl stop kubelet; echo "stopped kubelet"; CHANGED=1; fi
  _ours=; [ -e "$STAMP" ] && _ours=1
  if [ -z "$_ours" ] && systemctl is-active -q containerd >/dev/null 2>&1; then
    echo "left containerd running: capkk did not install it"
  fi
  if [ -n "$_ours" ] && systemctl is-active -q containerd >/dev/null 2>&1; then
    _sock=${SOCK:-/run/containerd/containerd.sock}
    _sock=${_sock#unix://}
    _ep=unix://$_sock
    if command -v crictl >/dev/null 2>&1 && [ -S "$_sock" ]; then
      for _round in 1 2 3 4 5; do
        _pods=$(crictl --timeout 60s --runtime-endpoint "$_ep" pods -q 2>/dev/null) || break
        [ -n "$_pods" ] || break
        if [ "$_round" = 4 ]; then
          # Three rounds did not empty the list: whatever still runs in the pods is killed, then containerd can
          # remove the sandboxes.
          _kill_pod_cgroups
        fi
        # shellcheck disable=SC2086 # one pod ID per word
        crictl --timeout 60s --runtime-endpoint "$_ep" rmp -f $_pods >/dev/null 2>&1 || true
        echo "removed the pods kubeadm reset left (round $_round)"; CHANGED=1
        sleep 2
      done
    fi
    systemctl stop containerd; echo "stopped containerd"; CHANGED=1
  fi
  _shims=; [ -n "$_ours" ] && _shims=$(_k8s_shims)
  if [ -n "$_shims" ]; then
    # The containers first (through the pod cgroups), so that none is orphaned when its shim goes.
    _kill_pod_cgroups
    # shellcheck disable=SC2086 # one PID per word
    kill -9 $_shims 2>/dev/null || true
    echo "killed shims containerd left behind: $(echo "$_shims" | tr "\n" " ")"; CHANGED=1
  fi
  if [ -e /etc/systemd/system/kubelet.service ] && systemctl is-enabled -q kubelet >/dev/null 2>&1; then systemctl disable kubelet; CHANGED=1; fi
  # The containerd capkk installed keeps its binaries and unit (reused by the next install) but not its stamp,
  # which goes with /var/lib/capkk: left enabled, the next boot would start a containerd without the stamp, which the
  # next install takes for a pre-existing one and every later reset leaves running. So it is disabled here; the
  # next install enables it again.
  if [ -n "$_ours" ] && [ -e "$UNIT" ] && systemctl is-enabled -q containerd >/dev/null 2>&1; then
    systemctl disable containerd; echo "disabled containerd"; CHANGED=1
  fi
fi

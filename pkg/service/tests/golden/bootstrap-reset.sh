RETRY_LATER_EXIT=99
# Prelude of every batched service script (facts::script::Script). Steps are framed by step-open.sh and
# step-close.sh; markers follow the one protocol of crate::host::MARK ("@@capkk <verb> <args>").
umask 022
export LC_ALL=C
# put_file PATH MODE SHA256 BASE64: write PATH only when its content or mode differs (atomic rename). The
# temp file is created by mktemp (mode 0600, unpredictable name) and gets MODE only when complete, so a file
# holding credentials is never readable by others, not even for a moment.
put_file() {
  if [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ] && [ "$(stat -c %a "$1")" = "$2" ]; then return 0; fi
  mkdir -p "$(dirname "$1")"
  _pt=$(mktemp "$(dirname "$1")/.capkk-put.XXXXXX")
  printf '%s' "$4" | base64 -d > "$_pt"
  chmod "$2" "$_pt"
  mv -f "$_pt" "$1"
  echo "wrote $1"
  CHANGED=1
}
# retry_later MESSAGE: fail the step as one that may work later without a spec change (a download cut short,
# a full disk): its exit code RETRY_LATER_EXIT (prepended by Script::render) makes it Error::RetryLater,
# retried with backoff, where any other failure is terminal.
retry_later() {
  echo "$1" >&2
  exit "$RETRY_LATER_EXIT"
}
# mismatch ARTIFACT EXPECTED ACTUAL: report a checksum mismatch and fail the step.
mismatch() {
  echo "@@capkk mismatch $2 $3 $1"
  return 65
}
now_ns() { date +%s%N 2>/dev/null; }
# end_step NAME RC: the end marker with the step's wall time and the host's clock at its end (ms since the
# epoch; 0 when date cannot tell nanoseconds).
end_step() {
  _t1=$(now_ns)
  case "$_t0$_t1" in *[!0-9]*|'') _ms=0 _at=0 ;; *) _ms=$(( (_t1 - _t0) / 1000000 )) _at=$(( _t1 / 1000000 )) ;; esac
  printf '\n@@capkk end %s %s %s %s\n' "$1" "$2" "$_ms" "$_at"
}
STEP=stop-provisioning
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
D=/var/lib/capkk/provisioning
# A bootstrap still running on the host is stopped before anything is reset. The provisioning script ignores
# hang-ups, so that a dropped connection never interrupts a step (provisioning/launcher.sh); when its Machine is
# deleted in the middle of the bootstrap, the manager drops that connection and releases the host, and the run
# would go on: a step that waits (a pre-kubeadm command polling for a signal) or kubeadm itself would then run
# during the reset, or after it, on a host handed out as clean. The run holds the provisioning lock (D/lock)
# from its start to its end, and its steps do not (they run with the lock's descriptor closed): a process holding
# the lock is a run's script, and its process group is that run (the exec's shell has no job control, so the
# steps and what they started share it). Those groups get TERM, then KILL when the lock is still held 10 s
# later. Variables: D (the provisioning state dir).
_holders() { # PIDs holding D/lock open (one find over every process's descriptors, not a readlink each)
  find /proc/[0-9]*/fd -maxdepth 1 -lname "$D/lock" 2>/dev/null | cut -d/ -f3 | sort -u
}
_pgid() { # the process group of PID $1 (field 5 of /proc/PID/stat, counted after the command name's parenthesis)
  _s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  _s=${_s##*) }
  # shellcheck disable=SC2086 # the fields are words
  set -- $_s
  echo "$3"
}
_self=$(_pgid $$)
_groups=
for _p in $(_holders); do
  _g=$(_pgid "$_p") || continue
  # Never the init process's group nor this script's own.
  if ! [ "$_g" -gt 1 ] 2>/dev/null || [ "$_g" = "$_self" ]; then continue; fi
  case " $_groups " in *" $_g "*) ;; *) _groups="$_groups $_g" ;; esac
done
if [ -n "$_groups" ]; then
  for _g in $_groups; do kill -TERM "-$_g" 2>/dev/null || true; done
  _i=0
  while [ -n "$(_holders)" ] && [ "$_i" -lt 10 ]; do sleep 1; _i=$((_i + 1)); done
  for _g in $_groups; do kill -KILL "-$_g" 2>/dev/null || true; done
  echo "stopped the bootstrap still running on the host (process groups:$_groups)"
  CHANGED=1
fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=kubeadm-reset
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
SOCK=unix:///run/containerd/containerd.sock
# Variables: SOCK (CRI socket for kubeadm reset --cri-socket; empty: kubeadm's detection).
if command -v kubeadm >/dev/null 2>&1 && [ -e /etc/kubernetes ]; then
  if kubeadm reset -f ${SOCK:+--cri-socket "$SOCK"}; then echo 'kubeadm reset done'; else echo "kubeadm reset exited $? (continuing with cleanup)"; fi
  CHANGED=1
fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=stop-services
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
SOCK=unix:///run/containerd/containerd.sock
STAMP=/var/lib/capkk/artifacts/containerd
UNIT=/etc/systemd/system/containerd.service
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
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=network-cleanup
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
set -- kube-ipvs0 nodelocaldns cni0 flannel.1 flannel-v6.1 flannel-wg cilium_host cilium_net cilium_vxlan vxlan.calico
# Arguments: the network links to delete when present.
for ipt in iptables ip6tables; do
  # shellcheck disable=SC2015 # skip the family unless both tools exist
  command -v $ipt-save >/dev/null 2>&1 && command -v $ipt-restore >/dev/null 2>&1 || continue
  for t in filter nat mangle raw; do
    _d=$($ipt-save -t $t 2>/dev/null) || continue
    if printf '%s\n' "$_d" | grep -Eq -- '(KUBE-|CNI-|cali-|cali:|FLANNEL|flannel)'; then
      printf '%s\n' "$_d" | grep -Ev -- '(KUBE-|CNI-|cali-|cali:|FLANNEL|flannel)' | $ipt-restore -T $t
      echo "removed kubernetes/CNI rules from $ipt table $t"; CHANGED=1
    fi
  done
done
if ip link show kube-ipvs0 >/dev/null 2>&1 && command -v ipvsadm >/dev/null 2>&1; then ipvsadm -C; echo 'cleared IPVS services'; CHANGED=1; fi
for l in "$@"; do
  if ip link show "$l" >/dev/null 2>&1; then ip link delete "$l"; echo "deleted link $l"; CHANGED=1; fi
done
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^cali'); do ip link delete "$l" && CHANGED=1; done
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=remove-paths
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
set -- /etc/kubernetes /run/kubeadm /var/lib/kubelet /etc/systemd/system/kubelet.service /etc/systemd/system/kubelet.service.d /var/log/pods /var/log/containers /var/lib/etcd /etc/cni /var/lib/cni /opt/cni /run/flannel /run/calico /var/lib/calico /var/log/calico /run/cluster-api/bootstrap-success.complete /var/lib/capkk
# Arguments: the owned paths (bootstrap::OWNED_PATHS). What is mounted strictly under them (pod volumes: NFS,
# CSI, bind mounts) is unmounted first, deepest first; rm never crosses into another file system
# (--one-file-system), and an owned path that is itself a mount point keeps its mount and loses its content
# only. A mount that stays is reported and fails the step: the host is then quarantined, not freed.
# mounts_under P: mount points strictly under P, deepest first (field 5 of mountinfo, octal escapes decoded).
mounts_under() {
  awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); gsub(/\\011/, "\t", m); gsub(/\\012/, "\n", m); gsub(/\\134/, "\\", m); if (index(m, p "/") == 1) print m }' /proc/self/mountinfo 2>/dev/null | sort -r
}
is_mount_point() {
  awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); gsub(/\\134/, "\\", m); if (m == p) f = 1 } END { exit !f }' /proc/self/mountinfo 2>/dev/null
}
left=
for p in "$@"; do
  if [ -n "$(mounts_under "$p")" ]; then
    CHANGED=1
    mounts_under "$p" | while IFS= read -r m; do
      if umount -- "$m" 2>/dev/null; then echo "unmounted $m"; else echo "could not unmount $m"; fi
    done
    if [ -n "$(mounts_under "$p")" ]; then left="$left $p"; continue; fi
  fi
  if is_mount_point "$p"; then
    find "$p" -xdev -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system -- {} +
    echo "emptied $p (a mount point: kept)"; CHANGED=1
  elif [ -e "$p" ] || [ -L "$p" ]; then
    rm -rf --one-file-system -- "$p"; echo "removed $p"; CHANGED=1
  fi
done
if [ "$CHANGED" = 1 ] && command -v systemctl >/dev/null 2>&1; then systemctl daemon-reload; fi
if [ -n "$left" ]; then
  echo "file systems are still mounted under:$left; those paths were left in place (the host is quarantined, not freed)"
  exit 75
fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"

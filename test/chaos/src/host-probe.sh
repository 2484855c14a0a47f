# shellcheck shell=sh disable=SC2154 # OWNED_PATHS is prepended by capkk-chaos
# capkk-chaos host probe: what a host without a claim must no longer carry. Runs inside the host out of band
# (not over its sshd); OWNED_PATHS (the product's owned paths, one a line, quoted) is prepended by capkk-chaos. Prints one
# line per thing left, then the end marker (a probe cut short is not taken for a clean host).
printf '%s\n' "$OWNED_PATHS" | while IFS= read -r p; do
  [ -n "$p" ] || continue
  # An owned path that is a mount point of its own (a node container's /var/lib/kubelet volume) keeps its mount
  # and loses its content.
  if mountpoint -q "$p" 2>/dev/null; then
    [ -z "$(ls -A "$p" 2>/dev/null)" ] || echo "left content in $p"
  elif [ -e "$p" ]; then
    echo "left $p"
  fi
done
if [ -d /run/systemd/system ]; then
  systemctl is-active -q kubelet 2>/dev/null && echo "kubelet-active"
  systemctl is-active -q containerd 2>/dev/null && echo "containerd-active"
fi
for p in /proc/[0-9]*; do
  case $(cat "$p/comm" 2>/dev/null) in
    etcd | kube-apiserver | kube-controller | kube-scheduler | kube-proxy | kubelet | containerd | containerd-shim*)
      grep -q '^State:.*zombie' "$p/status" 2>/dev/null || echo "running $(cat "$p/comm")" ;;
  esac
done
echo capkk-chaos-probe-end

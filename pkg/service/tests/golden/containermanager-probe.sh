STAMP=/var/lib/capkk/artifacts/containerd
# Variables: STAMP (capkk's containerd stamp). Prints the version of a running containerd capkk did not install.
if [ ! -e "$STAMP" ] && command -v containerd >/dev/null 2>&1 && systemctl is-active -q containerd >/dev/null 2>&1; then
  echo "foreign=$(containerd --version 2>/dev/null)"
fi
set -- /etc/containerd/config.toml /etc/containerd/config.toml /etc/containerd/certs.d/docker.io/hosts.toml /etc/containerd/certs.d/docker.io/hosts.toml /etc/containerd/certs.d/198.18.0.9:5000/hosts.toml /etc/containerd/certs.d/198.18.0.9:5000/hosts.toml /etc/containerd/certs.d/registry.local/hosts.toml /etc/containerd/certs.d/registry.local/hosts.toml /etc/crictl.yaml /etc/crictl.yaml /etc/systemd/system/containerd.service /etc/systemd/system/containerd.service
# Arguments: pairs PATH LABEL. Prints "@@file:LABEL=<mode> <sha256>" or "@@file:LABEL=missing" per file.
while [ $# -ge 2 ]; do
  if [ -f "$1" ]; then echo "@@file:$2=$(stat -c %a "$1") $(sha256sum "$1" | cut -d' ' -f1)"; else echo "@@file:$2=missing"; fi
  shift 2
done
RESTART_MARKER=/var/lib/capkk/containerd-restart-pending
# Variables: RESTART_MARKER.
systemctl is-enabled -q containerd >/dev/null 2>&1 && echo '@@enabled'
systemctl is-active -q containerd >/dev/null 2>&1 && echo '@@active'
[ -e "$RESTART_MARKER" ] && echo '@@restart-pending'

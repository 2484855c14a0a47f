if command -v systemctl >/dev/null 2>&1; then
  for u in kubelet containerd; do
    if systemctl is-active -q $u >/dev/null 2>&1; then systemctl stop $u; echo "stopped $u"; CHANGED=1; fi
  done
  if [ -e /etc/systemd/system/kubelet.service ] && systemctl is-enabled -q kubelet >/dev/null 2>&1; then systemctl disable kubelet; CHANGED=1; fi
fi

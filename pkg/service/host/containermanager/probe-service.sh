# Variables: RESTART_MARKER.
systemctl is-enabled -q containerd >/dev/null 2>&1 && echo '@@enabled'
systemctl is-active -q containerd >/dev/null 2>&1 && echo '@@active'
[ -e "$RESTART_MARKER" ] && echo '@@restart-pending'

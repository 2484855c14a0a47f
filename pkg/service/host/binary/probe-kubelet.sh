systemctl is-enabled -q kubelet >/dev/null 2>&1 && echo '@@enabled'

for u in firewalld ufw; do
  if systemctl is-active -q $u >/dev/null 2>&1; then systemctl stop $u; systemctl disable $u; echo "stopped $u"; CHANGED=1; fi
done

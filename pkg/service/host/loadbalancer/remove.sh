# Variables: STATE_DIR, HEADER, CHECK (the health-check script's path). Undoes what configure.sh did: a
# keepalived or haproxy whose configuration capkk did not write (a first line other than HEADER) is left
# alone. The packages stay installed (stopped and disabled), as other services may have come to need them.
for _f in keepalived:/etc/keepalived/keepalived.conf haproxy:/etc/haproxy/haproxy.cfg; do
  _n=${_f%%:*}
  _p=${_f#*:}
  if [ -f "$_p" ] && [ "$(head -n 1 "$_p")" = "$HEADER" ]; then
    systemctl disable --now "$_n" >/dev/null 2>&1 || systemctl stop "$_n" >/dev/null 2>&1 || true
    rm -f "$_p"
    echo "stopped $_n and removed its configuration"
    CHANGED=1
  elif [ -e "$_p" ]; then
    echo "left $_n alone: capkk did not write $_p"
  fi
done
if [ -f "$CHECK" ] && grep -qx "$HEADER" "$CHECK"; then rm -f "$CHECK"; fi
if [ -f "$STATE_DIR/vip" ]; then
  read -r _vip _dev < "$STATE_DIR/vip" || true
  if [ -n "$_vip" ] && [ -n "$_dev" ] && ip addr del "$_vip" dev "$_dev" >/dev/null 2>&1; then
    echo "dropped the VIP $_vip from $_dev"
    CHANGED=1
  fi
fi
if [ -d "$STATE_DIR" ]; then rm -rf "$STATE_DIR"; CHANGED=1; fi

# Variables: ADDRESS (the host's internal address), INTERFACE (the VIP's interface; empty: the one holding
# ADDRESS), VIP, HEADER (the first line of every file capkk writes), STATE_DIR. Prints one `key=value` per
# line: the interface, whether capkk wrote keepalived's and haproxy's configuration (ours), another did
# (foreign) or there is none (absent), whether they run, the packages capkk installed, whether the VIP is here.
if [ -n "$INTERFACE" ]; then
  if ip link show dev "$INTERFACE" >/dev/null 2>&1; then echo "iface=$INTERFACE"; else echo "iface-missing=$INTERFACE"; fi
else
  _if=$(ip -o -4 addr show | awk -v a="$ADDRESS" '{ split($4, p, "/"); if (p[1] == a) { sub(/@.*/, "", $2); print $2; exit } }')
  echo "iface=$_if"
fi
for _f in keepalived:/etc/keepalived/keepalived.conf haproxy:/etc/haproxy/haproxy.cfg; do
  _n=${_f%%:*}
  _p=${_f#*:}
  if [ ! -e "$_p" ]; then
    echo "$_n=absent"
  elif [ "$(head -n 1 "$_p")" = "$HEADER" ]; then
    echo "$_n=ours"
  else
    echo "$_n=foreign"
  fi
  if systemctl is-active -q "$_n" >/dev/null 2>&1; then echo "$_n-active=yes"; else echo "$_n-active=no"; fi
done
if [ -f "$STATE_DIR/packages" ]; then echo "owned=$(tr '\n' ' ' < "$STATE_DIR/packages")"; fi
if ip -o -4 addr show | awk -v v="$VIP" '{ split($4, p, "/"); if (p[1] == v) f = 1 } END { exit !f }'; then
  echo "vip=held"
else
  echo "vip=free"
fi

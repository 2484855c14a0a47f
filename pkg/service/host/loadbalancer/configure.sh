# Variables: STATE_DIR, VIP_CIDR, INTERFACE, PORT (haproxy's frontend), INSTALLED (the packages capkk installed in this run, space
# separated); KEEPALIVED_FILES and HAPROXY_FILES (functions writing each service's files with put_file).
# Each service is validated, enabled and (re)loaded only when one of its files changed or it does not run:
# an unchanged membership leaves the VIP and the connections through haproxy alone.
mkdir -p "$STATE_DIR"
for _p in $INSTALLED; do echo "$_p" >> "$STATE_DIR/packages"; done
if [ -f "$STATE_DIR/packages" ]; then sort -u -o "$STATE_DIR/packages" "$STATE_DIR/packages"; fi
# The VIP's address and interface, for the reset to drop it if keepalived left it behind.
printf '%s %s\n' "$VIP_CIDR" "$INTERFACE" > "$STATE_DIR/vip"
CHANGED=0
HAPROXY_FILES
_ha=$CHANGED
CHANGED=0
KEEPALIVED_FILES
_ka=$CHANGED
haproxy -c -q -f /etc/haproxy/haproxy.cfg
if keepalived --help 2>&1 | grep -q -- '--config-test'; then keepalived --config-test -f /etc/keepalived/keepalived.conf; fi
# haproxy first: the VIP is only worth holding once the frontend listens.
for _s in haproxy:$_ha keepalived:$_ka; do
  _n=${_s%%:*}
  systemctl enable -q "$_n" 2>/dev/null || systemctl enable "$_n"
  if ! systemctl is-active -q "$_n"; then
    systemctl restart "$_n"
    echo "started $_n"
    CHANGED=1
  elif [ "${_s#*:}" = 1 ]; then
    systemctl reload "$_n" || systemctl restart "$_n"
    echo "reloaded $_n"
    CHANGED=1
  fi
done
for _n in haproxy keepalived; do
  _i=0
  until systemctl is-active -q "$_n"; do
    _i=$((_i + 1))
    if [ "$_i" -ge 20 ]; then
      echo "$_n is not active:"
      systemctl status --no-pager -n 20 "$_n" || true
      exit 1
    fi
    sleep 0.5
  done
done
# An active haproxy is not yet a frontend: a configuration haproxy cannot load (e.g. a maxconn past the host's
# open-files limit) leaves a master process that systemd reports active with nothing listening. Listening on
# PORT (/proc/net/tcp{,6}, state 0A) is what the endpoint needs.
listening() {
  _hex=$(printf '%04X' "$1")
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk -v p=":$_hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'
}
_i=0
until listening "$PORT"; do
  _i=$((_i + 1))
  if [ "$_i" -ge 20 ]; then
    echo "haproxy is active but nothing listens on port $PORT:"
    journalctl -u haproxy --no-pager -n 20 2>/dev/null || systemctl status --no-pager -n 20 haproxy || true
    exit 1
  fi
  sleep 0.5
done
echo "keepalived and haproxy are active; haproxy listens on port $PORT"

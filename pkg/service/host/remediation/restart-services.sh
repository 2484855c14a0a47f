# Restart the container runtime and the kubelet (the first remediation tier). containerd goes first, so that
# the kubelet comes back to a runtime that answers; a unit that is not installed fails the step (a host
# without them is not one this provider provisioned). Then waits up to WAIT seconds for both to be active and
# fails naming the ones that are not: a kubelet that cannot start is for the next tier, not a success.
# Variables: WAIT (seconds).
if ! command -v systemctl >/dev/null 2>&1; then echo "no systemctl on the host"; exit 1; fi
for _u in containerd kubelet; do
  systemctl restart "$_u"
  echo "restarted $_u"; CHANGED=1
done
_i=0
while :; do
  _down=""
  for _u in containerd kubelet; do
    systemctl is-active -q "$_u" >/dev/null 2>&1 || _down="$_down $_u"
  done
  if [ -z "$_down" ]; then break; fi
  if [ "$_i" -ge "$WAIT" ]; then echo "not active ${WAIT}s after the restart:$_down"; exit 1; fi
  sleep 1
  _i=$((_i + 1))
done
echo "containerd and kubelet are active"

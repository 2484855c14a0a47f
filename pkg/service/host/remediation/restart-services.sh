# Restart the kubelet (the first remediation tier), and before it the container runtime when capkk installed
# it: its stamp STAMP exists (what the reset asks too). containerd goes first, so that the kubelet comes back
# to a runtime that answers. A containerd that was there before capkk (the distribution's, Docker's) serves
# more than this node: it is not restarted, and the step says so. A unit that is not installed fails the step
# (a host without it is not one this provider provisioned). Then waits up to WAIT seconds for the restarted
# units to be active and fails naming the ones that are not: a kubelet that cannot start is for the next tier,
# not a success.
# Variables: WAIT (seconds), STAMP (capkk's containerd stamp).
if ! command -v systemctl >/dev/null 2>&1; then echo "no systemctl on the host"; exit 1; fi
_units=kubelet
if [ -e "$STAMP" ]; then
  _units="containerd kubelet"
else
  echo "left containerd alone: capkk did not install it"
fi
for _u in $_units; do
  systemctl restart "$_u"
  echo "restarted $_u"; CHANGED=1
done
_i=0
while :; do
  _down=""
  for _u in $_units; do
    systemctl is-active -q "$_u" >/dev/null 2>&1 || _down="$_down $_u"
  done
  if [ -z "$_down" ]; then break; fi
  if [ "$_i" -ge "$WAIT" ]; then echo "not active ${WAIT}s after the restart:$_down"; exit 1; fi
  sleep 1
  _i=$((_i + 1))
done
case $_units in
  containerd*) echo "containerd and kubelet are active" ;;
  *) echo "kubelet is active" ;;
esac

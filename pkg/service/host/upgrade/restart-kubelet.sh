# Restart the kubelet on the binary the binary service installed, and wait up to WAIT seconds for it to be
# active. The kubelet must answer --version with VERSION: a restart that came back on another binary is not
# an upgrade.
# Variables: VERSION (the desired Kubernetes version), WAIT (seconds).
if ! command -v systemctl >/dev/null 2>&1; then echo "no systemctl on the host"; exit 1; fi
_have=$(kubelet --version 2>/dev/null) || { echo "kubelet is missing or does not answer --version"; exit 1; }
case "$_have" in
  *" v${VERSION#v}"|*" ${VERSION#v}") ;;
  *) echo "the kubelet on the host answers '$_have', not $VERSION"; exit 1 ;;
esac
systemctl daemon-reload
systemctl restart kubelet
echo "restarted kubelet ($_have)"; CHANGED=1
_i=0
until systemctl is-active -q kubelet >/dev/null 2>&1; do
  if [ "$_i" -ge "$WAIT" ]; then echo "kubelet is not active ${WAIT}s after the restart"; exit 1; fi
  sleep 1
  _i=$((_i + 1))
done
echo "kubelet is active"

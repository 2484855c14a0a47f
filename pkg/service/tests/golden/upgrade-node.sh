RETRY_LATER_EXIT=99
# Prelude of every batched service script (facts::script::Script). Steps are framed by step-open.sh and
# step-close.sh; markers follow the one protocol of crate::host::MARK ("@@capkk <verb> <args>").
umask 022
export LC_ALL=C
# put_file PATH MODE SHA256 BASE64: write PATH only when its content or mode differs (atomic rename). The
# temp file is created by mktemp (mode 0600, unpredictable name) and gets MODE only when complete, so a file
# holding credentials is never readable by others, not even for a moment.
put_file() {
  if [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ] && [ "$(stat -c %a "$1")" = "$2" ]; then return 0; fi
  mkdir -p "$(dirname "$1")"
  _pt=$(mktemp "$(dirname "$1")/.capkk-put.XXXXXX")
  printf '%s' "$4" | base64 -d > "$_pt"
  chmod "$2" "$_pt"
  mv -f "$_pt" "$1"
  echo "wrote $1"
  CHANGED=1
}
# retry_later MESSAGE: fail the step as one that may work later without a spec change (a download cut short,
# a full disk): its exit code RETRY_LATER_EXIT (prepended by Script::render) makes it Error::RetryLater,
# retried with backoff, where any other failure is terminal.
retry_later() {
  echo "$1" >&2
  exit "$RETRY_LATER_EXIT"
}
# mismatch ARTIFACT EXPECTED ACTUAL: report a checksum mismatch and fail the step.
mismatch() {
  echo "@@capkk mismatch $2 $3 $1"
  return 65
}
now_ns() { date +%s%N 2>/dev/null; }
# end_step NAME RC: the end marker with the step's wall time and the host's clock at its end (ms since the
# epoch; 0 when date cannot tell nanoseconds).
end_step() {
  _t1=$(now_ns)
  case "$_t0$_t1" in *[!0-9]*|'') _ms=0 _at=0 ;; *) _ms=$(( (_t1 - _t0) / 1000000 )) _at=$(( _t1 / 1000000 )) ;; esac
  printf '\n@@capkk end %s %s %s %s\n' "$1" "$2" "$_ms" "$_at"
}
STEP=kubeadm-upgrade-node
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
VERSION=v1.36.3
IGNORE=''
PATCHES=''
# Upgrade this node's local configuration to the Kubernetes version whose binaries the binary service just
# installed: `kubeadm upgrade node` rewrites the kubelet's configuration from the cluster's kubelet-config
# ConfigMap (on a control plane node it would also upgrade its static Pods; in place is offered for workers
# only). The kubeadm on the host must be VERSION's, else the binaries did not land and nothing is touched.
# kubeadm upgrade node is idempotent: a repeated call (CAPI calls UpdateMachine until it reports done) finds
# the node upgraded and changes nothing.
# Variables: VERSION (the Machine's desired spec.version), IGNORE (the preflight checks the node's KubeadmConfig
# ignores, comma-separated, maybe empty: `kubeadm upgrade node` runs the same checks), PATCHES (the node's kubeadm
# patches directory, maybe empty: the kubelet configuration it rewrites gets this node's patches again).
_have=$(kubeadm version -o short 2>/dev/null) || { echo "kubeadm is missing or does not answer 'version'"; exit 1; }
if [ "${_have#v}" != "${VERSION#v}" ]; then echo "kubeadm on the host is $_have, not $VERSION"; exit 1; fi
if [ ! -e /etc/kubernetes/kubelet.conf ]; then echo "/etc/kubernetes/kubelet.conf is missing: the host is not a joined node"; exit 1; fi
kubeadm upgrade node ${IGNORE:+"--ignore-preflight-errors=$IGNORE"} ${PATCHES:+--patches "$PATCHES"}
echo "kubeadm upgrade node done for $VERSION"; CHANGED=1
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=restart-kubelet
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
VERSION=v1.36.3
WAIT=60
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
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"

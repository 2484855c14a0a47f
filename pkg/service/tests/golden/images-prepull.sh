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
STEP=image-prepull
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
VERSION=v1.32.0
REPOSITORY=registry.local:5000/k8s
ONLY=kube-proxy
EXTRA=registry.local:5000/pause:3.10
PULL_TIMEOUT=120
LANES=3
# Pull the images kubeadm will need into containerd before the bootstrap data runs, through the CRI and the
# registry configuration (hosts.toml) that kubeadm's own pulls use, so that `kubeadm init/join` finds them
# present. One line per image: the host's clock when its pull started (ms since the epoch), what happened, and
# how long it took; the lines come ordered by that clock. A failed image fails the step, but never
# provisioning: kubeadm pulls what is missing.
# Variables: VERSION (kubeadm --kubernetes-version), REPOSITORY ('' = kubeadm's default), ONLY ('' = every
# image kubeadm lists, else the image names to keep, space-separated), EXTRA ('' or one more image: containerd's
# sandbox image), PULL_TIMEOUT (seconds per image), LANES (pulls at a time).
_ms() { _n=$(now_ns); case "$_n" in *[!0-9]*|'') echo "$(date +%s)000" ;; *) echo $((_n / 1000000)) ;; esac; }
command -v crictl >/dev/null 2>&1 || { echo "crictl is missing"; exit 1; }
if [ -n "$REPOSITORY" ]; then
  _list=$(kubeadm config images list --kubernetes-version "$VERSION" --image-repository "$REPOSITORY")
else
  _list=$(kubeadm config images list --kubernetes-version "$VERSION")
fi
_want=
for _img in $_list $EXTRA; do
  _name=${_img##*/}
  _name=${_name%%[:@]*}
  if [ -n "$ONLY" ] && [ "$_img" != "$EXTRA" ]; then
    case " $ONLY " in *" $_name "*) ;; *) continue ;; esac
  fi
  _want="$_want $_img"
done
[ -n "$_want" ] || { echo "no image to pull"; exit 0; }
# _pull IMAGE: its one line, the pull bounded by PULL_TIMEOUT.
_pull() {
  _s=$(_ms)
  if crictl inspecti "$1" >/dev/null 2>&1; then
    echo "$_s present $1"
  elif _out=$(timeout "$PULL_TIMEOUT" crictl pull "$1" 2>&1); then
    echo "$_s pulled $1 in $(($(_ms) - _s)) ms"
  else
    echo "$_s failed $1 after $(($(_ms) - _s)) ms: $(printf '%s\n' "$_out" | tail -n 1)"
  fi
}
# A lane takes the images in kubeadm's order, each one no other lane took yet (mkdir is the atomic claim), so
# the first LANES images start at once and a lane that finishes takes the next. kubeadm wants them in its
# order, and unpacking a layer is CPU work that more pulls at a time would only share (see LANES in
# images.rs).
_d=$(mktemp -d)
_lane() {
  _i=0
  for _img in $_want; do
    _i=$((_i + 1))
    mkdir "$_d/$_i" 2>/dev/null || continue
    _pull "$_img" >"$_d/$_i/line"
  done
}
_k=0
while [ "$_k" -lt "$LANES" ]; do
  _lane &
  _k=$((_k + 1))
done
wait
sort -n "$_d"/*/line
_failed=$(awk '$2 == "failed" { n++ } END { print n + 0 }' "$_d"/*/line)
if awk '$2 == "pulled" { p = 1 } END { exit !p }' "$_d"/*/line; then CHANGED=1; fi
rm -rf "$_d"
if [ "$_failed" != 0 ]; then
  echo "$_failed image(s) not pulled: kubeadm pulls them itself"
  exit 1
fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"

# Pull the images kubeadm will need into containerd before the bootstrap data runs, through the CRI and the
# registry configuration (hosts.toml) that kubeadm's own pulls use, so that `kubeadm init/join` finds them
# present. One line per image: the host's clock when its pull started (ms since the epoch), what happened, and
# how long it took. A failed image fails the step, but never provisioning: kubeadm pulls what is missing.
# Variables: VERSION (kubeadm --kubernetes-version), REPOSITORY ('' = kubeadm's default), ONLY ('' = every
# image kubeadm lists, else the image names to keep, space-separated), EXTRA ('' or one more image: containerd's
# sandbox image), PULL_TIMEOUT (seconds per image).
_ms() { _n=$(now_ns); case "$_n" in *[!0-9]*|'') echo "$(date +%s)000" ;; *) echo $((_n / 1000000)) ;; esac; }
command -v crictl >/dev/null 2>&1 || { echo "crictl is missing"; exit 1; }
if [ -n "$REPOSITORY" ]; then
  _list=$(kubeadm config images list --kubernetes-version "$VERSION" --image-repository "$REPOSITORY")
else
  _list=$(kubeadm config images list --kubernetes-version "$VERSION")
fi
_failed=0
for _img in $_list $EXTRA; do
  _name=${_img##*/}
  _name=${_name%%[:@]*}
  if [ -n "$ONLY" ] && [ "$_img" != "$EXTRA" ]; then
    case " $ONLY " in *" $_name "*) ;; *) continue ;; esac
  fi
  _s=$(_ms)
  if crictl inspecti "$_img" >/dev/null 2>&1; then
    echo "$_s present $_img"
    continue
  fi
  if _out=$(timeout "$PULL_TIMEOUT" crictl pull "$_img" 2>&1); then
    echo "$_s pulled $_img in $(($(_ms) - _s)) ms"
    CHANGED=1
  else
    echo "$_s failed $_img after $(($(_ms) - _s)) ms: $(printf '%s\n' "$_out" | tail -n 1)"
    _failed=$((_failed + 1))
  fi
done
if [ "$_failed" != 0 ]; then
  echo "$_failed image(s) not pulled: kubeadm pulls them itself"
  exit 1
fi

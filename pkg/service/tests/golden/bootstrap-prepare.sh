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
STEP=hostname
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
H=node-1
# Variables: H (host name, validated RFC 1123).
if [ "$(cat /etc/hostname 2>/dev/null)" != "$H" ]; then printf '%s\n' "$H" > /etc/hostname; CHANGED=1; fi
if [ "$(hostname)" != "$H" ]; then
  if command -v hostnamectl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then hostnamectl set-hostname "$H"; else hostname "$H"; fi
  CHANGED=1
fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=etc-hosts
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
BLOCK=IyBjYXBrayBob3N0cyBCRUdJTgoxOTguMTguMC4xMSBub2RlLTEgbm9kZS0xLmNsdXN0ZXIKIyBjYXBrayBob3N0cyBFTkQK
# Variables: BLOCK (base64 of the managed block "# capkk hosts BEGIN" ... "# capkk hosts END").
_n=$(mktemp)
awk '/^# capkk hosts BEGIN$/{s=1;next} /^# capkk hosts END$/{s=0;next} !s' /etc/hosts > "$_n"
printf '%s' "$BLOCK" | base64 -d >> "$_n"
if ! cmp -s "$_n" /etc/hosts; then cat "$_n" > /etc/hosts; echo 'updated /etc/hosts'; CHANGED=1; fi
rm -f "$_n"
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=swap-off
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
if [ -n "$(tail -n +2 /proc/swaps 2>/dev/null)" ]; then swapoff -a; echo 'swap turned off'; CHANGED=1; fi
if [ -f /etc/fstab ] && grep -Eq '^[^#][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap[[:space:]]' /etc/fstab; then
  sed -i -E 's@^([^#][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap[[:space:]].*)$@# \1 # disabled by capkk@' /etc/fstab
  echo 'swap entries in /etc/fstab commented out'; CHANGED=1
fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=kernel-modules
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
put_file /etc/modules-load.d/capkk.conf 644 fcaf07413a456d658640930cef56ed4d13330123e3b522c481021613c64755e3 b3ZlcmxheQpicl9uZXRmaWx0ZXIK
set -- overlay br_netfilter
# Arguments: the kernel modules to load. Preceded by a put_file of the modules-load.d file.
# A module built into the kernel is in neither /proc/modules nor, without parameters, /sys/module, and a host
# without /lib/modules (a container on the machine's kernel, a kernel with everything built in) cannot
# modprobe it: what the module provides is looked for instead.
provided() {
  case $1 in
    overlay) grep -qw overlay /proc/filesystems 2>/dev/null ;;
    br_netfilter) [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] ;;
    *) grep -qs "/$1\.ko" "/lib/modules/$(uname -r)/modules.builtin" ;;
  esac
}
for m in "$@"; do
  if ! grep -q "^$m " /proc/modules 2>/dev/null && [ ! -d "/sys/module/$m" ] && ! provided "$m"; then modprobe "$m"; echo "loaded $m"; CHANGED=1; fi
done
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=sysctl
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
put_file /etc/sysctl.d/99-capkk.conf 644 085e34bcd37accede15d5161aba499a81dc289d4f1d9388ae4c8d36650b9e8b0 IyBNYW5hZ2VkIGJ5IGNhcGtrLgpuZXQuYnJpZGdlLmJyaWRnZS1uZi1jYWxsLWlwdGFibGVzID0gMQpuZXQuYnJpZGdlLmJyaWRnZS1uZi1jYWxsLWlwNnRhYmxlcyA9IDEKbmV0LmlwdjQuaXBfZm9yd2FyZCA9IDEKdm0ubWF4X21hcF9jb3VudCA9IDI2MjE0NAp2bS5zd2FwcGluZXNzID0gMQpmcy5pbm90aWZ5Lm1heF91c2VyX2luc3RhbmNlcyA9IDUyNDI4OApmcy5pbm90aWZ5Lm1heF91c2VyX3dhdGNoZXMgPSA1MjQyODgK
F=/etc/sysctl.d/99-capkk.conf
# Variables: F (the sysctl file). Preceded by its put_file.
if [ "$CHANGED" = 1 ]; then sysctl -e -p "$F"; fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=selinux
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
if command -v getenforce >/dev/null 2>&1 && [ "$(getenforce)" = Enforcing ]; then setenforce 0; echo 'SELinux now permissive'; CHANGED=1; fi
if [ -f /etc/selinux/config ] && grep -q '^SELINUX=enforcing' /etc/selinux/config; then
  sed -i 's/^SELINUX=enforcing/SELINUX=permissive/' /etc/selinux/config; CHANGED=1
fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=firewall
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
for u in firewalld ufw; do
  if systemctl is-active -q $u >/dev/null 2>&1; then systemctl stop $u; systemctl disable $u; echo "stopped $u"; CHANGED=1; fi
done
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=directories
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
set -- /usr/local/bin /etc/kubernetes/manifests /etc/kubernetes/pki /etc/cni/net.d /opt/cni/bin /var/lib/kubelet /var/lib/capkk
# Arguments: the directories to create (mode 0755).
for d in "$@"; do
  # shellcheck disable=SC2174 # parents get 0755 from umask 022
  if [ ! -d "$d" ]; then mkdir -p -m 0755 "$d"; CHANGED=1; fi
done
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"

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

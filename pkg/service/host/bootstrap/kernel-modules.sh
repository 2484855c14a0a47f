# Arguments: the kernel modules to load. Preceded by a put_file of the modules-load.d file.
for m in "$@"; do
  if ! grep -q "^$m " /proc/modules 2>/dev/null && [ ! -d "/sys/module/$m" ]; then modprobe "$m"; echo "loaded $m"; CHANGED=1; fi
done

if [ -n "$(tail -n +2 /proc/swaps 2>/dev/null)" ]; then swapoff -a; echo 'swap turned off'; CHANGED=1; fi
if [ -f /etc/fstab ] && grep -Eq '^[^#][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap[[:space:]]' /etc/fstab; then
  sed -i -E 's@^([^#][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap[[:space:]].*)$@# \1 # disabled by capkk@' /etc/fstab
  echo 'swap entries in /etc/fstab commented out'; CHANGED=1
fi

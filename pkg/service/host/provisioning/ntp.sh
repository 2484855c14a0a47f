# ntp module. Variables: CHRONY_OK, TIMESYNCD_OK (1: that daemon may be used), WANT (for the error message).
# data_chrony / data_timesyncd print the configuration. chrony first, then systemd-timesyncd.
if [ "$CHRONY_OK" = 1 ] && command -v chronyd >/dev/null 2>&1; then
  if [ -d /etc/chrony ]; then f=/etc/chrony/chrony.conf; else f=/etc/chrony.conf; fi
  umask 022
  t=$(mktemp "$f.capkk.XXXXXX")
  data_chrony > "$t"
  chmod 0644 "$t"
  mv -f -- "$t" "$f"
  echo "configured chrony in $f"
  systemctl restart chrony 2>/dev/null || systemctl restart chronyd
elif [ "$TIMESYNCD_OK" = 1 ] && { [ -x /lib/systemd/systemd-timesyncd ] || [ -x /usr/lib/systemd/systemd-timesyncd ]; }; then
  umask 022
  mkdir -p /etc/systemd/timesyncd.conf.d
  f=/etc/systemd/timesyncd.conf.d/capkk.conf
  t=$(mktemp "$f.XXXXXX")
  data_timesyncd > "$t"
  chmod 0644 "$t"
  mv -f -- "$t" "$f"
  echo "configured systemd-timesyncd in $f"
  systemctl restart systemd-timesyncd
else
  echo "ntp: no supported time daemon found ($WANT)" >&2
  exit 1
fi

# shellcheck shell=sh disable=SC2154 # D is prepended by capkk-chaos
# capkk-chaos journal reader: prints every provisioning journal of a host (the provisioning service's
# <plan-hash>.journal files in its state dir D, quoted and prepended by capkk-chaos). Runs inside the host out of
# band (not over its sshd), reads only. Each journal is headed by a marker line naming its plan hash and followed
# by an empty line (a journal whose last line lacks its newline cannot run into the next marker); the end marker
# comes last (a read cut short is not taken for a host without journals).
for f in "$D"/*.journal; do
  [ -f "$f" ] || continue
  n=${f##*/}
  echo "capkk-chaos-journal ${n%.journal}"
  cat "$f" || echo "capkk-chaos-journal-unreadable"
  echo
done
echo capkk-chaos-journals-end

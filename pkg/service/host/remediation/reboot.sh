# Reboot the host (the second remediation tier) without hanging the SSH session that asks for it: the reboot
# is scheduled DELAY seconds ahead, outside this session (a transient systemd timer, or a detached shell where
# there is no systemd), so this step ends and its output reaches the controller before sshd goes down. The
# controller then waits for the host to answer with another boot ID.
# Variables: DELAY (seconds before the reboot).
if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemd-run --quiet --collect --on-active="${DELAY}s" --timer-property=AccuracySec=1s systemctl reboot
  echo "reboot scheduled in ${DELAY}s (systemd timer)"
else
  nohup sh -c "sleep $DELAY; reboot" >/dev/null 2>&1 &
  echo "reboot scheduled in ${DELAY}s (detached shell)"
fi
CHANGED=1

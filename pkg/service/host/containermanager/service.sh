# Variables: RESTART_MARKER. Preceded by the put_file of the containerd unit.
if [ "$CHANGED" = 1 ]; then systemctl daemon-reload; fi
if ! systemctl is-enabled -q containerd >/dev/null 2>&1; then systemctl enable containerd; CHANGED=1; fi
if systemctl is-active -q containerd >/dev/null 2>&1; then
  if [ -e "$RESTART_MARKER" ]; then systemctl restart containerd; echo restarted; CHANGED=1; fi
else
  systemctl start containerd; echo started; CHANGED=1
fi
rm -f "$RESTART_MARKER"

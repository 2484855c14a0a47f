# Preceded by the put_file calls of the kubelet unit and drop-in.
if [ "$CHANGED" = 1 ]; then systemctl daemon-reload; fi
if ! systemctl is-enabled -q kubelet >/dev/null 2>&1; then systemctl enable kubelet; CHANGED=1; fi

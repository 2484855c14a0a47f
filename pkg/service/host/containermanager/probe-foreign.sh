# Variables: STAMP (capkk's containerd stamp). Prints the version of a running containerd capkk did not install.
if [ ! -e "$STAMP" ] && command -v containerd >/dev/null 2>&1 && systemctl is-active -q containerd >/dev/null 2>&1; then
  echo "foreign=$(containerd --version 2>/dev/null)"
fi

# Variables: SOCK (CRI socket for kubeadm reset --cri-socket; empty: kubeadm's detection).
if command -v kubeadm >/dev/null 2>&1 && [ -e /etc/kubernetes ]; then
  if kubeadm reset -f ${SOCK:+--cri-socket "$SOCK"}; then echo 'kubeadm reset done'; else echo "kubeadm reset exited $? (continuing with cleanup)"; fi
  CHANGED=1
fi

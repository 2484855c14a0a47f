STAMPS=/var/lib/capkk/artifacts
set -- binary kubeadm /usr/local/bin/kubeadm binary kubelet /usr/local/bin/kubelet binary kubectl /usr/local/bin/kubectl archive cni /opt/cni/bin/loopback
# Variables: STAMPS (artifact stamp directory). Arguments: triples KIND ID PATH, KIND `binary` (PATH: the
# installed file, its digest is printed) or `archive` (PATH: a file the archive provides; the stamp is printed).
while [ $# -ge 3 ]; do
  case "$1" in
    binary) echo "@@art:$2=$(sha256sum "$3" 2>/dev/null | cut -d' ' -f1)" ;;
    archive) if [ -e "$3" ]; then echo "@@art:$2=$(cat "$STAMPS/$2" 2>/dev/null)"; else echo "@@art:$2="; fi ;;
  esac
  shift 3
done
echo '@@extra'
systemctl is-enabled -q kubelet >/dev/null 2>&1 && echo '@@enabled'

true

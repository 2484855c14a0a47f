# Whether a write_files item the journal shows done still holds on the host (step.sh's `step_kept`). It does
# not when its file is gone: a reboot empties /run and /tmp, where CABPK puts kubeadm's configuration, and the
# resumed run's kubeadm would find nothing. Nor when this run has already written the same path again (an
# append after its file was rewritten). Variables: P (path). Sets KEPT_PATH for step.sh.
KEPT_PATH=$P
[ -e "$P" ] || [ -L "$P" ] || return 1
case "$RW" in *"$NL$P$NL"*) return 1;; esac

# A bootstrap still running on the host is stopped before anything is reset. The provisioning script ignores
# hang-ups, so that a dropped connection never interrupts a step (provisioning/launcher.sh); when its Machine is
# deleted in the middle of the bootstrap, the manager drops that connection and releases the host, and the run
# would go on: a step that waits (a pre-kubeadm command polling for a signal) or kubeadm itself would then run
# during the reset, or after it, on a host handed out as clean. The run holds the provisioning lock (D/lock)
# from its start to its end, and its steps do not (they run with the lock's descriptor closed): a process holding
# the lock is a run's script, and its process group is that run (the exec's shell has no job control, so the
# steps and what they started share it). Those groups get TERM, then KILL when the lock is still held 10 s
# later. Variables: D (the provisioning state dir).
_holders() { # PIDs holding D/lock open (one find over every process's descriptors, not a readlink each)
  find /proc/[0-9]*/fd -maxdepth 1 -lname "$D/lock" 2>/dev/null | cut -d/ -f3 | sort -u
}
_pgid() { # the process group of PID $1 (field 5 of /proc/PID/stat, counted after the command name's parenthesis)
  _s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  _s=${_s##*) }
  # shellcheck disable=SC2086 # the fields are words
  set -- $_s
  echo "$3"
}
_self=$(_pgid $$)
_groups=
for _p in $(_holders); do
  _g=$(_pgid "$_p") || continue
  # Never the init process's group nor this script's own.
  if ! [ "$_g" -gt 1 ] 2>/dev/null || [ "$_g" = "$_self" ]; then continue; fi
  case " $_groups " in *" $_g "*) ;; *) _groups="$_groups $_g" ;; esac
done
if [ -n "$_groups" ]; then
  for _g in $_groups; do kill -TERM "-$_g" 2>/dev/null || true; done
  _i=0
  while [ -n "$(_holders)" ] && [ "$_i" -lt 10 ]; do sleep 1; _i=$((_i + 1)); done
  for _g in $_groups; do kill -KILL "-$_g" 2>/dev/null || true; done
  echo "stopped the bootstrap still running on the host (process groups:$_groups)"
  CHANGED=1
fi

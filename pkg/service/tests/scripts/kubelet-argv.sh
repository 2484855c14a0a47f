# Start the rendered kubelet unit + drop-in under a real systemd (a user manager in a private mount namespace)
# and print the argv systemd gives /usr/local/bin/kubelet, one argument per line.
#
# Run as: unshare --mount --propagation private sh kubelet-argv.sh WORKDIR
# WORKDIR holds kubelet.service, 10-kubeadm.conf and, when present, default-kubelet (-> /etc/default/kubelet)
# and kubeadm-flags.env (-> /var/lib/kubelet/kubeadm-flags.env).
# Every path the unit names is a tmpfs of this mount namespace only: the machine's files are never touched.
set -eu
W=$1
# A user manager refuses to start unless the system "was booted with systemd"; it checks this directory.
mount -t tmpfs capkk-test /run
mkdir -p /run/systemd/system
for d in /etc/default /var/lib /usr/local/bin; do mount -t tmpfs capkk-test "$d"; done
mkdir -p /var/lib/kubelet
[ -f "$W/default-kubelet" ] && cp "$W/default-kubelet" /etc/default/kubelet
[ -f "$W/kubeadm-flags.env" ] && cp "$W/kubeadm-flags.env" /var/lib/kubelet/kubeadm-flags.env
# The "kubelet" records its argv and stays up, like the real one.
cat > /usr/local/bin/kubelet <<REC
#!/bin/sh
for a in "\$@"; do printf '%s\n' "\$a"; done > "$W/argv.tmp"
echo \$\$ > "$W/kubelet.pid"
mv "$W/argv.tmp" "$W/argv"
exec sleep 120
REC
chmod 755 /usr/local/bin/kubelet
mkdir -p "$W/run" "$W/config/systemd/user/kubelet.service.d"
cp "$W/kubelet.service" "$W/config/systemd/user/kubelet.service"
cp "$W/10-kubeadm.conf" "$W/config/systemd/user/kubelet.service.d/10-kubeadm.conf"
export XDG_RUNTIME_DIR="$W/run" XDG_CONFIG_HOME="$W/config"
/lib/systemd/systemd --user > "$W/systemd.log" 2>&1 &
manager=$!
# SIGKILL, not SIGTERM: a user manager answers SIGTERM by starting exit.target and stopping every unit first,
# which under load outlasted the test's time limit (CI saw the argv printed, then a timeout in this trap).
# The recorder (its pid is the `sleep` it execs) is killed first so it does not outlive the manager; not with
# `systemctl --user kill`, which itself hung for seconds now and then.
cleanup() {
  [ -f "$W/kubelet.pid" ] && kill -KILL "$(cat "$W/kubelet.pid")" 2>/dev/null || true
  kill -KILL "$manager" 2>/dev/null || true
  wait "$manager" 2>/dev/null || true
}
trap cleanup EXIT
i=0
until [ -S "$W/run/systemd/private" ]; do
  i=$((i + 1)); [ "$i" -le 150 ] || { echo "systemd --user did not come up" >&2; cat "$W/systemd.log" >&2; exit 1; }
  sleep 0.2
done
systemctl --user start kubelet.service
i=0
until [ -f "$W/argv" ]; do
  i=$((i + 1)); [ "$i" -le 150 ] || { echo "kubelet.service never ran" >&2; systemctl --user status kubelet.service >&2 || true; exit 1; }
  sleep 0.2
done
cat "$W/argv"

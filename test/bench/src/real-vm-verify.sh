# capkk-bench real-vm: what must be on the host after either method (run with `bash -s`; EXPECT, one
# "<file name> <sha256>" per line, is prepended). Prints "installed: <name> <path>" for each binary found with the
# served digest, "problem: ..." for each thing wrong, and "check: done" at the end.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
problem() { echo "problem: $*"; }
while read -r name sha; do
  [ -n "$name" ] || continue
  found=""
  # Where either provider installs: binaries in /usr/local/{bin,sbin}, the CNI plugins in /opt/cni/bin.
  for d in /usr/local/bin /usr/local/sbin /opt/cni/bin; do
    f=$d/$name
    if [ -f "$f" ] && [ -x "$f" ] && [ "$(sha256sum <"$f" | cut -d' ' -f1)" = "$sha" ]; then
      found=$f
      break
    fi
  done
  if [ -n "$found" ]; then echo "installed: $name $found"; else problem "$name: no executable with the served digest in /usr/local/bin, /usr/local/sbin or /opt/cni/bin"; fi
done <<<"$EXPECT"
# containerd: Type=notify, so active means it told systemd it is serving; give a restart a moment.
state=unknown
for _ in $(seq 30); do
  state=$(systemctl is-active containerd 2>&1)
  [ "$state" = active ] && break
  sleep 1
done
[ "$state" = active ] || problem "containerd is $state, not active"
ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1 || problem "ctr cannot reach containerd on /run/containerd/containerd.sock"
crictl --runtime-endpoint unix:///run/containerd/containerd.sock version >/dev/null 2>&1 ||
  problem "crictl gets no answer from containerd's CRI service"
enabled=$(systemctl is-enabled kubelet 2>&1)
[ "$enabled" = enabled ] || problem "kubelet is $enabled, not enabled"
echo "check: done"

# shellcheck shell=bash
# capkk-bench real-vm: what must be on the host after either method (run with `bash -s`; EXPECT, one
# "<file name> <sha256>" per line, is prepended). Prints "installed: <name> <path>" for each binary found with the
# served digest, "problem: ..." for each thing wrong, "cri: ..." whether containerd answers crictl, and
# "check: done" at the end.
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
# The last line of a failing command's output says why (one line per problem).
last() { tr '\n' ' ' | tail -c 300; }
[ "$state" = active ] || problem "containerd is $state, not active: $(journalctl -u containerd -n 3 --no-pager 2>/dev/null | last)"
out=$(ctr --address /run/containerd/containerd.sock version 2>&1) ||
  problem "ctr cannot reach containerd on /run/containerd/containerd.sock: $(echo "$out" | last)"
# Whether containerd serves the CRI (what kubelet needs) is reported, not required: the config is each
# provider's own, and CAPKK v3's does not load the CRI plugin of containerd 2.x (docs/benchmarks.md).
if out=$(crictl --runtime-endpoint unix:///run/containerd/containerd.sock version 2>&1); then
  echo "cri: ok"
else
  echo "cri: not served: $(echo "$out" | last)"
fi
enabled=$(systemctl is-enabled kubelet 2>&1)
[ "$enabled" = enabled ] || problem "kubelet is $enabled, not enabled"
echo "check: done"

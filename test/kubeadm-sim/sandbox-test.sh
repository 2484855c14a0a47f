#!/usr/bin/env bash
# Runs the simulator's Go tests, including the one on two real sandbox hosts (needs root).
# Usage: test/kubeadm-sim/sandbox-test.sh   (from anywhere; builds what it needs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${KUBEADM_SIM_OUT:-$root/target/kubeadm-sim}
mkdir -p "$out"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/kubeadm" .)
(cd "$root" && cargo build -q -p capkk-sandbox --bin sandbox)
make -s -C "$root" mgmt-bin >/dev/null
cp_dir=$(ls -d "${CAPKK_CACHE:-$HOME/.cache/capkk-rs}"/bin/*/ | while read -r d; do [ -x "$d/kube-apiserver" ] && echo "$d"; done | head -1)
[ -n "$cp_dir" ] || { echo "no kube-apiserver build found (make mgmt-bin)"; exit 1; }
export KUBEADM_SIM_SANDBOX=$root/target/debug/sandbox KUBEADM_SIM_CP_BIN_DIR=$cp_dir KUBEADM_SIM_BIN=$out/kubeadm
cd "$here" && go test -count=1 -v ./... "$@"

#!/usr/bin/env bash
# Runs the simulator's Go tests, including the one on two real sandbox hosts (needs root).
# Usage: test/kubeadm-sim/sandbox-test.sh   (from anywhere; builds what it needs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${KUBEADM_SIM_OUT:-$root/target/kubeadm-sim}
mkdir -p "$out"
make -s -C "$root" build # the sandbox CLI, from the one test build of the workspace (same feature set)
make -s -C "$root" mgmt-bin >/dev/null
cp_dir=$(bash -c 'source "$1/test/mgmt/scripts/common.sh" && echo "$BIN_DIR"' _ "$root")
"$here/build.sh" "$out/kubeadm" "$cp_dir"
export KUBEADM_SIM_SANDBOX=${CARGO_TARGET_DIR:-$root/target}/debug/sandbox KUBEADM_SIM_BIN=$out/kubeadm
cd "$here" && go test -count=1 -v ./... "$@"

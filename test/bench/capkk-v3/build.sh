#!/usr/bin/env bash
# Builds the capkk-v3 driver (KubeKey CAPKK v3's SSH client and services, pinned in go.mod) into
# $CAPKK_CACHE/bin/capkk-v3-<hash>/capkk-v3-driver, where <hash> covers go.mod, go.sum, the sources, the Go
# version and this recipe, and prints the binary's path on stdout. Idempotent: a binary already built for the
# same inputs is reused. kubekey v3's checksum is not in the checksum database (see go.mod): GONOSUMDB names
# that module only, and go.sum pins it; every other module is verified.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
command -v go >/dev/null || { echo "capkk-v3: go is required to build the capkk-v3 driver" >&2; exit 1; }
RECIPE=1
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
hash=$( { cat go.mod go.sum ./*.go; go env GOVERSION; echo "recipe=$RECIPE"; } | sha256sum | cut -c1-16)
dir=$CAPKK_CACHE/bin/capkk-v3-$hash
out=$dir/capkk-v3-driver
if [ ! -x "$out" ]; then
  mkdir -p "$dir"
  exec 9>"$dir/.build.lock"
  flock 9
  if [ ! -x "$out" ]; then
    echo "capkk-v3: building the driver (github.com/kubesphere/kubekey/v3, see go.mod) into $dir ..." >&2
    t0=$(date +%s)
    # shellcheck source=../../lib/heartbeat.sh
    source ../../lib/heartbeat.sh
    heartbeat "capkk-v3: go build" env GONOSUMDB=github.com/kubesphere/kubekey GOFLAGS=-mod=readonly CGO_ENABLED=0 \
      go build -trimpath -ldflags "-s -w" -o "$out.tmp.$$" .
    mv -f "$out.tmp.$$" "$out"
    echo "capkk-v3: built in $(( $(date +%s) - t0 ))s" >&2
  fi
fi
echo "$out"

#!/usr/bin/env bash
# Builds the kubeadm simulator with etcd and kube-apiserver embedded (gzipped), as the e2e ships it.
# Usage: test/kubeadm-sim/build.sh OUT_FILE CP_BIN_DIR [VERSION]
#   CP_BIN_DIR holds etcd and kube-apiserver; VERSION (default: main.go's) is what `kubeadm version` reports and
#   the kubelet version join registers (one build per Kubernetes release a test publishes).
# Rebuilds only when the sources or the embedded binaries changed. Callers may run at once (the integration
# binaries of `make test-integration INTEGRATION_JOBS=N`): one builds OUT_FILE while the others wait for it
# (OUT_FILE.lock), and each build embeds from a copy of the sources of its own, so that builds of other
# versions beside it never see its half-written embedded/ directory.
set -euo pipefail
out=$1 cp_dir=$2 ver=${3:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for b in etcd kube-apiserver; do [ -x "$cp_dir/$b" ] || { echo "$cp_dir/$b missing (make mgmt-bin)" >&2; exit 1; }; done
key=$( (cd "$here" && cat go.mod go.sum ./*.go; sha256sum "$cp_dir/etcd" "$cp_dir/kube-apiserver" | cut -d' ' -f1; echo "$ver") | sha256sum | cut -c1-16)
if [ -x "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then exit 0; fi
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
# Built by another caller while this one waited.
if [ -x "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/go.mod "$here"/go.sum "$here"/*.go "$work"/
mkdir "$work/embedded"
# shellcheck source=../lib/heartbeat.sh
source "$here/../lib/heartbeat.sh"
# Compressing ~200 MB takes minutes on a loaded machine: under a heartbeat too.
for b in etcd kube-apiserver; do
  # shellcheck disable=SC2016 # the inner shell expands them
  heartbeat "kubeadm-sim: gzip $b" sh -c 'gzip -1 -c "$1" >"$2"' _ "$cp_dir/$b" "$work/embedded/$b.gz"
done
(cd "$work" && heartbeat "kubeadm-sim: go build" env CGO_ENABLED=0 go build -trimpath -tags embedcp -ldflags "-s -w${ver:+ -X main.version=$ver}" -o "$out.tmp" .)
mv -f "$out.tmp" "$out"
echo "$key" >"$out.key"

#!/usr/bin/env bash
# Builds the upstream Kubernetes conformance suite at the node artifacts' Kubernetes (docs/conformance.md):
#
#   e2e.test          `go test -c k8s.io/kubernetes/test/e2e`, version-stamped like the node binaries
#   ginkgo            github.com/onsi/ginkgo/v2/ginkgo at the version k8s.io/kubernetes' go.mod requires
#   agnhost           k8s.io/kubernetes/test/images/agnhost (the e2e tests' Swiss-army image)
#   nonewprivs        k8s.io/kubernetes/test/images/nonewprivs (nnp, for the nonewprivs image)
#   sample-apiserver  k8s.io/sample-apiserver (the aggregator conformance test's image)
#
# all from one Go module, tools/e2e (its go.mod: same k8s.io/kubernetes release and staging replaces as
# test/vm/artifacts/tools/kube, so Go's build cache of the node binaries is reused). Every build runs at
# `nice -n $CONFORMANCE_NICE` (15) under a heartbeat: on a shared 2-core machine it must yield.
#
# Output: $CAPKK_CACHE/conformance/suite-<hash of this script, tools/e2e and the Go version>/bin/, and
# $CAPKK_CACHE/conformance/suite.env (CONFORMANCE_SUITE_DIR CONFORMANCE_BIN_DIR KUBE_VERSION GINKGO_VERSION).
# A finished tree is reused as is.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
MOD=$HERE/tools/e2e
# shellcheck source=../mgmt/scripts/common.sh
source "$REPO/test/mgmt/scripts/common.sh" # CAPKK_CACHE, go_version
# shellcheck source=../lib/heartbeat.sh
source "$REPO/test/lib/heartbeat.sh"
log() { echo "conformance-suite: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
NICE=${CONFORMANCE_NICE:-15}
# Bump when the recipe changes in a way the hashed files do not show.
SUITE_RECIPE=1

command -v go >/dev/null || die "go is required"
modv() { # <go.mod> <module>: the version it requires
  awk -v m="$2" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' "$1"
}
KUBE_VERSION=$(modv "$MOD/go.mod" k8s.io/kubernetes)
NODE_MOD=$REPO/test/vm/artifacts/tools/kube/go.mod
[ "$KUBE_VERSION" = "$(modv "$NODE_MOD" k8s.io/kubernetes)" ] ||
  die "tools/e2e pins Kubernetes $KUBE_VERSION, the node artifacts $(modv "$NODE_MOD" k8s.io/kubernetes): the suite must test the cluster's version"
# Every module both go.mod files require must be at the same version (else the node binaries' compile cache is
# not reused and, worse, the suite links other client libraries than the cluster's components).
skew=$(awk 'FNR == 1 { f++ } /^\t[^ ]+ v[^ ]+/ { v[f, $1] = $2; seen[$1] = 1 }
  END { for (m in seen) if (((1, m) in v) && ((2, m) in v) && v[1, m] != v[2, m]) print m, v[1, m], v[2, m] }' \
  "$MOD/go.mod" "$NODE_MOD")
[ -z "$skew" ] || die "tools/e2e and the node artifacts' tools/kube require different versions: $skew"

inputs_hash() {
  {
    cd "$HERE"
    sha256sum build-suite.sh tools/e2e/go.mod tools/e2e/go.sum tools/e2e/suite.go
    echo "recipe=$SUITE_RECIPE"
    go_version
  } | sha256sum | cut -c1-16
}
HASH=$(inputs_hash)
ROOT=$CAPKK_CACHE/conformance
OUT=$ROOT/suite-$HASH
mkdir -p "$OUT/bin"
exec 9>"$OUT/.build.lock"
flock 9

# The ginkgo CLI must be the release the suite was written against (k8s.io/kubernetes' go.mod).
GINKGO_VERSION=$(modv "$MOD/go.mod" github.com/onsi/ginkgo/v2)
kube_gomod=$(cd "$MOD" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[ -f "$kube_gomod" ] || die "go mod download gave no go.mod for k8s.io/kubernetes@$KUBE_VERSION"
want=$(modv "$kube_gomod" github.com/onsi/ginkgo/v2)
[ "$GINKGO_VERSION" = "$want" ] || die "tools/e2e selects ginkgo $GINKGO_VERSION, k8s.io/kubernetes $KUBE_VERSION requires $want"

if [ ! -e "$OUT/.complete" ]; then
  T0=$(date +%s)
  log "output: $OUT (kubernetes $KUBE_VERSION, ginkgo $GINKGO_VERSION, $(go_version), nice $NICE)"
  log "load average: $(cut -d' ' -f1-3 /proc/loadavg); free on /: $(df -h --output=avail / | tail -1 | tr -d ' ')"
  # Version stamping as the node binaries' (kubeadm/kubectl print it; the suite logs it and compares skew).
  major=${KUBE_VERSION#v}; major=${major%%.*}
  minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
  ld="-s -w"
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  timed() { # <name> <command...>: under nice and a heartbeat, its output in <OUT>/<name>.log, timed
    local name=$1 t0 secs
    shift
    t0=$(date +%s)
    log "$name: building ..."
    heartbeat --log "$OUT/$name.log" "conformance-suite: $name" nice -n "$NICE" "$@" ||
      { tail -n 30 "$OUT/$name.log" >&2; die "$name failed (log: $OUT/$name.log)"; }
    secs=$(( $(date +%s) - t0 ))
    echo "$name ${secs}s load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/') $(date -u +%FT%TZ)" >> "$OUT/build-times.txt"
    log "$name: done in ${secs}s"
  }
  # ginkgo, agnhost, nonewprivs, sample-apiserver: the module's tools, one `go build`.
  (cd "$MOD" && timed tools go build -trimpath -ldflags "$ld" -o "$OUT/bin/" tool)
  # `go build` names them after their directories: nonewprivs' binary is nnp in its image.
  (cd "$MOD" && timed e2e.test go test -c -vet=off -trimpath -ldflags "$ld" -o "$OUT/bin/e2e.test" k8s.io/kubernetes/test/e2e)
  "$OUT/bin/ginkgo" version | grep -q "Version ${GINKGO_VERSION#v}$" ||
    die "ginkgo reports $("$OUT/bin/ginkgo" version), expected $GINKGO_VERSION"
  "$OUT/bin/e2e.test" --version 2>/dev/null | grep -q "$KUBE_VERSION" ||
    die "e2e.test --version does not name $KUBE_VERSION: $("$OUT/bin/e2e.test" --version 2>&1 | head -1)"
  touch "$OUT/.complete"
  log "suite ready in $(( $(date +%s) - T0 ))s: $(du -sh "$OUT/bin" | cut -f1) in $OUT/bin"
fi
q() { printf '%q' "$1"; }
{
  echo "# The conformance suite (test/conformance/build-suite.sh); source this file."
  echo "CONFORMANCE_SUITE_DIR=$(q "$OUT")"
  echo "CONFORMANCE_BIN_DIR=$(q "$OUT/bin")"
  echo "KUBE_VERSION=$KUBE_VERSION"
  echo "GINKGO_VERSION=$GINKGO_VERSION"
} > "$ROOT/suite.env.tmp.$$"
mv -f "$ROOT/suite.env.tmp.$$" "$ROOT/suite.env"
echo "$OUT"

#!/usr/bin/env bash
# Checks what `clusterctl init` installs here (`make clusterctl-artifacts-test`), without VMs:
#  - every local repository file clusterctl reads exists, with the versions, images and kinds it must hold;
#  - every image tarball is linux/amd64, runs as the user its Deployment expects, and its entrypoint is a static
#    binary that runs (`--help` under chroot, as that user);
#  - config.sh writes a configuration with which clusterctl renders each provider (`generate provider`) with the
#    image overrides applied, and `clusterctl init --list-images` (against the local plane) lists exactly the images
#    the registry storage serves (manifest and every blob, through the real registry on 127.0.0.1);
#  - every rendered components file and cert-manager's manifest pass the local plane's server-side dry run.
# No silent skip: a missing prerequisite fails and is named. Needs root (chroot), curl, python3, the local plane
# (`make mgmt-up`); run it under the hosts lock (it creates and deletes namespaces on the shared plane).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
ENV_FILE=${CLUSTERCTL_ARTIFACTS_ENV:-$CAPKK_CACHE/clusterctl/current.env}
# shellcheck source=../mgmt/scripts/common.sh
source "$REPO/test/mgmt/scripts/common.sh"
FAILS=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
die() { echo "FAIL $*"; exit 1; }
expect_eq() { # <what> <got> <want>
  if [ "$2" = "$3" ]; then ok "$1 = $3"; else bad "$1: got '$2', want '$3'"; fi
}
expect_has() { # <what> <haystack> <needle>
  case $2 in *"$3"*) ok "$1 contains '$3'" ;; *) bad "$1: '$3' not in: $(echo "$2" | head -3)" ;; esac
}

[ -f "$ENV_FILE" ] || die "prerequisite missing: $ENV_FILE (run 'make clusterctl-artifacts')"
# shellcheck disable=SC1090
source "$ENV_FILE"
A=$CLUSTERCTL_ARTIFACTS_DIR
[ -f "$A/.complete" ] || die "prerequisite missing: a complete build in $A"
for c in curl python3 chroot ldd tar go; do command -v "$c" >/dev/null || die "prerequisite missing: $c"; done
[ "$(id -u)" = 0 ] || die "prerequisite missing: root (the image checks chroot into the image file systems)"
KUBECTL=$(asset_bin kubectl)
CLUSTERCTL=$CLUSTERCTL_BIN
KUBECONFIG_MGMT=$CAPKK_MGMT_DIR/kubeconfig
[ -x "$CLUSTERCTL" ] || die "prerequisite missing: $CLUSTERCTL (make mgmt-bin)"
if [ ! -f "$KUBECONFIG_MGMT" ] || ! "$KUBECTL" --kubeconfig "$KUBECONFIG_MGMT" get --raw /readyz >/dev/null 2>&1; then
  die "prerequisite missing: the local management plane answering at $KUBECONFIG_MGMT (make mgmt-up)"
fi
export CLUSTERCTL_DISABLE_VERSIONCHECK=true
TMP=$(mktemp -d /tmp/clusterctl-check.XXXXXX)
REG_PID=
CREATED_NS=()
CREATED_CRDS=()
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_MGMT" "$@"; }
cleanup() {
  [ -z "$REG_PID" ] || { kill "$REG_PID" 2>/dev/null; wait "$REG_PID" 2>/dev/null; }
  [ ${#CREATED_CRDS[@]} = 0 ] || k delete crd "${CREATED_CRDS[@]}" --wait=false >/dev/null 2>&1
  [ ${#CREATED_NS[@]} = 0 ] || k delete ns "${CREATED_NS[@]}" --wait=false >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT
R=$CLUSTERCTL_REPOSITORY
CM=$CERT_MANAGER_VERSION
CV=$CAPI_VERSION
kinds() { # <yaml file>: "Kind name" per object
  python3 - "$1" <<'PY'
import sys
kind = name = None
for doc in open(sys.argv[1]).read().split("\n---"):
    kind = name = None
    meta = False
    for line in doc.splitlines():
        if line.startswith("kind:"):
            kind = line.split(":", 1)[1].strip()
        elif line.startswith("metadata:"):
            meta = True
        elif meta and line.startswith("  name:") and name is None:
            name = line.split(":", 1)[1].strip()
        elif line and not line.startswith(" ") and not line.startswith("metadata:"):
            meta = False
    if kind:
        print(kind, name)
PY
}

echo "== local repositories ($R)"
for f in "cert-manager/$CM/cert-manager.yaml" \
         "cluster-api/$CV/core-components.yaml" "cluster-api/$CV/metadata.yaml" \
         "bootstrap-kubeadm/$CV/bootstrap-components.yaml" "bootstrap-kubeadm/$CV/metadata.yaml" \
         "control-plane-kubeadm/$CV/control-plane-components.yaml" "control-plane-kubeadm/$CV/metadata.yaml"; do
  if [ -s "$R/$f" ]; then ok "$f"; else bad "missing $R/$f"; fi
done
minor=${CV#v*.}; minor=${minor%%.*}
for m in cluster-api bootstrap-kubeadm control-plane-kubeadm; do
  if python3 - "$R/$m/$CV/metadata.yaml" "$minor" <<'PY'
import re, sys
text, minor = open(sys.argv[1]).read(), sys.argv[2]
ok = re.search(r"- major: 1\s+minor: %s\s+contract: v1beta2" % minor, text)
sys.exit(0 if ok else 1)
PY
  then ok "$m metadata.yaml maps 1.$minor to contract v1beta2"; else bad "$m metadata.yaml lacks 1.$minor -> v1beta2"; fi
done
cmk=$(kinds "$R/cert-manager/$CM/cert-manager.yaml")
expect_eq "cert-manager.yaml CRDs" "$(grep -c '^CustomResourceDefinition ' <<< "$cmk")" 6
for d in cert-manager cert-manager-webhook cert-manager-cainjector; do
  expect_has "cert-manager.yaml objects" "$cmk" "Deployment $d"
done
expect_has "cert-manager.yaml objects" "$cmk" "Namespace cert-manager"
expect_has "cert-manager.yaml objects" "$cmk" "ValidatingWebhookConfiguration cert-manager-webhook"
expect_has "cert-manager.yaml objects" "$cmk" "MutatingWebhookConfiguration cert-manager-webhook"
for c in controller webhook cainjector; do
  if grep -q "image: \"quay.io/jetstack/cert-manager-$c:$CM\"" "$R/cert-manager/$CM/cert-manager.yaml"; then
    ok "cert-manager.yaml runs quay.io/jetstack/cert-manager-$c:$CM"
  else
    bad "cert-manager.yaml lacks the $c image"
  fi
done
if grep -q 'startupapicheck' "$R/cert-manager/$CM/cert-manager.yaml"; then
  bad "cert-manager.yaml holds the startupapicheck Job (the release's static manifest has none)"
else
  ok "cert-manager.yaml has no startupapicheck Job (as the release's static manifest)"
fi

echo "== images ($CLUSTERCTL_IMAGES_DIR)"
# <tar> <tag> <user> <entrypoint> <expected --help substring>
IMAGES=(
  "cert-manager-controller quay.io/jetstack/cert-manager-controller:$CM 1000 /app/cmd/controller/controller cert-manager"
  "cert-manager-webhook quay.io/jetstack/cert-manager-webhook:$CM 1000 /app/cmd/webhook/webhook webhook"
  "cert-manager-cainjector quay.io/jetstack/cert-manager-cainjector:$CM 1000 /app/cmd/cainjector/cainjector cainjector"
  "cluster-api-controller registry.k8s.io/cluster-api/cluster-api-controller:$CV 65532 /manager --leader-elect"
  "kubeadm-bootstrap-controller registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:$CV 65532 /manager --leader-elect"
  "kubeadm-control-plane-controller registry.k8s.io/cluster-api/kubeadm-control-plane-controller:$CV 65532 /manager --leader-elect"
)
for spec in "${IMAGES[@]}"; do
  read -r name tag user entry want <<< "$spec"
  t=$CLUSTERCTL_IMAGES_DIR/$name.tar
  [ -f "$t" ] || { bad "missing image tarball $t"; continue; }
  got=$(python3 - "$t" <<'PY'
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
m = json.load(t.extractfile("manifest.json"))[0]
c = json.load(t.extractfile(m["Config"]))
cfg = c.get("config", {})
print(c["os"], c["architecture"], cfg.get("User", ""), ",".join(cfg.get("Entrypoint") or []), ",".join(m["RepoTags"]))
PY
)
  expect_eq "image $name: os arch user entrypoint tags" "$got" "linux amd64 $user $entry $tag"
  root=$TMP/rootfs-$name
  mkdir -p "$root"
  for l in $(tar -xOf "$t" manifest.json | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)[0]["Layers"]))'); do
    tar -xOf "$t" "$l" | tar -xz -C "$root"
  done
  expect_has "image $name: ldd $entry" "$(ldd "$root$entry" 2>&1)" "not a dynamic executable"
  expect_has "image $name: $entry --help as $user (chroot)" \
    "$(chroot --userspec="$user:$user" "$root" "$entry" --help 2>&1)" "$want"
  expect_eq "image $name: mode of /tmp" "$(stat -c %a "$root/tmp" 2>&1)" 1777
  rm -rf "$root"
done
# Built from the pinned modules, without cgo (go's build information; -trimpath leaves -ldflags out of it).
buildinfo() { go version -m "$A/bin/$1" 2>&1 | awk '$1 == "mod" || ($1 == "build" && $2 ~ /^CGO_ENABLED=/)' | tr '\t\n' '  '; }
for b in capi/cluster-api-controller capi/kubeadm-bootstrap-controller capi/kubeadm-control-plane-controller; do
  expect_has "$b build information" "$(buildinfo "$b")" "mod sigs.k8s.io/cluster-api $CV "
  expect_has "$b build information" "$(buildinfo "$b")" "build CGO_ENABLED=0"
done
for c in controller webhook cainjector; do
  expect_has "cert-manager $c build information" "$(buildinfo "cert-manager/$c")" "mod github.com/cert-manager/cert-manager $CM "
  expect_has "cert-manager $c build information" "$(buildinfo "cert-manager/$c")" "build CGO_ENABLED=0"
done

echo "== clusterctl configuration and the registry"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
REG=127.0.0.1:$port
cat > "$TMP/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $CLUSTERCTL_REGISTRY_STORAGE
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: true
http:
  addr: $REG
EOF
"$A/bin/registry" serve "$TMP/registry.yml" > "$TMP/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 1 100); do curl -fsS -o /dev/null "http://$REG/v2/" 2>/dev/null && break; sleep 0.2; done
expect_eq "GET http://$REG/v2/" "$(curl -s -o /dev/null -w '%{http_code}' "http://$REG/v2/")" 200
CONF_OUT=$TMP/conf
if ! F=$("$HERE/config.sh" "$REG" "$CONF_OUT" v0.1.0 2>"$TMP/config.err"); then
  die "config.sh failed: $(cat "$TMP/config.err")"
fi
ok "config.sh wrote $F"
# <flag> <provider:version> <file> <images it must run after the override>
RENDER=(
  "--core cluster-api:$CV core $REG/cluster-api/cluster-api-controller:$CV"
  "--bootstrap kubeadm:$CV bootstrap $REG/cluster-api/kubeadm-bootstrap-controller:$CV"
  "--control-plane kubeadm:$CV control-plane $REG/cluster-api/kubeadm-control-plane-controller:$CV"
  "--infrastructure kubekey:v0.1.0 infrastructure $REG/capkk-manager:v0.1.0"
)
for r in "${RENDER[@]}"; do
  read -r flag prov file img <<< "$r"
  if "$CLUSTERCTL" generate provider "$flag" "$prov" --config "$F" > "$TMP/$file.yaml" 2>"$TMP/$file.err"; then
    ok "clusterctl generate provider $flag $prov renders ($(grep -c '^kind: ' "$TMP/$file.yaml") objects)"
  else
    bad "clusterctl generate provider $flag $prov: $(tail -3 "$TMP/$file.err")"; continue
  fi
  expect_eq "$prov images after the override" "$(grep -o 'image: .*' "$TMP/$file.yaml" | sort -u | tr -d '"')" "image: $img"
done
# Without --infrastructure kubekey: every image listed here must be in this registry, and ours is pushed by the
# tests that run it (the generate provider check above covers its override; `make release-test` runs
# `init list-images --infrastructure kubekey` against the release).
if "$CLUSTERCTL" init list-images --config "$F" --kubeconfig "$KUBECONFIG_MGMT" \
    > "$TMP/images.txt" 2>"$TMP/images.err"; then
  ok "clusterctl init list-images: $(wc -l < "$TMP/images.txt") images"
else
  bad "clusterctl init list-images: $(tail -3 "$TMP/images.err")"
fi
ACCEPT='application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json'
want_images=$(for c in controller webhook cainjector; do echo "$REG/jetstack/cert-manager-$c:$CM"; done
  for n in cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller; do
    echo "$REG/cluster-api/$n:$CV"; done)
expect_eq "the images clusterctl init would run" "$(sort "$TMP/images.txt" | tr '\n' ' ')" \
  "$(sort <<< "$want_images" | tr '\n' ' ')"
while read -r ref; do
  [ -n "$ref" ] || continue
  repo=${ref#*/}; tag=${repo##*:}; repo=${repo%:*}
  body=$(curl -s -H "Accept: $ACCEPT" -w '\n%{http_code}' "http://$REG/v2/$repo/manifests/$tag")
  code=${body##*$'\n'}; body=${body%$'\n'*}
  [ "$code" = 200 ] || { bad "GET /v2/$repo/manifests/$tag: HTTP $code"; continue; }
  n=0
  for d in $(python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join([m["config"]["digest"]]+[l["digest"] for l in m["layers"]]))' <<< "$body"); do
    c=$(curl -s -o /dev/null -I -w '%{http_code}' "http://$REG/v2/$repo/blobs/$d")
    [ "$c" = 200 ] || { bad "HEAD /v2/$repo/blobs/$d: HTTP $c"; n=-1; break; }
    n=$((n + 1))
  done
  [ $n -gt 1 ] && ok "the registry serves $ref (manifest + $n blobs)"
done < "$TMP/images.txt"

echo "== server-side dry run on the local plane"
# The plane already holds CAPI's CRDs and webhook configurations, installed by its own mgmtctl with URL client
# configs: `kubectl apply` would patch them into objects with both a URL and a Service, which the API server
# rightly refuses. So every object is dry-run as what it is to the server: a create when new, a replace (the whole
# object, validated as an update) when it exists. Namespaced objects need their namespace and cert-manager's kinds
# its CRDs: what the plane lacks of those is created for real (and deleted on exit).
for ns in cert-manager capi-system capi-kubeadm-bootstrap-system capi-kubeadm-control-plane-system capkk-system; do
  if ! k get ns "$ns" >/dev/null 2>&1; then k create ns "$ns" >/dev/null && CREATED_NS+=("$ns"); fi
done
python3 - "$R/cert-manager/$CM/cert-manager.yaml" "$TMP/cm-crds.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
open(sys.argv[2], "w").write("\n---\n".join(d for d in docs if "\nkind: CustomResourceDefinition\n" in "\n" + d + "\n"))
PY
for crd in $(k create --dry-run=client -f "$TMP/cm-crds.yaml" -o name 2>/dev/null | sed 's|.*/||'); do
  if ! k get crd "$crd" >/dev/null 2>&1; then CREATED_CRDS+=("$crd"); fi
done
k create -f "$TMP/cm-crds.yaml" >/dev/null 2>&1 # those that exist already stay as they are
if ! k wait --for condition=established --timeout=60s -f "$TMP/cm-crds.yaml" >/dev/null; then
  bad "cert-manager's CRDs could not be created on the plane"
fi
dry_run() { # <file>: each object passes the server's dry run as a create or (existing) a replace
  local f=$1 n c r errs n_ok
  n=$(grep -c '^kind: ' "$f")
  c=$(k create --dry-run=server -f "$f" 2>&1)
  r=$(k replace --dry-run=server -f "$f" 2>&1)
  errs=$( { grep '^Error' <<< "$c" | grep -v '(AlreadyExists)'; grep '^Error' <<< "$r" | grep -v '(NotFound)'; } | head -5)
  # Objects that passed either way (once each: on a shared plane an object may appear between the two runs).
  n_ok=$(sed -n -e 's/ created (server dry run)$//p' -e 's/ replaced (server dry run)$//p' <<< "$c"$'\n'"$r" |
    sort -u | grep -c .)
  if [ -z "$errs" ] && [ "$n_ok" = "$n" ]; then
    ok "server dry run of $(basename "$f"): all $n objects pass (as a create or a replace)"
  else
    bad "server dry run of $(basename "$f"): $n_ok of $n objects pass; $errs$(grep '(NotFound)' <<< "$c" | head -3)"
  fi
}
for f in "$R/cert-manager/$CM/cert-manager.yaml" "$TMP/core.yaml" "$TMP/bootstrap.yaml" "$TMP/control-plane.yaml" \
         "$TMP/infrastructure.yaml"; do
  if [ -s "$f" ]; then dry_run "$f"; else bad "nothing to dry-run: $f"; fi
done

echo
if [ "$FAILS" -gt 0 ]; then echo "clusterctl artifacts: $FAILS check(s) failed"; exit 1; fi
echo "clusterctl artifacts: all checks passed ($A)"

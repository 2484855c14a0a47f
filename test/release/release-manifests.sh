#!/usr/bin/env bash
# Builds the clusterctl artifacts of the kubekey infrastructure provider as a clusterctl local repository:
#
#   OUT/infrastructure-kubekey/VERSION/infrastructure-components.yaml   CRDs, RBAC, Deployment (image IMG), namespace
#   OUT/infrastructure-kubekey/VERSION/metadata.yaml                    release series -> CAPI contract
#   OUT/infrastructure-kubekey/VERSION/cluster-template*.yaml           templates/ (flavors)
#   OUT/infrastructure-kubekey/VERSION/clusterclass-kubekey.yaml        the ClusterClass
#   OUT/clusterctl-kubekey.sh                                           registers the repository as "kubekey" in the
#                                                                       clusterctl configuration of the machine it
#                                                                       runs on (test/release/clusterctl-kubekey.sh)
#
# Nothing in OUT names this machine's paths: OUT can be copied or served anywhere (docs/clusterctl.md).
#
# Usage: test/release/release-manifests.sh [--local-config] OUT VERSION IMG
#        (make release-manifests OUT=_out VERSION=v0.1.0 IMG=...)
# IMG is written into the Deployment as a literal image reference (clusterctl's image overrides change it).
# --local-config also writes OUT/clusterctl.yaml registering OUT's repository by its absolute path, for the tests
# that run clusterctl on this machine (--config OUT/clusterctl.yaml); a release has none.
# Runs the pinned kubectl of `make mgmt-bin` (kustomize built in), or $KUBECTL.
set -euo pipefail
local_config=0
if [ "${1:-}" = --local-config ]; then local_config=1; shift; fi
[ $# -eq 3 ] || { echo "usage: $0 [--local-config] OUT VERSION IMG" >&2; exit 2; }
out=$1 version=$2 img=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case $version in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "VERSION must look like v0.1.0, got '$version'" >&2; exit 2 ;; esac
case $img in *[[:space:]\}\$\#\&]*|"") echo "IMG '$img' is not an image reference" >&2; exit 2 ;; esac
if [ -z "${KUBECTL:-}" ]; then
  # shellcheck source=../mgmt/scripts/common.sh
  source "$root/test/mgmt/scripts/common.sh"
  KUBECTL=$(asset_bin kubectl)
  # A test that runs with a HOME of its own (so another CAPKK_CACHE) puts the plane's bin directory on PATH.
  [ -x "$KUBECTL" ] || KUBECTL=$(command -v kubectl || echo "$KUBECTL")
fi
[ -x "$KUBECTL" ] || { echo "kubectl (kustomize) not found at $KUBECTL: run 'make mgmt-bin' (or set KUBECTL)" >&2; exit 1; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
dir=$out/infrastructure-kubekey/$version
rm -rf "$dir"
mkdir -p "$dir"

# infrastructure-components.yaml: the default overlay with IMG as the manager's image.
shipped=$(sed -n 's#^  value: \(ghcr.io/capkk-rs/capkk-manager:[^ ]*\)$#\1#p' "$root/config/default/manager_args_patch.yaml")
[ -n "$shipped" ] || { echo "config/default/manager_args_patch.yaml: no literal manager image found" >&2; exit 1; }
"$KUBECTL" kustomize "$root/config/default" |
  sed "s#^\( *image: \)$shipped\$#\1$img#" >"$dir/infrastructure-components.yaml"

# metadata.yaml must list the release series VERSION belongs to.
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
if ! awk -v M="$major" -v m="$minor" '
    /major:/ {maj=$NF} /minor:/ {if (maj==M && $NF==m) found=1}
    END {exit !found}' "$root/metadata.yaml"; then
  echo "metadata.yaml has no releaseSeries entry for $major.$minor ($version)" >&2
  exit 1
fi
cp "$root/metadata.yaml" "$dir/metadata.yaml"
cp "$root"/templates/cluster-template*.yaml "$dir/"
[ -f "$root/templates/clusterclass-kubekey.yaml" ] && cp "$root/templates/clusterclass-kubekey.yaml" "$dir/"

# Checks clusterctl would otherwise fail on later, with a less direct message.
comp=$dir/infrastructure-components.yaml
ns_count=$(grep -c '^kind: Namespace$' "$comp" || true)
[ "$ns_count" = 1 ] || { echo "infrastructure-components.yaml must hold exactly one Namespace (has $ns_count)" >&2; exit 1; }
objs=$(grep -c '^kind: ' "$comp")
labelled=$(grep -c 'cluster.x-k8s.io/provider: infrastructure-kubekey' "$comp" || true)
[ "$labelled" -ge "$objs" ] || { echo "only $labelled of $objs objects carry the provider label" >&2; exit 1; }
images=$(grep -E '^ +image: ' "$comp" | sed -E 's/^ +image: //' | sort -u)
[ "$images" = "$img" ] || { echo "the components' images are '$images', not IMG '$img'" >&2; exit 1; }

# The registration script, with this version and the checksums of the repository's files filled in.
files=$(cd "$dir" && sha256sum -- * | sed 's/ [ *]/ /')
script=$(<"$root/test/release/clusterctl-kubekey.sh")
script=${script//@VERSION@/$version}
script=${script//@FILES@/$files}
printf '%s\n' "$script" >"$out/clusterctl-kubekey.sh"
chmod 0755 "$out/clusterctl-kubekey.sh"

echo "clusterctl repository: $dir"
(cd "$dir" && printf '  %s\n' *)
echo "register it:           $out/clusterctl-kubekey.sh [--image-repository REGISTRY/PATH]"
# OUT/clusterctl.yaml names OUT's absolute path: only with --local-config. One an earlier run wrote (this script's
# marker, or the header of the versions before it) is removed otherwise; a file of anyone else's is left alone.
if grep -qE "capkk-rs: kubekey provider|built by 'make release-manifests'" "$out/clusterctl.yaml" 2>/dev/null; then
  rm -f "$out/clusterctl.yaml"
fi
if [ "$local_config" = 1 ]; then
  rm -f "$out/clusterctl.yaml"
  PATH=$(dirname "$KUBECTL"):$PATH "$out/clusterctl-kubekey.sh" --config "$out/clusterctl.yaml" 2>"$out/.register.log" ||
    { cat "$out/.register.log" >&2; exit 1; }
  rm -f "$out/.register.log"
  echo "clusterctl config:     $out/clusterctl.yaml (this machine only)"
fi

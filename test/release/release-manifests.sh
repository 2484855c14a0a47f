#!/usr/bin/env bash
# Builds the clusterctl artifacts of the kubekey infrastructure provider as a clusterctl local repository:
#
#   OUT/infrastructure-kubekey/VERSION/infrastructure-components.yaml   CRDs, RBAC, Deployment, namespace
#   OUT/infrastructure-kubekey/VERSION/metadata.yaml                    release series -> CAPI contract
#   OUT/infrastructure-kubekey/VERSION/cluster-template*.yaml           templates/ (flavors)
#   OUT/infrastructure-kubekey/VERSION/clusterclass-kubekey.yaml        the ClusterClass
#   OUT/clusterctl.yaml                                                 registers the repository as "kubekey"
#
# Usage: test/release/release-manifests.sh OUT VERSION IMG     (make release-manifests OUT=_out VERSION=v0.1.0 IMG=...)
# IMG becomes the default of the ${CAPKK_IMAGE} variable. Needs kubectl (kustomize built in).
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 OUT VERSION IMG" >&2; exit 2; }
out=$1 version=$2 img=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case $version in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "VERSION must look like v0.1.0, got '$version'" >&2; exit 2 ;; esac
case $img in *[[:space:]\}]*|"") echo "IMG '$img' is not an image reference" >&2; exit 2 ;; esac
command -v kubectl >/dev/null || { echo "kubectl (with built-in kustomize) is required" >&2; exit 1; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
dir=$out/infrastructure-kubekey/$version
rm -rf "$dir"
mkdir -p "$dir"

# infrastructure-components.yaml: the default overlay; IMG becomes the image variable's default.
kubectl kustomize "$root/config/default" |
  sed -E "s#\\$\\{CAPKK_IMAGE:=[^}]*\\}#\${CAPKK_IMAGE:=$img}#" >"$dir/infrastructure-components.yaml"

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
grep -q "image: \${CAPKK_IMAGE:=$img}" "$comp" || { echo "the manager image is not the \${CAPKK_IMAGE} variable" >&2; exit 1; }

cat >"$out/clusterctl.yaml" <<YAML
# clusterctl configuration registering the local repository built by 'make release-manifests' as the
# infrastructure provider "kubekey". Use it with --config, e.g.
#   clusterctl generate provider --infrastructure kubekey:$version --config $out/clusterctl.yaml
#   clusterctl generate cluster demo --infrastructure kubekey:$version --config $out/clusterctl.yaml --list-variables
# (see docs/clusterctl.md). Variables may also be set here instead of in the environment.
providers:
  - name: kubekey
    type: InfrastructureProvider
    url: file://$dir/infrastructure-components.yaml
YAML

echo "clusterctl repository: $dir"
(cd "$dir" && printf '  %s\n' *)
echo "clusterctl config:     $out/clusterctl.yaml"

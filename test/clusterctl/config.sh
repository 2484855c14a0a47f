#!/usr/bin/env bash
# Writes the clusterctl configuration with which `clusterctl init --infrastructure kubekey --config OUT/clusterctl.yaml`
# installs everything from this machine's artifacts (`make clusterctl-artifacts`) and images from REGISTRY:
#
#   config.sh REGISTRY OUT [VERSION]        e.g. config.sh 198.18.0.1:5000 _out/clusterctl v0.1.0
#   (CLUSTERCTL_CONFIG_NO_KUBEKEY=1: the file without our provider's entries, for clusterctl-kubekey.sh to add)
#
# OUT/infrastructure-kubekey/VERSION/   our provider's local repository (test/release/release-manifests.sh, image
#                                       ghcr.io/capkk-rs/capkk-manager:VERSION, i.e. REGISTRY/capkk-manager:VERSION
#                                       after the override: push the manager image there)
# OUT/clusterctl.yaml                   clusterctl.yaml.in filled in: the providers' and cert-manager's local
#                                       repositories (in the artifacts) and the image overrides to REGISTRY
# Reads $CLUSTERCTL_ARTIFACTS_ENV (default $CAPKK_CACHE/clusterctl/current.env, written by build.sh).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
ENV_FILE=${CLUSTERCTL_ARTIFACTS_ENV:-$CAPKK_CACHE/clusterctl/current.env}
die() { echo "clusterctl-config: ERROR: $*" >&2; exit 1; }

if [ $# -lt 2 ] || [ $# -gt 3 ]; then die "usage: config.sh REGISTRY OUT [VERSION]"; fi
registry=$1 out=$2 version=${3:-v0.1.0}
[[ $registry =~ ^[A-Za-z0-9.-]+(:[0-9]+)?$ ]] || die "REGISTRY must be host[:port], got '$registry'"
[ -f "$ENV_FILE" ] || die "no $ENV_FILE: run 'make clusterctl-artifacts' first"
# shellcheck disable=SC1090
source "$ENV_FILE"
[ -f "$CLUSTERCTL_ARTIFACTS_DIR/.complete" ] || die "the artifacts in $ENV_FILE are incomplete"
# release-manifests.sh runs the management plane's kubectl (kustomize) itself.

mkdir -p "$out"
out=$(cd "$out" && pwd)
"$REPO/test/release/release-manifests.sh" "$out" "$version" "ghcr.io/capkk-rs/capkk-manager:$version" >/dev/null

text=$(<"$HERE/clusterctl.yaml.in")
text=${text//@REGISTRY@/$registry}
text=${text//@REPOSITORY@/$CLUSTERCTL_REPOSITORY}
text=${text//@KUBEKEY_REPOSITORY@/$out}
text=${text//@VERSION@/$version}
text=${text//@CAPI_VERSION@/$CAPI_VERSION}
text=${text//@CERT_MANAGER_VERSION@/$CERT_MANAGER_VERSION}
# CLUSTERCTL_CONFIG_NO_KUBEKEY=1: without our provider's entry and image override (the README test's starting
# point: a user's configuration before `make clusterctl-register` writes them).
if [ "${CLUSTERCTL_CONFIG_NO_KUBEKEY:-0}" = 1 ]; then
  text=$(awk '/^  - name: kubekey$/ {skip=3} /^  infrastructure-kubekey:$/ {skip=2} skip > 0 {skip--; next} 1' <<<"$text")
  case $(grep -v "^ *#" <<<"$text") in *kubekey*) die "CLUSTERCTL_CONFIG_NO_KUBEKEY: clusterctl.yaml.in's kubekey entries changed shape" ;; esac
fi
case $text in *@[A-Z_]*@*) die "clusterctl.yaml.in has a placeholder config.sh does not fill: $(grep -o '@[A-Z_]*@' <<< "$text" | head -1)" ;; esac
# Every file a URL names must exist (clusterctl would only say so at init time).
while read -r f; do
  [ -f "$f" ] || die "missing $f"
done < <(grep -o 'file://[^ ]*' <<< "$text" | sed 's|^file://||')
printf '%s\n' "$text" > "$out/clusterctl.yaml.tmp" && mv -f "$out/clusterctl.yaml.tmp" "$out/clusterctl.yaml"
echo "$out/clusterctl.yaml"

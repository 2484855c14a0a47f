#!/usr/bin/env bash
# Completes a release in OUT after `make release-manifests` (clusterctl repository + image archive):
#
#   OUT/capkk-manager-VERSION.cdx.json   CycloneDX 1.5 SBOM of the manager's crate (capkk-controllers: the
#                                        manager binary and every crate it links on this platform, with versions,
#                                        licenses, purls, crate checksums; no dev-dependency)
#   OUT/SHA256SUMS                       sha256sum of the repository's files, clusterctl-kubekey.sh, the image
#                                        archive and the SBOM, paths relative to OUT (`cd OUT && sha256sum -c SHA256SUMS`)
#
# Usage: CYCLONEDX_SBOM=PATH test/release/release.sh OUT VERSION        (make release)
# CYCLONEDX_SBOM is hack/devtools' cyclonedx-sbom (built by `make test-build`), which reads `cargo metadata`.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OUT VERSION" >&2; exit 2; }
out=$1 version=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${CYCLONEDX_SBOM:?set CYCLONEDX_SBOM to the cyclonedx-sbom binary of hack/devtools (make release builds it)}"
[ -x "$CYCLONEDX_SBOM" ] || { echo "cyclonedx-sbom not found at $CYCLONEDX_SBOM (make test-build)" >&2; exit 1; }
repo=infrastructure-kubekey/$version
image=capkk-manager-$version.oci.tar
sbom=capkk-manager-$version.cdx.json
for f in "$out/$repo/infrastructure-components.yaml" "$out/$repo/metadata.yaml" "$out/clusterctl-kubekey.sh" "$out/$image"; do
  [ -s "$f" ] || { echo "$f is missing: run make release-manifests first" >&2; exit 1; }
done

# The commit's time instead of now, so the same commit gives the same SBOM.
SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s) \
  "$CYCLONEDX_SBOM" --manifest-path "$root/Cargo.toml" --package capkk-controllers --output "$out/$sbom"

(cd "$out" && sha256sum "$repo"/* clusterctl-kubekey.sh "$image" "$sbom" >SHA256SUMS)
echo "SBOM:       $out/$sbom ($(du -k "$out/$sbom" | cut -f1) KiB)"
echo "SHA256SUMS: $out/SHA256SUMS ($(wc -l <"$out/SHA256SUMS") files)"

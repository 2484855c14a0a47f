#!/usr/bin/env bash
# Completes a release in OUT after `make release-manifests` (clusterctl repository + image archive):
#
#   OUT/capkk-manager-VERSION.cdx.json   CycloneDX SBOM of the manager's crate (capkk-controllers: the manager
#                                        binary and every crate it links, with versions, licenses, checksums)
#   OUT/SHA256SUMS                       sha256sum of the repository's files, the image archive and the SBOM,
#                                        paths relative to OUT (`cd OUT && sha256sum -c SHA256SUMS`)
#
# Usage: CARGO_CYCLONEDX=PATH test/release/release.sh OUT VERSION        (make release)
# cargo-cyclonedx writes one SBOM beside every Cargo.toml of the workspace, so it runs on a copy of the
# checkout's files (tracked and untracked, not ignored), never in the checkout itself.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OUT VERSION" >&2; exit 2; }
out=$1 version=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${CARGO_CYCLONEDX:?set CARGO_CYCLONEDX to the cargo-cyclonedx binary (make release installs it)}"
[ -x "$CARGO_CYCLONEDX" ] || { echo "cargo-cyclonedx not found at $CARGO_CYCLONEDX" >&2; exit 1; }
repo=infrastructure-kubekey/$version
image=capkk-manager-$version.oci.tar
sbom=capkk-manager-$version.cdx.json
for f in "$out/$repo/infrastructure-components.yaml" "$out/$repo/metadata.yaml" "$out/$image"; do
  [ -s "$f" ] || { echo "$f is missing: run make release-manifests first" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$work"
# The commit's time instead of now, so the same commit gives the same metadata timestamp.
SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s) \
  "$CARGO_CYCLONEDX" cyclonedx --manifest-path "$work/controllers/Cargo.toml" --format json --spec-version 1.5 -q
cp "$work/controllers/capkk-controllers.cdx.json" "$out/$sbom"

(cd "$out" && sha256sum "$repo"/* "$image" "$sbom" >SHA256SUMS)
echo "SBOM:       $out/$sbom ($(du -k "$out/$sbom" | cut -f1) KiB)"
echo "SHA256SUMS: $out/SHA256SUMS ($(wc -l <"$out/SHA256SUMS") files)"

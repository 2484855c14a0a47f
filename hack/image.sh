#!/usr/bin/env bash
# `make image`: builds the manager image IMAGE from the Dockerfile with podman, without an image registry.
#
#   IMAGE_BUILD=host (default)  the manager is compiled here (cargo profile `image`) into IMAGE_TARGET_DIR, a
#                               directory outside the clone: every checkout on this machine, and CI's fresh
#                               clones, reuse its compiled dependencies, so only a cold machine pays for them.
#                               The Dockerfile's target `prebuilt` copies the binary onto the runtime base.
#   IMAGE_BUILD=container       the Dockerfile's default target: compiled in its build stage on a build base made
#                               from Debian packages plus this machine's Rust toolchain (a cold build compiles
#                               every dependency again: slow on 2 cores, see docs/benchmarks.md), as
#                               `make docker-build` does with public images.
#
# Bases: hack/image-bases.sh, made once per recipe and kept in podman's storage.
# Usage: hack/image.sh IMAGE    (env: PODMAN, CARGO, IMAGE_BUILD, IMAGE_TARGET_DIR)
set -euo pipefail
IMG=${1:?usage: $0 IMAGE}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
read -ra PODMAN_CMD <<<"${PODMAN:-podman}" # may carry options, e.g. "podman --root DIR"
CARGO=${CARGO:-cargo}
MODE=${IMAGE_BUILD:-host}
say() { echo "image: $*" >&2; }
# shellcheck source=../test/lib/heartbeat.sh
source "$ROOT/test/lib/heartbeat.sh"
build_args() { # NAME=VALUE lines of hack/image-bases.sh -> --build-arg NAME=VALUE ...
  local line
  while read -r line; do printf -- '--build-arg\n%s\n' "$line"; done <<<"$1"
}
BUILD=("${PODMAN_CMD[@]}" build --runtime runc --network host --ulimit nproc=4096:4096 --ulimit nofile=4096:4096
  -f "$ROOT/Dockerfile" -t "$IMG")
t0=$SECONDS

case $MODE in
host)
  bases=$(hack/image-bases.sh runtime)
  target=${IMAGE_TARGET_DIR:?IMAGE_TARGET_DIR: the cargo target directory of the image build}
  mkdir -p "$target"
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/capkk-image-context.XXXXXX")
  trap 'rm -rf "$ctx"' EXIT
  # Another checkout may build into the same directory: cargo locks it while compiling, this lock also keeps
  # its binary from replacing ours between the build and the copy.
  exec {lock}>"$target/.capkk-image.lock"
  flock "$lock"
  t1=$SECONDS
  say "cargo build --profile image -p capkk-controllers --bin manager (target dir $target)"
  heartbeat "image: cargo build --profile image" \
    env CARGO_TARGET_DIR="$target" "$CARGO" build --profile image --locked -p capkk-controllers --bin manager
  install -m 0755 "$target/image/manager" "$ctx/manager"
  exec {lock}>&-
  say "manager compiled in $((SECONDS - t1))s ($(($(stat -c %s "$ctx/manager") / 1000000)) MB)"
  mapfile -t args < <(build_args "$bases")
  heartbeat "image: podman build" "${BUILD[@]}" --target prebuilt "${args[@]}" "$ctx"
  # The binary comes from this machine, the libraries from the runtime base: a newer glibc here than in the
  # base would only show when the image runs.
  if ! out=$("${PODMAN_CMD[@]}" --runtime runc run --rm --ulimit nproc=4096:4096 --ulimit nofile=4096:4096 \
    "$IMG" --help 2>&1); then
    say "the manager compiled here does not run on the runtime base: $(tail -3 <<<"$out")"
    say "(a newer glibc here than in Debian ${CAPKK_IMAGE_SUITE:-bookworm}? set CAPKK_IMAGE_SUITE to a newer suite, or IMAGE_BUILD=container)"
    exit 1
  fi
  ;;
container)
  bases=$(hack/image-bases.sh all)
  mapfile -t args < <(build_args "$bases")
  heartbeat "image: podman build (the manager compiled in its build stage)" "${BUILD[@]}" "${args[@]}" .
  ;;
*)
  say "IMAGE_BUILD must be host or container, got '$MODE'"
  exit 2
  ;;
esac
say "$IMG: $(($("${PODMAN_CMD[@]}" image inspect --format '{{.Size}}' "$IMG") / 1000000)) MB, made in $((SECONDS - t0))s ($MODE build)"

#!/usr/bin/env bash
# Makes the base images of the Dockerfile locally, from Debian packages (mmdebstrap -> podman import), for
# machines without an image registry. Prints the build arguments that select them:
#
#   BUILD_IMAGE=localhost/capkk-build-base:<tag>      Debian minbase + build-essential + this machine's Rust
#                                                     toolchain (Debian's rustc is too old for edition 2024)
#   RUNTIME_IMAGE=localhost/capkk-runtime-base:<tag>  glibc, libgcc and the CA bundle, extracted only: no
#                                                     shell, no package manager; user nonroot (65532)
#
# Each image is made once per <tag> (a hash of its recipe number, the suite, the mirror and, for the build
# base, the toolchain) and reused.
# Users with Docker and public registries need none of this: the Dockerfile's defaults are public images.
#
# Usage: hack/image-bases.sh [runtime|all]   runtime: only the runtime base (`make image` builds the manager
#                                            on the host); all (default): the build base too (IMAGE_BUILD=container)
set -euo pipefail
which=${1:-all}
case $which in runtime | all) ;; *) echo "usage: $0 [runtime|all]" >&2; exit 2 ;; esac
SUITE=${CAPKK_IMAGE_SUITE:-bookworm}
MIRROR=${CAPKK_IMAGE_MIRROR:-http://deb.debian.org/debian}
read -ra PODMAN_CMD <<<"${PODMAN:-podman}" # may carry options, e.g. "podman --root DIR"
say() { echo "image-bases: $*" >&2; }
for tool in mmdebstrap "${PODMAN_CMD[0]}" rustc; do
  command -v "$tool" >/dev/null || { say "$tool is required (make deps installs the Debian packages)"; exit 1; }
done

sysroot=$(rustc --print sysroot)
rust_version=$(rustc --version)
# Bump when what goes into a base changes (packages, files, settings): the tag is a hash of the recipe
# number and the inputs, so an unchanged recipe reuses the images and a changed one makes new ones.
BUILD_RECIPE=1
RUNTIME_RECIPE=3
tag() { echo "recipe=$1 $SUITE $MIRROR $2" | sha256sum | cut -c1-12; }
build_image=localhost/capkk-build-base:$(tag "$BUILD_RECIPE" "$rust_version")
runtime_image=localhost/capkk-runtime-base:$(tag "$RUNTIME_RECIPE" "")

work=$(mktemp -d "${TMPDIR:-/tmp}/capkk-image-bases.XXXXXX")
trap 'rm -rf "$work"' EXIT

# mmdebstrap writes a directory; the finishing steps run here (mmdebstrap's own hooks do not run for the
# extract variant), then `podman import` turns the tree into a one-layer image.
debootstrap_dir() { # <dir> <mmdebstrap args...>
  local dir=$1
  shift
  mmdebstrap --quiet "$@" --format=directory "$SUITE" "$dir" "$MIRROR"
}
import_dir() { # <dir> <image> <podman import --change args...>
  local dir=$1 image=$2
  shift 2
  tar -C "$dir" --numeric-owner -cf - . | "${PODMAN_CMD[@]}" import "$@" - "$image" >/dev/null
}

# Trust: the build stage fetches crates over HTTPS, so it trusts what this machine trusts beyond Debian's
# bundle (/usr/local/share/ca-certificates, e.g. a TLS-intercepting proxy's CA). The runtime image does not.
make_build_base() {
  local t0=$SECONDS root=$work/build d
  say "making $build_image (Debian $SUITE minbase + build-essential + $rust_version) ..."
  debootstrap_dir "$root" --variant=minbase --include=build-essential,ca-certificates,pkg-config \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*'
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
  fi
  for d in bin lib libexec; do
    [ ! -d "$sysroot/$d" ] || cp -a "$sysroot/$d/." "$root/usr/local/$d/"
  done
  rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*
  chroot "$root" cargo --version >/dev/null
  import_dir "$root" "$build_image" \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' --change 'WORKDIR /src'
  say "$build_image made in $((SECONDS - t0))s"
}

make_runtime_base() {
  local t0=$SECONDS root=$work/runtime
  say "making $runtime_image (Debian $SUITE libc6, libgcc-s1, CA bundle; extracted, no shell) ..."
  # Extract only (no maintainer scripts, no dpkg database): what a distroless "cc" image holds.
  debootstrap_dir "$root" --variant=extract --include=libc6,libgcc-s1,ca-certificates
  # The bundle update-ca-certificates would write, from the package's certificates.
  mkdir -p "$root/etc/ssl/certs"
  cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
  mkdir -p "$root/tmp" "$root/home/nonroot" "$root/dev" "$root/proc" "$root/sys"
  chmod 1777 "$root/tmp"
  chown 65532:65532 "$root/home/nonroot"
  # Keep glibc, libgcc and the CA bundle; drop programs (no shell, no openssl CLI), OpenSSL's libraries (the
  # manager uses rustls with aws-lc, linked in), docs, locales, iconv modules and package metadata.
  (cd "$root" && rm -rf bin sbin usr/bin usr/sbin usr/libexec usr/share etc/ssl/openssl.cnf usr/lib/ssl \
    usr/lib/x86_64-linux-gnu/gconv usr/lib/x86_64-linux-gnu/engines-3 usr/lib/x86_64-linux-gnu/ossl-modules \
    usr/lib/x86_64-linux-gnu/libssl.so.3 usr/lib/x86_64-linux-gnu/libcrypto.so.3 \
    var/cache var/lib/apt var/lib/dpkg var/log etc/apt etc/dpkg etc/debconf.conf etc/hostname etc/resolv.conf)
  # Device nodes and mount points are the runtime's business.
  find "$root/dev" -mindepth 1 -delete
  if find "$root" \( -name sh -o -name bash -o -name dash \) | grep -q .; then
    say "the runtime base must not contain a shell"; exit 1
  fi
  import_dir "$root" "$runtime_image" --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV HOME=/home/nonroot' --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt'
  say "$runtime_image made in $((SECONDS - t0))s"
}

"${PODMAN_CMD[@]}" image exists "$runtime_image" || make_runtime_base
echo "RUNTIME_IMAGE=$runtime_image"
[ "$which" = all ] || exit 0
"${PODMAN_CMD[@]}" image exists "$build_image" || make_build_base
echo "BUILD_IMAGE=$build_image"

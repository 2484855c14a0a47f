#!/usr/bin/env bash
# The node artifacts' flat Debian repository (README.md): the packages our host services install with apt,
# read from the Rust constants of pkg/service/src/repository.rs (DEFAULT_APT_PACKAGES: every node;
# LOADBALANCER_APT_PACKAGES: the control planes of a cluster whose endpoint the provider serves, keepalived and
# haproxy), with their dependency closure minus what a minimal bookworm already has, downloaded from the machine's
# apt sources and indexed with dpkg-scanpackages.
#
# A piece of its own, cached apart from the Go-built set (build.sh): its hash covers only this script, the
# package lists and the architecture, so a package added to a list rebuilds this repository (seconds) and not the
# Kubernetes binaries and images (minutes cold). build.sh runs it and records the result in current.env
# (NODE_DEBIAN_DIR); serve.sh serves it as the mirror's /debian.
#
# CAPKK_HOST_OS=debian13 (make's HOST_OS=debian13): the packages of Debian 13 (trixie) for node containers built
# from trixie, read through an apt configuration of its own (deb.debian.org or CAPKK_VM_DEBIAN_MIRROR, the
# machine's Debian archive keyring), not the machine's sources; a cache entry of its own (the suite is in the hash).
#
# Output: $CAPKK_CACHE/node-artifacts/debian-<hash>/ (*.deb, Packages, Packages.gz, Release, packages.list: the
# requested packages, one line). Prints that directory on stdout. Idempotent: a finished repository (.complete)
# is reused as is.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
log() { echo "node-artifacts: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
ARCH=amd64

# rust_list NAME: the words of `pub const NAME: &[&str] = &[...];` (one line) in repository.rs.
rust_list() {
  sed -n "s/^pub const $1: &\[&str\] = &\[\(.*\)\];/\1/p" "$REPO/pkg/service/src/repository.rs" | tr -d '",'
}
APT_PACKAGES=
for list in DEFAULT_APT_PACKAGES LOADBALANCER_APT_PACKAGES; do
  read -ra words <<<"$(rust_list "$list")"
  [ ${#words[@]} -gt 0 ] ||
    die "cannot read $list from pkg/service/src/repository.rs (one line: pub const $list: &[&str] = &[...];)"
  APT_PACKAGES+="${APT_PACKAGES:+ }${words[*]}"
done
# The suite: the machine's own sources (Debian 12 here) unless CAPKK_HOST_OS names another.
APT=(apt-get) APT_CACHE=(apt-cache) SUITE=''
case ${CAPKK_HOST_OS:-debian12} in
  debian12) ;;
  debian13) SUITE=trixie ;;
  *) die "CAPKK_HOST_OS=$CAPKK_HOST_OS: debian12 or debian13" ;;
esac
command -v apt-get >/dev/null || die "apt-get is required (the Debian package mirror is made with apt-get download)"
command -v dpkg-scanpackages >/dev/null || die "dpkg-scanpackages is required (Debian package dpkg-dev)"

HASH=$({ sha256sum "$HERE/debian-repo.sh" | cut -c1-64; echo "apt=$APT_PACKAGES arch=$ARCH${SUITE:+ suite=$SUITE}"; } | sha256sum | cut -c1-16)
OUT=$CAPKK_CACHE/node-artifacts/debian-$HASH
mkdir -p "$(dirname "$OUT")"
exec 8>"$OUT.lock"
flock 8
if [ -e "$OUT/.complete" ]; then
  log "debian-repo: cached ($OUT)"
  echo "$OUT"
  exit 0
fi

if [ -n "$SUITE" ]; then
  # apt's lists and caches for SUITE, beside the repository's cache entries; nothing of the machine's apt state.
  aptdir=$CAPKK_CACHE/node-artifacts/apt-$SUITE
  mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial" "$aptdir/prefs.d" "$aptdir/sources.d"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${CAPKK_VM_DEBIAN_MIRROR:-http://deb.debian.org/debian} $SUITE main" \
    >"$aptdir/sources.list"
  opts=(-o "Dir::Etc::SourceList=$aptdir/sources.list" -o "Dir::Etc::SourceParts=$aptdir/sources.d"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$aptdir/prefs.d"
    -o "Dir::State::Lists=$aptdir/lists" -o "Dir::Cache=$aptdir/cache" -o "APT::Architecture=$ARCH")
  APT=(apt-get "${opts[@]}") APT_CACHE=(apt-cache "${opts[@]}")
fi
apt_ready() {
  # SUITE's own lists (`apt-cache show` would also find the machine's installed libc6 in dpkg's status).
  if [ -n "$SUITE" ]; then
    compgen -G "$aptdir/lists/*_Packages*" >/dev/null || { log "apt-get update ($SUITE)"; "${APT[@]}" update -qq; }
    return
  fi
  apt-cache show libc6 >/dev/null 2>&1 || { log "apt lists empty: apt-get update"; apt-get update -qq; }
}
deps_of() { # real packages in the dependency closure of the arguments (alternatives included)
  "${APT_CACHE[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" 2>/dev/null | grep -v '^ ' | grep -v '^<' | LC_ALL=C sort -u
}
# Dependency closure of the given packages minus what a minimal bookworm (`mmdebstrap --variant=minbase`:
# Essential and Priority: required packages, plus apt) already has.
deb_closure() {
  local base
  base=$("${APT_CACHE[@]}" dumpavail | awk 'BEGIN { RS = "" } /\nPriority: required/ || /\nEssential: yes/ {
    for (i = 1; i <= NF; i++) if ($i == "Package:") { print $(i + 1); break } }' | LC_ALL=C sort -u)
  # shellcheck disable=SC2086
  LC_ALL=C comm -23 <(deps_of "$@") <(deps_of $base apt)
}

T0=$(date +%s)
apt_ready
tmp=$OUT.tmp
rm -rf "$tmp"
mkdir -p "$tmp"
# shellcheck disable=SC2086 # one word per package
pkgs=$(deb_closure $APT_PACKAGES)
# apt-get download fetches the candidate version into the current directory.
# shellcheck disable=SC2086
(cd "$tmp" && "${APT[@]}" download -q $pkgs >/dev/null 2>"$OUT.apt.log") || { cat "$OUT.apt.log" >&2; die "apt-get download failed"; }
(
  cd "$tmp"
  dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages
  gzip -9nc Packages >Packages.gz
  {
    echo "Origin: capkk-rs"
    echo "Label: capkk-rs node packages"
    echo "Architectures: $ARCH"
    echo "Description: Debian packages for the repository service, downloaded from the machine's sources"
    echo "SHA256:"
    for f in Packages Packages.gz; do
      printf ' %s %s %s\n' "$(sha256sum "$f" | cut -c1-64)" "$(stat -c %s "$f")" "$f"
    done
  } >Release
  echo "$APT_PACKAGES" >packages.list
)
for p in $APT_PACKAGES; do
  grep -q "^Package: $p\$" "$tmp/Packages" || die "the repository lacks $p (apt-get download: $OUT.apt.log)"
done
rm -rf "$OUT"
mv "$tmp" "$OUT"
touch "$OUT/.complete"
debs=("$OUT"/*.deb)
log "debian-repo${SUITE:+ ($SUITE)}: ${#debs[@]} packages ($(du -sm "$OUT" | cut -f1) MB) for: $APT_PACKAGES, in $(($(date +%s) - T0))s"
echo "$OUT"

#!/usr/bin/env bash
# `make deps`: checks every machine prerequisite listed in hack/deps.list plus the Rust and Go toolchains.
# As root on an apt-based machine it installs the missing packages; otherwise it stops and names them.
#
#   hack/deps.sh            check, install what is missing (root + apt), fail naming what is still missing
#   hack/deps.sh --check    check only; exit 1 naming the missing packages
#
# CAPKK_DEPS_PATH overrides where commands are looked up (default: $PATH plus /usr/sbin and /sbin, since
# non-root shells on Debian often lack the sbin directories); the sandbox tests use it to hide a command.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
list=${CAPKK_DEPS_LIST:-$here/deps.list}
mode=${1:-install}
lookup_path=${CAPKK_DEPS_PATH:-$PATH:/usr/sbin:/sbin}
say() { echo "deps: $*" >&2; }

has() { # <check>: a command on the lookup path, an absolute path, or py:MODULE
  case $1 in
    /*) [ -x "$1" ] ;;
    py:*) PATH=$lookup_path python3 -c "import ${1#py:}" >/dev/null 2>&1 ;;
    *) PATH=$lookup_path command -v "$1" >/dev/null 2>&1 ;;
  esac
}

missing_packages() { # prints "package<TAB>what is missing" for every package with a failed check
  local pkg provides why c miss
  while read -r pkg provides why; do
    case $pkg in ''|'#'*) continue ;; esac
    miss=()
    IFS=, read -ra checks <<<"$provides"
    for c in "${checks[@]}"; do has "$c" || miss+=("$c"); done
    [ ${#miss[@]} -eq 0 ] || printf '%s\t%s\t%s\n' "$pkg" "${miss[*]}" "$why"
  done <"$list"
}

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]; }

toolchains() { # Rust and Go are not taken from Debian (too old there): check them, name what is needed
  local bad=0 want have
  want=$(sed -nE 's/^rust-version *= *"([^"]+)".*/\1/p' "$root/Cargo.toml" | head -1)
  if ! PATH=$lookup_path command -v cargo >/dev/null; then
    say "missing: Rust >= $want (cargo, rustc; https://rustup.rs). Debian's rustc is too old for edition 2024."
    bad=1
  else
    have=$(PATH=$lookup_path rustc --version | awk '{print $2}')
    version_ge "$have" "$want" || { say "Rust $have is older than the workspace's rust-version $want"; bad=1; }
    for comp in rustfmt clippy; do
      if ! PATH=$lookup_path cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
        if [ "$mode" != --check ] && command -v rustup >/dev/null; then
          say "rustup component add $comp"
          rustup component add "$comp" >/dev/null 2>&1 || true
        fi
        PATH=$lookup_path cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1 ||
          { say "missing: the Rust component $comp (rustup component add $comp) for make verify"; bad=1; }
      fi
    done
  fi
  want=$(awk '$1 == "go" { print $2; exit }' "$root/test/mgmt/tools/kube/go.mod")
  if ! PATH=$lookup_path command -v go >/dev/null; then
    say "missing: Go >= $want (https://go.dev/dl): the management plane is built from Go modules"
    bad=1
  else
    have=$(PATH=$lookup_path go env GOVERSION); have=${have#go}
    version_ge "$have" "$want" || { say "Go $have is older than $want (test/mgmt/tools/*/go.mod)"; bad=1; }
  fi
  return $bad
}

missing=$(missing_packages)
if [ -n "$missing" ] && [ "$mode" != --check ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  pkgs=$(cut -f1 <<<"$missing" | tr '\n' ' ')
  say "installing: $pkgs"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  # Installing openssh-server starts the machine's own sshd: stop it (sandbox hosts run their own, and a
  # test machine should not grow an open root login by a side effect). An sshd that was there before stays.
  if grep -q '^openssh-server' <<<"$missing" && command -v systemctl >/dev/null; then
    systemctl disable --now ssh >/dev/null 2>&1 || true
  fi
  missing=$(missing_packages)
fi

rc=0
if [ -n "$missing" ]; then
  while IFS=$'\t' read -r pkg what why; do
    say "missing: $pkg (no $what) — $why"
  done <<<"$missing"
  pkgs=$(cut -f1 <<<"$missing" | tr '\n' ' ')
  if [ "$(id -u)" != 0 ]; then
    say "run 'make deps' as root to install them, or: sudo apt-get install -y --no-install-recommends ${pkgs% }"
  else
    say "install them with: apt-get install -y --no-install-recommends ${pkgs% }"
  fi
  rc=1
fi
toolchains || rc=1
[ $rc = 0 ] && say "all prerequisites present"
exit $rc

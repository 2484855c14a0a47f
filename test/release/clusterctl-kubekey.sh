#!/usr/bin/env bash
# Registers this release of capkk-rs as clusterctl's infrastructure provider "kubekey", on the machine it runs on.
#
# clusterctl has a built-in provider of the same name: KubeSphere's CAPKK (github.com/kubesphere/kubekey), with the
# same CRD group and kinds. Until this script has run, `clusterctl init --infrastructure kubekey` installs THAT one.
# The script writes our entry into the clusterctl configuration (an entry there overrides the built-in one):
#
#   providers:
#     - name: kubekey
#       type: InfrastructureProvider
#       url: file://<repository>/infrastructure-kubekey/latest/infrastructure-components.yaml
#
# clusterctl (v1.14) reads a provider repository from a local directory, a GitHub release or a GitLab package
# registry, never from a plain HTTP server; so a release served over HTTP is first copied into a local directory.
#
#   clusterctl-kubekey.sh [OPTIONS]              the repository beside this script (a release directory, e.g. _out/)
#   clusterctl-kubekey.sh --from URL [OPTIONS]   download this release's repository files from URL (where the
#                                                release directory is served), check them against the checksums
#                                                below, into --dest
# Options:
#   --config FILE              the clusterctl configuration to write (default: the one clusterctl reads,
#                              $XDG_CONFIG_HOME/cluster-api/clusterctl.yaml (~/.config, on macOS ~/Library/Application
#                              Support), else ~/.cluster-api/clusterctl.yaml;
#                              created when there is none). An existing file is kept: our entries are inserted
#                              between marker comments (replaced on a rerun), the rest is left as it was, the
#                              previous version is saved as FILE.capkk-rs.bak
#   --dest DIR                 where --from puts the repository (default ${XDG_DATA_HOME:-~/.local/share}/capkk-rs/clusterctl)
#   --image-repository REPO    also write clusterctl's image override: the manager image becomes
#                              REPO/capkk-manager:<tag> (push the release's image archive there)
#   --check                    write nothing: exit 0 only if clusterctl resolves "kubekey" to a local repository
#                              holding this release's files (wherever it was put); otherwise say what "kubekey"
#                              is (run before `clusterctl init`: `clusterctl-kubekey.sh --check && clusterctl init ...`)
#
# After writing, the script asks clusterctl (when it is on PATH) which URL "kubekey" resolves to, and fails,
# restoring the previous file, unless it is ours. Needs: bash, coreutils (or macOS's shasum), awk; curl for --from.
set -euo pipefail

# Filled in by test/release/release-manifests.sh when it copies this script into a release.
VERSION='@VERSION@'
FILES='@FILES@'

die() { echo "clusterctl-kubekey: $*" >&2; exit 1; }
say() { echo "clusterctl-kubekey: $*" >&2; }
case $VERSION in @*) die "this is the template in the source tree: run the copy a release holds (make release-manifests: \$OUT/clusterctl-kubekey.sh)" ;; esac
LABEL=infrastructure-kubekey
export CLUSTERCTL_DISABLE_VERSIONCHECK=true

from='' dest='' config='' image_repo='' check_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --from) from=${2:?--from needs a URL}; shift 2 ;;
    --dest) dest=${2:?--dest needs a directory}; shift 2 ;;
    --config) config=${2:?--config needs a file}; shift 2 ;;
    --image-repository) image_repo=${2:?--image-repository needs a repository}; shift 2 ;;
    --check) check_only=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
case $image_repo in
  *[[:space:]@]*|*/) die "--image-repository is a registry and path without tag or digest, e.g. registry.example.com/capkk (got '$image_repo')" ;;
esac

sha256() { # FILE: its SHA-256 (coreutils, or macOS's shasum)
  if command -v sha256sum >/dev/null; then sha256sum <"$1"; else shasum -a 256 <"$1"; fi | cut -d' ' -f1
}
verify() { # DIR: every file of this release is in DIR with its checksum
  local sum name
  while read -r sum name; do
    [ -n "$name" ] || continue
    [ -f "$1/$name" ] || die "$1/$name is missing"
    [ "$(sha256 "$1/$name")" = "$sum" ] || die "$1/$name does not match this release's checksum"
  done <<<"$FILES"
}

# The repository: beside this script, or downloaded.
if [ -n "$from" ]; then
  base=${dest:-${XDG_DATA_HOME:-$HOME/.local/share}/capkk-rs/clusterctl}
else
  [ -z "$dest" ] || die "--dest goes with --from"
  base=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fi
case $base in /*) ;; *) base=$PWD/$base ;; esac
case $base in *[[:space:]]*) die "the repository path '$base' has white space, which clusterctl's file:// URL cannot hold" ;; esac
url=file://$base/$LABEL/latest/infrastructure-components.yaml
shown=file://$base/$LABEL/latest/

# The configuration clusterctl reads when given no --config (its own search order: the XDG configuration
# directory, which on macOS defaults to ~/Library/Application Support, then ~/.cluster-api), or the one given.
xdg_config=${XDG_CONFIG_HOME:-$HOME/.config}
[ -n "${XDG_CONFIG_HOME:-}" ] || [ "$(uname -s)" != Darwin ] || xdg_config="$HOME/Library/Application Support"
default_config() {
  local d f found=''
  for d in "$xdg_config/cluster-api" "$HOME/.cluster-api"; do
    for f in "$d"/clusterctl.*; do
      [ -e "$f" ] || continue
      case $f in
        *.yaml|*.yml) found=$f; break 2 ;;
        *) die "clusterctl reads $f, which this script cannot edit (YAML only): add the entry above by hand" ;;
      esac
    done
  done
  echo "${found:-$xdg_config/cluster-api/clusterctl.yaml}"
}
explicit_config=$config
[ -n "$config" ] || config=$(default_config)

resolved() { # the URL clusterctl resolves "kubekey" (infrastructure) to, read from `clusterctl config repositories`
  local args=(config repositories)
  [ -z "$explicit_config" ] || args+=(--config "$config")
  clusterctl "${args[@]}" | awk '$1 == "kubekey" && $2 == "InfrastructureProvider" { print $3 }'
}

if [ "$check_only" = 1 ]; then
  # Ours wherever it was put: a local repository whose files are this release's.
  command -v clusterctl >/dev/null || die "clusterctl is not on PATH"
  got=$(resolved)
  case $got in
    file://*/$LABEL/latest/|file://*/$LABEL/"$VERSION"/)
      dir=${got#file://}
      dir=${dir%/}
      if ! (verify "${dir%/*}/$VERSION") 2>/dev/null; then
        die "clusterctl resolves \"kubekey\" to $got, which does not hold this release ($VERSION)"
      fi ;;
    *) die "clusterctl resolves \"kubekey\" to '${got:-nothing}', not to capkk-rs: run $0 without --check first${explicit_config:+ (with --config $config)}" ;;
  esac
  say "kubekey -> $got (capkk-rs $VERSION)"
  exit 0
fi

repo=$base/$LABEL/$VERSION
if [ -n "$from" ]; then
  command -v curl >/dev/null || die "--from needs curl"
  mkdir -p "$base/$LABEL"
  tmp=$(mktemp -d "$base/$LABEL/.download.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  while read -r _ name; do
    [ -n "$name" ] || continue
    curl -fsSL --retry 2 -o "$tmp/$name" "${from%/}/$LABEL/$VERSION/$name" ||
      die "could not download ${from%/}/$LABEL/$VERSION/$name"
  done <<<"$FILES"
  verify "$tmp"
  rm -rf "$repo" && mv "$tmp" "$repo"
  trap - EXIT
  say "repository: $repo (from $from, checksums verified)"
else
  verify "$repo"
fi

# merge FILE KEY MARK BLOCK CONFLICT: BLOCK (lines without indentation) goes under the top-level KEY of FILE,
# between "# >>> MARK" and "# <<< MARK"; a block of an earlier run is replaced. A line matching the awk regex
# CONFLICT outside our markers (the same entry written by hand) stops it: that entry is the user's to remove.
merge() {
  awk -v key="$2" -v mark="$3" -v block="$4" -v conflict="$5" '
    function emit(ind,   n, i, lines) {
      n = split(block, lines, "\n")
      print ind "# >>> " mark " >>>"
      for (i = 1; i <= n; i++) print ind lines[i]
      print ind "# <<< " mark " <<<"
    }
    { line[NR] = $0 }
    END {
      skip = 0; m = 0
      for (i = 1; i <= NR; i++) {
        l = line[i]
        if (index(l, "# >>> " mark " >>>")) { skip = 1; continue }
        if (skip) { if (index(l, "# <<< " mark " <<<")) skip = 0; continue }
        if (l ~ conflict) { printf "line %d: %s\n", i, l > "/dev/stderr"; bad = 1 }
        out[++m] = l
      }
      if (bad) exit 3
      keyat = 0
      for (i = 1; i <= m; i++) if (out[i] ~ ("^" key ":")) { keyat = i; break }
      if (!keyat) {
        for (i = 1; i <= m; i++) print out[i]
        print key ":"; emit("  "); exit 0
      }
      rest = substr(out[keyat], length(key) + 2)
      sub(/^[ \t]+/, "", rest); sub(/[ \t]*#.*$/, "", rest)
      if (rest != "" && rest != "[]" && rest != "{}") exit 4
      ind = "  "
      for (i = keyat + 1; i <= m; i++) {
        if (out[i] ~ /^[ \t]*(#.*)?$/) continue
        if (match(out[i], /^ +/)) ind = substr(out[i], 1, RLENGTH)
        else if (out[i] ~ /^- /) ind = ""
        break
      }
      for (i = 1; i <= m; i++) {
        if (i == keyat) { print key ":"; emit(ind); continue }
        print out[i]
      }
    }' "$1"
}

mkdir -p "$(dirname "$config")"
existed=0
if [ -e "$config" ]; then existed=1; else : >"$config"; fi
new=$(mktemp "$config.XXXXXX")
trap 'rm -f "$new"' EXIT
cp "$config" "$new"
provider="- name: kubekey
  type: InfrastructureProvider
  url: $url"
rc=0
merge "$config" providers "capkk-rs: kubekey provider (clusterctl-kubekey.sh)" "$provider" \
  '^[ \t]*(- )?[ \t]*name:[ \t]*["'"'"']?kubekey["'"'"']?[ \t]*(#.*)?$' >"$new" || rc=$?
case $rc in
  0) ;;
  3) die "$config already names a provider \"kubekey\" (lines above): remove that entry, then run this again" ;;
  4) die "$config has 'providers:' in flow style ([...]): write it as a block list, then run this again" ;;
  *) die "could not edit $config" ;;
esac
if [ -n "$image_repo" ]; then
  step=$(mktemp "$config.XXXXXX")
  rc=0
  merge "$new" images "capkk-rs: kubekey image (clusterctl-kubekey.sh)" "$LABEL:
  repository: $image_repo" '^[ \t]*["'"'"']?infrastructure-kubekey["'"'"']?[ \t]*:' >"$step" || rc=$?
  mv -f "$step" "$new"
  case $rc in
    0) ;;
    3) die "$config already has an image override for infrastructure-kubekey (lines above): remove it, then run this again" ;;
    4) die "$config has 'images:' in flow style ({...}): write it as a block mapping, then run this again" ;;
    *) die "could not edit $config" ;;
  esac
fi

backup=''
if cmp -s "$config" "$new"; then
  say "$config already registers $url"
else
  if [ "$existed" = 1 ]; then backup=$config.capkk-rs.bak; cp -p "$config" "$backup"; fi
  chmod --reference="$config" "$new" 2>/dev/null || true
  mv -f "$new" "$config"
  say "wrote $config: \"kubekey\" -> $url${image_repo:+, image $image_repo/capkk-manager}"
fi
trap - EXIT

if command -v clusterctl >/dev/null; then
  got=$(resolved) || got=''
  if [ "$got" != "$shown" ]; then
    if [ -n "$backup" ]; then cp -p "$backup" "$config"; elif [ "$existed" = 0 ]; then rm -f "$config"; fi
    die "clusterctl resolves \"kubekey\" to '${got:-nothing}' with $config, not to $shown: the file is as it was"
  fi
  say "clusterctl resolves \"kubekey\" to $got"
else
  say "clusterctl is not on PATH: check with 'clusterctl config repositories' that kubekey is $shown"
fi

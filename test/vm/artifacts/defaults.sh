#!/usr/bin/env bash
# Prints the component defaults (pkg/service/src/components.rs, COMPONENT_DEFAULTS: the one table) of a
# Kubernetes version as sourceable lines: DEFAULT_CONTAINERD DEFAULT_RUNC DEFAULT_CRICTL DEFAULT_PAUSE.
# Exits 1 naming the table when the version's minor has no row. Used by check.sh (the node artifacts serve the
# defaults of their version) and real.sh (the defaults run prints what the hosts should get).
#   test/vm/artifacts/defaults.sh v1.36.3
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TABLE=$HERE/../../../pkg/service/src/components.rs
v=${1:?usage: defaults.sh <kubernetes version>}
v=${v#v}
minor=$(printf '%s' "$v" | cut -d. -f1-2)
# One row per line: ComponentDefaults::new("<minor>", "<containerd>", "<runc>", "<crictl>", "<pause>"),
row=$(sed -n "s/^ *ComponentDefaults::new(\"${minor//./\\.}\", \"\([^\"]*\)\", \"\([^\"]*\)\", \"\([^\"]*\)\", \"\([^\"]*\)\"),\$/\1 \2 \3 \4/p" "$TABLE")
[ -n "$row" ] || { echo "defaults.sh: Kubernetes v$v has no row in $TABLE (COMPONENT_DEFAULTS)" >&2; exit 1; }
read -r containerd runc crictl pause <<< "$row"
printf 'DEFAULT_CONTAINERD=%s\nDEFAULT_RUNC=%s\nDEFAULT_CRICTL=%s\nDEFAULT_PAUSE=%s\n' "$containerd" "$runc" "$crictl" "$pause"

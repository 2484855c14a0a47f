set -- socat conntrack
# Arguments: package names. Prints missing=<pkg> for every package not installed.
for p in "$@"; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "missing=$p"; done; true

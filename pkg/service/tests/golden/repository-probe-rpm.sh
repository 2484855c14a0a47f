set -- socat conntrack
# Arguments: package names. Prints missing=<pkg> for every package not installed.
for p in "$@"; do rpm -q --whatprovides "$p" >/dev/null 2>&1 || echo "missing=$p"; done; true

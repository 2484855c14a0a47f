# Variables: RESTART_MARKER, RESTART (1 when binaries changed). Preceded by the put_file calls of the
# configuration. Steps run in separate subshells: a pending restart is handed over (and survives a failed
# start) as a marker file.
if [ "$CHANGED" = 1 ] || [ "$RESTART" = 1 ]; then mkdir -p /var/lib/capkk; touch "$RESTART_MARKER"; fi

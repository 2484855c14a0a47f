# Variables: F (the sysctl file). Preceded by its put_file.
if [ "$CHANGED" = 1 ]; then sysctl -e -p "$F"; fi

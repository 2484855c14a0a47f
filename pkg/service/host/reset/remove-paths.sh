# Arguments: the owned paths (bootstrap::OWNED_PATHS), removed whole when present.
for p in "$@"; do
  if [ -e "$p" ] || [ -L "$p" ]; then rm -rf -- "$p"; echo "removed $p"; CHANGED=1; fi
done
if [ "$CHANGED" = 1 ] && command -v systemctl >/dev/null 2>&1; then systemctl daemon-reload; fi

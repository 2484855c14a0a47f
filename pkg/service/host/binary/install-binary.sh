# Variables: F (staged file), DEST (install path), MODE (octal).
mkdir -p "$(dirname "$DEST")"
install -m "$MODE" "$F" "$DEST"
rm -f "$F"
echo "installed $DEST"
CHANGED=1

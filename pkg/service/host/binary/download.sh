# Variables: STAGING (staging directory). Arguments: triples LABEL URL DEST, downloaded by the host.
fetch() {
  if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 --connect-timeout 30 -o "$2" "$1";
  elif command -v wget >/dev/null 2>&1; then wget -q -T 60 -O "$2" "$1";
  else echo 'the host has neither curl nor wget (needed for downloadOn: host)' >&2; return 127; fi
}
mkdir -p "$STAGING"
while [ $# -ge 3 ]; do
  echo "downloading $1"
  # A download that fails (the mirror unreachable, a full disk: curl's exit 23) may work later: its partial
  # file removed, retried with backoff. A host without a downloader (127) stays terminal.
  fetch "$2" "$3" || {
    rc=$?
    rm -f "$3"
    [ "$rc" != 127 ] || exit 127
    retry_later "downloading $1 failed (exit $rc): retried later"
  }
  CHANGED=1
  shift 3
done

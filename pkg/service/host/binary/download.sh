# Variables: STAGING (staging directory). Arguments: triples LABEL URL DEST, downloaded by the host.
fetch() {
  if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 --connect-timeout 30 -o "$2" "$1";
  elif command -v wget >/dev/null 2>&1; then wget -q -T 60 -O "$2" "$1";
  else echo 'the host has neither curl nor wget (needed for downloadOn: host)' >&2; return 127; fi
}
mkdir -p "$STAGING"
while [ $# -ge 3 ]; do
  echo "downloading $1"
  fetch "$2" "$3"
  CHANGED=1
  shift 3
done

# users item. Variables: NAME, UGROUPS (comma-separated, may be empty), HASHED, PLAIN, LOCK, SUDO, KEYS (1/0),
# SUDO_FILE. Arguments: the useradd arguments. data_hashed / data_plain print "name:password" lines for
# chpasswd, data_sudo the sudoers rules, data_keys the authorized keys.
if [ -n "$UGROUPS" ]; then
  _ifs=$IFS; IFS=,; set -f
  for g in $UGROUPS; do getent group "$g" >/dev/null || groupadd -- "$g"; done
  IFS=$_ifs; set +f
fi
if id -u -- "$NAME" >/dev/null 2>&1; then
  echo 'user exists: not re-created'
  if [ -n "$UGROUPS" ]; then usermod -a -G "$UGROUPS" -- "$NAME"; fi
else
  useradd "$@"
fi
if [ "$HASHED" = 1 ]; then data_hashed | chpasswd -e; fi
if [ "$PLAIN" = 1 ]; then data_plain | chpasswd; fi
if [ "$LOCK" = 1 ]; then usermod --lock -- "$NAME"; fi
if [ "$SUDO" = 1 ]; then
  umask 077
  st=$(mktemp /etc/sudoers.d/.capkk.XXXXXX)
  trap 'rm -f "$st"' EXIT
  data_sudo > "$st"
  chmod 0440 "$st"
  if command -v visudo >/dev/null 2>&1; then visudo -cf "$st"; fi
  mv -f -- "$st" "$SUDO_FILE"
fi
if [ "$KEYS" = 1 ]; then
  h=$(getent passwd "$NAME" | cut -d: -f6)
  [ -n "$h" ]
  g=$(id -gn -- "$NAME")
  mkdir -p -- "$h/.ssh"
  chmod 700 "$h/.ssh"
  chown -- "$NAME:$g" "$h/.ssh"
  ak="$h/.ssh/authorized_keys"
  touch "$ak"
  data_keys | while IFS= read -r k; do [ -z "$k" ] || grep -qxF -- "$k" "$ak" || printf '%s\n' "$k" >> "$ak"; done
  chmod 600 "$ak"
  chown -- "$NAME:$g" "$ak"
fi

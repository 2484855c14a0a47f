# Variables: H (host name, validated RFC 1123).
if [ "$(cat /etc/hostname 2>/dev/null)" != "$H" ]; then printf '%s\n' "$H" > /etc/hostname; CHANGED=1; fi
if [ "$(hostname)" != "$H" ]; then
  if command -v hostnamectl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then hostnamectl set-hostname "$H"; else hostname "$H"; fi
  CHANGED=1
fi

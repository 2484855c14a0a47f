# Arguments: the directories to create (mode 0755).
for d in "$@"; do
  # shellcheck disable=SC2174 # parents get 0755 from umask 022
  if [ ! -d "$d" ]; then mkdir -p -m 0755 "$d"; CHANGED=1; fi
done

RETRY_LATER_EXIT=99
# Prelude of every batched service script (facts::script::Script). Steps are framed by step-open.sh and
# step-close.sh; markers follow the one protocol of crate::host::MARK ("@@capkk <verb> <args>").
umask 022
export LC_ALL=C
# put_file PATH MODE SHA256 BASE64: write PATH only when its content or mode differs (atomic rename). The
# temp file is created by mktemp (mode 0600, unpredictable name) and gets MODE only when complete, so a file
# holding credentials is never readable by others, not even for a moment.
put_file() {
  if [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ] && [ "$(stat -c %a "$1")" = "$2" ]; then return 0; fi
  mkdir -p "$(dirname "$1")"
  _pt=$(mktemp "$(dirname "$1")/.capkk-put.XXXXXX")
  printf '%s' "$4" | base64 -d > "$_pt"
  chmod "$2" "$_pt"
  mv -f "$_pt" "$1"
  echo "wrote $1"
  CHANGED=1
}
# retry_later MESSAGE: fail the step as one that may work later without a spec change (a download cut short,
# a full disk): its exit code RETRY_LATER_EXIT (prepended by Script::render) makes it Error::RetryLater,
# retried with backoff, where any other failure is terminal.
retry_later() {
  echo "$1" >&2
  exit "$RETRY_LATER_EXIT"
}
# mismatch ARTIFACT EXPECTED ACTUAL: report a checksum mismatch and fail the step.
mismatch() {
  echo "@@capkk mismatch $2 $3 $1"
  return 65
}
now_ns() { date +%s%N 2>/dev/null; }
# end_step NAME RC: the end marker with the step's wall time and the host's clock at its end (ms since the
# epoch; 0 when date cannot tell nanoseconds).
end_step() {
  _t1=$(now_ns)
  case "$_t0$_t1" in *[!0-9]*|'') _ms=0 _at=0 ;; *) _ms=$(( (_t1 - _t0) / 1000000 )) _at=$(( _t1 / 1000000 )) ;; esac
  printf '\n@@capkk end %s %s %s %s\n' "$1" "$2" "$_ms" "$_at"
}
STEP=containerd-config
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
put_file /etc/containerd/config.toml 644 a3f6939fd31c4b525e70585f3e05ae76d42c6007a38473cff880e28b4a891019 IyBNYW5hZ2VkIGJ5IGNhcGtrLgp2ZXJzaW9uID0gMgpyb290ID0gIi92YXIvbGliL2NvbnRhaW5lcmQiCnN0YXRlID0gIi9ydW4vY29udGFpbmVyZCIKCltncnBjXQogIGFkZHJlc3MgPSAiL3J1bi9jb250YWluZXJkL2NvbnRhaW5lcmQuc29jayIKCltwbHVnaW5zLiJpby5jb250YWluZXJkLmdycGMudjEuY3JpIl0KICBzYW5kYm94X2ltYWdlID0gInJlZ2lzdHJ5Lms4cy5pby9wYXVzZTozLjEwLjIiCiAgW3BsdWdpbnMuImlvLmNvbnRhaW5lcmQuZ3JwYy52MS5jcmkiLmNvbnRhaW5lcmRdCiAgICBkZWZhdWx0X3J1bnRpbWVfbmFtZSA9ICJydW5jIgogICAgW3BsdWdpbnMuImlvLmNvbnRhaW5lcmQuZ3JwYy52MS5jcmkiLmNvbnRhaW5lcmQucnVudGltZXMucnVuY10KICAgICAgcnVudGltZV90eXBlID0gImlvLmNvbnRhaW5lcmQucnVuYy52MiIKICAgICAgW3BsdWdpbnMuImlvLmNvbnRhaW5lcmQuZ3JwYy52MS5jcmkiLmNvbnRhaW5lcmQucnVudGltZXMucnVuYy5vcHRpb25zXQogICAgICAgIFN5c3RlbWRDZ3JvdXAgPSB0cnVlCiAgW3BsdWdpbnMuImlvLmNvbnRhaW5lcmQuZ3JwYy52MS5jcmkiLmNuaV0KICAgIGJpbl9kaXIgPSAiL29wdC9jbmkvYmluIgogICAgY29uZl9kaXIgPSAiL2V0Yy9jbmkvbmV0LmQiCiAgW3BsdWdpbnMuImlvLmNvbnRhaW5lcmQuZ3JwYy52MS5jcmkiLnJlZ2lzdHJ5XQogICAgY29uZmlnX3BhdGggPSAiL2V0Yy9jb250YWluZXJkL2NlcnRzLmQiCg==
put_file /etc/containerd/certs.d/docker.io/hosts.toml 644 d15818e2acdd551a00b06e0d89120e87ba3749d4bc674a9b2e81b3273b0768d5 c2VydmVyID0gImh0dHBzOi8vcmVnaXN0cnktMS5kb2NrZXIuaW8iCgpbaG9zdC4iaHR0cHM6Ly9taXJyb3IuZXhhbXBsZSJdCiAgY2FwYWJpbGl0aWVzID0gWyJwdWxsIiwgInJlc29sdmUiXQo=
put_file /etc/containerd/certs.d/198.18.0.9:5000/hosts.toml 644 23bbb301f336977b83b7a6b78942f1090e3d165886b3f37b907540deb5d6fb92 c2VydmVyID0gImh0dHA6Ly8xOTguMTguMC45OjUwMDAiCgpbaG9zdC4iaHR0cDovLzE5OC4xOC4wLjk6NTAwMCJdCiAgY2FwYWJpbGl0aWVzID0gWyJwdWxsIiwgInJlc29sdmUiLCAicHVzaCJdCgpbaG9zdC4iaHR0cHM6Ly8xOTguMTguMC45OjUwMDAiXQogIGNhcGFiaWxpdGllcyA9IFsicHVsbCIsICJyZXNvbHZlIiwgInB1c2giXQogIHNraXBfdmVyaWZ5ID0gdHJ1ZQo=
put_file /etc/containerd/certs.d/registry.local/hosts.toml 600 f7f7b96138bfc1dcb87d8cde94d0c0d4662e6133cef509519fef09a45e2c4306 c2VydmVyID0gImh0dHBzOi8vcmVnaXN0cnkubG9jYWwiCgpbaG9zdC4iaHR0cHM6Ly9yZWdpc3RyeS5sb2NhbCJdCiAgY2FwYWJpbGl0aWVzID0gWyJwdWxsIiwgInJlc29sdmUiLCAicHVzaCJdCiAgW2hvc3QuImh0dHBzOi8vcmVnaXN0cnkubG9jYWwiLmhlYWRlcl0KICAgIEF1dGhvcml6YXRpb24gPSAiQmFzaWMgZFRwdyIK
put_file /etc/crictl.yaml 644 d2725490e1fb2e6f565605f09871c1440371b85e04de5d70bbac05954d827f72 cnVudGltZS1lbmRwb2ludDogdW5peDovLy9ydW4vY29udGFpbmVyZC9jb250YWluZXJkLnNvY2sKaW1hZ2UtZW5kcG9pbnQ6IHVuaXg6Ly8vcnVuL2NvbnRhaW5lcmQvY29udGFpbmVyZC5zb2NrCnRpbWVvdXQ6IDEwCmRlYnVnOiBmYWxzZQo=
RESTART_MARKER=/var/lib/capkk/containerd-restart-pending
RESTART=1
# Variables: RESTART_MARKER, RESTART (1 when binaries changed). Preceded by the put_file calls of the
# configuration. Steps run in separate subshells: a pending restart is handed over (and survives a failed
# start) as a marker file.
if [ "$CHANGED" = 1 ] || [ "$RESTART" = 1 ]; then mkdir -p /var/lib/capkk; touch "$RESTART_MARKER"; fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=containerd-service
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
put_file /etc/systemd/system/containerd.service 644 767c6c8a81b9f5936243ff14ed764579e9250310fad8ad89c3f97fe69816407b W1VuaXRdCkRlc2NyaXB0aW9uPWNvbnRhaW5lcmQgY29udGFpbmVyIHJ1bnRpbWUKRG9jdW1lbnRhdGlvbj1odHRwczovL2NvbnRhaW5lcmQuaW8KQWZ0ZXI9bmV0d29yay50YXJnZXQgbG9jYWwtZnMudGFyZ2V0CgpbU2VydmljZV0KRXhlY1N0YXJ0UHJlPS0vc2Jpbi9tb2Rwcm9iZSBvdmVybGF5CkV4ZWNTdGFydD0vdXNyL2xvY2FsL2Jpbi9jb250YWluZXJkClR5cGU9bm90aWZ5CkRlbGVnYXRlPXllcwpLaWxsTW9kZT1wcm9jZXNzClJlc3RhcnQ9YWx3YXlzClJlc3RhcnRTZWM9NQpMaW1pdE5QUk9DPWluZmluaXR5CkxpbWl0Q09SRT1pbmZpbml0eQpMaW1pdE5PRklMRT1pbmZpbml0eQpUYXNrc01heD1pbmZpbml0eQpPT01TY29yZUFkanVzdD0tOTk5CgpbSW5zdGFsbF0KV2FudGVkQnk9bXVsdGktdXNlci50YXJnZXQK
RESTART_MARKER=/var/lib/capkk/containerd-restart-pending
# Variables: RESTART_MARKER. Preceded by the put_file of the containerd unit.
if [ "$CHANGED" = 1 ]; then systemctl daemon-reload; fi
if ! systemctl is-enabled -q containerd >/dev/null 2>&1; then systemctl enable containerd; CHANGED=1; fi
if systemctl is-active -q containerd >/dev/null 2>&1; then
  if [ -e "$RESTART_MARKER" ]; then systemctl restart containerd; echo restarted; CHANGED=1; fi
else
  systemctl start containerd; echo started; CHANGED=1
fi
rm -f "$RESTART_MARKER"
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"

# Arguments: the network links to delete when present.
for ipt in iptables ip6tables; do
  # shellcheck disable=SC2015 # skip the family unless both tools exist
  command -v $ipt-save >/dev/null 2>&1 && command -v $ipt-restore >/dev/null 2>&1 || continue
  for t in filter nat mangle raw; do
    _d=$($ipt-save -t $t 2>/dev/null) || continue
    if printf '%s\n' "$_d" | grep -Eq -- '(KUBE-|CNI-|cali-|cali:|FLANNEL|flannel)'; then
      printf '%s\n' "$_d" | grep -Ev -- '(KUBE-|CNI-|cali-|cali:|FLANNEL|flannel)' | $ipt-restore -T $t
      echo "removed kubernetes/CNI rules from $ipt table $t"; CHANGED=1
    fi
  done
done
if ip link show kube-ipvs0 >/dev/null 2>&1 && command -v ipvsadm >/dev/null 2>&1; then ipvsadm -C; echo 'cleared IPVS services'; CHANGED=1; fi
for l in "$@"; do
  if ip link show "$l" >/dev/null 2>&1; then ip link delete "$l"; echo "deleted link $l"; CHANGED=1; fi
done
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^cali'); do ip link delete "$l" && CHANGED=1; done

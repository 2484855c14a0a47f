echo '@@os-release'; cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release 2>/dev/null; echo '@@end'
echo "machine=$(uname -m)"
echo "kernel=$(uname -r)"
echo "hostname=$(hostname 2>/dev/null || cat /etc/hostname 2>/dev/null)"
[ -d /run/systemd/system ] && echo 'systemd=1'
command -v systemctl >/dev/null 2>&1 && echo "systemctl=$(command -v systemctl)"
for pm in apt-get dnf yum; do command -v $pm >/dev/null 2>&1 && echo "pm=$pm"; done
command -v getenforce >/dev/null 2>&1 && echo "selinux=$(getenforce 2>/dev/null)"
# Can this host lower a process's oom_score_adj? A container host without CAP_SYS_RESOURCE cannot (LXC,
# privileged node containers); containerd must then not try for its pods. Tried in a subshell, on itself.
if (echo -998 > /proc/self/oom_score_adj) 2>/dev/null; then echo 'oom_lower=1'; else echo 'oom_lower=0'; fi
true

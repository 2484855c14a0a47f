if command -v getenforce >/dev/null 2>&1 && [ "$(getenforce)" = Enforcing ]; then setenforce 0; echo 'SELinux now permissive'; CHANGED=1; fi
if [ -f /etc/selinux/config ] && grep -q '^SELINUX=enforcing' /etc/selinux/config; then
  sed -i 's/^SELINUX=enforcing/SELINUX=permissive/' /etc/selinux/config; CHANGED=1
fi

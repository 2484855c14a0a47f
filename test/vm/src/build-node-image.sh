#!/bin/sh
# Build the container test-host ("node container") root filesystem from Debian packages (run by capkk-vm,
# see src/containers.rs).
#
#   build-node-image.sh OUT_DIR SUITE MIRROR PACKAGES
#
# Writes into OUT_DIR (which must be empty): rootfs.tar (what `podman import` turns into the image),
# id_ed25519{,.pub} (the test-only client key baked into root's authorized_keys) and packages.txt. The tree is
# a bare Debian host like the VM image's, without a kernel: systemd as PID 1, sshd, and kubeadm's host
# prerequisites that a stock server has. Nothing of Kubernetes: the provider installs containerd, the
# Kubernetes binaries and the rest over SSH, exactly as on VMs and on a user's hosts.
#
# What a node container needs because it shares the machine's kernel is in the entrypoint
# (/usr/local/sbin/capkk-node-init) and the masks below; identity (hostname, address, machine-id, host key)
# is given per container at start and at first boot, never baked in.
set -eu
OUT=$1 SUITE=$2 MIRROR=$3 PACKAGES=$4
TREE=$(mktemp -d /tmp/capkk-node-tree.XXXXXX)
trap 'rm -rf "$TREE"' EXIT
ssh-keygen -q -t ed25519 -N '' -C capkk-node-test -f "$OUT/id_ed25519"

mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook="chroot \"\$1\" dpkg-query -W -f '\${Package} \${Version}\n' > '$OUT/packages.txt'" \
  "$SUITE" "$TREE" "$MIRROR"

# Identity: nothing host-specific from the build machine. resolv.conf is written at start (it names the
# fleet's gateway, which runs no DNS server: lookups fail fast and never leave the machine).
rm -f "$TREE/etc/hostname" "$TREE/etc/resolv.conf" "$TREE"/etc/ssh/ssh_host_*
: > "$TREE/etc/machine-id"
rm -f "$TREE/var/lib/dbus/machine-id"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$TREE/etc/hosts"
: > "$TREE/etc/fstab"

# SSH: root by key only, an ed25519 host key generated at first boot (its fingerprint is read out of band).
install -d -m 700 "$TREE/root/.ssh"
install -m 600 "$OUT/id_ed25519.pub" "$TREE/root/.ssh/authorized_keys"
cat > "$TREE/etc/ssh/sshd_config.d/capkk-node.conf" <<'CONF'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF
cat > "$TREE/etc/systemd/system/capkk-hostkey.service" <<'UNIT'
[Unit]
Description=capkk node container: ed25519 SSH host key
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/capkk-hostkey.service "$TREE/etc/systemd/system/multi-user.target.wants/capkk-hostkey.service"

# The entrypoint: shields the machine's kernel settings, then becomes systemd. A privileged container can
# write every sysctl that is not namespaced (kernel.*, vm.*, fs.*), and a node's kubelet does (kernel.panic=10,
# kernel.panic_on_oops=1, vm.overcommit_memory=1, kernel.keys.*), as do systemd's sysctl.d defaults and the
# provider's own sysctl file (vm.max_map_count, vm.swappiness, fs.inotify.*). Before anything in the node
# runs, every such file that can be read and written is covered by a bind mount of a private copy under
# /run: the node reads and writes its own values and the machine keeps its own. Namespaced ones (the UTS and
# IPC namespace's, ns_last_pid) stay real. The network's sysctls are per network namespace already.
install -d "$TREE/usr/local/sbin"
cat > "$TREE/usr/local/sbin/capkk-node-init" <<'INIT'
#!/bin/sh
set -u
shield=/run/capkk-sysctl
mkdir -p "$shield"
n=0
for f in $(find /proc/sys/kernel /proc/sys/vm /proc/sys/fs -type f -perm -u+w -perm -u+r 2>/dev/null); do
  case $f in
    /proc/sys/kernel/hostname | /proc/sys/kernel/domainname | /proc/sys/kernel/ns_last_pid | \
    /proc/sys/kernel/msg* | /proc/sys/kernel/sem* | /proc/sys/kernel/shm* | /proc/sys/kernel/auto_msgmni | \
    /proc/sys/fs/mqueue/*) continue ;;
  esac
  copy=$shield/$(echo "${f#/proc/sys/}" | tr / .)
  cat "$f" > "$copy" 2>/dev/null || { rm -f "$copy"; continue; }
  mount --bind "$copy" "$f" && n=$((n + 1))
done
echo "$n" > "$shield.count"
exec /sbin/init "$@"
INIT
chmod 755 "$TREE/usr/local/sbin/capkk-node-init"

# Units a container shares with the machine or cannot run: udev and kernel modules (the machine's kernel),
# binfmt_misc (one per kernel), the debug/tracing/config mounts, consoles, firstboot and remount.
for u in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket systemd-udev-trigger.service \
         systemd-udev-settle.service systemd-modules-load.service systemd-binfmt.service \
         proc-sys-fs-binfmt_misc.automount proc-sys-fs-binfmt_misc.mount \
         sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount sys-fs-fuse-connections.mount \
         systemd-firstboot.service systemd-remount-fs.service systemd-journald-audit.socket \
         getty@tty1.service console-getty.service serial-getty@ttyS0.service getty-static.service getty.target \
         apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
         systemd-networkd-wait-online.service systemd-pstore.service \
         modprobe@fuse.service modprobe@efi_pstore.service modprobe@dm_mod.service modprobe@drm.service \
         modprobe@configfs.service modprobe@loop.service; do
  ln -sf /dev/null "$TREE/etc/systemd/system/$u"
done
mkdir -p "$TREE/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\n' > "$TREE/etc/systemd/journald.conf.d/capkk-node.conf"
rm -rf "$TREE"/var/cache/apt/*.bin "$TREE"/var/lib/apt/lists/* "$TREE"/tmp/*

tar --numeric-owner --xattrs -C "$TREE" -cf "$OUT/rootfs.tar" .

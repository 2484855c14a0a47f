#!/bin/sh
# Build the VM test-host image from Debian packages (run by capkk-vm, see src/image.rs).
#
#   build-image.sh OUT_DIR SUITE MIRROR PACKAGES
#
# Writes into OUT_DIR (which must be empty): base.qcow2 (ext4 root, 8 GiB virtual), vmlinuz, initrd.img (direct
# kernel boot), id_ed25519{,.pub} (the test-only client key baked into root's authorized_keys) and
# packages.txt (the exact package versions installed). Nothing is mounted and the machine's files are untouched:
# mmdebstrap builds the tree in a temp dir and mkfs.ext4 -d copies it into the image file.
#
# What makes every VM distinct is NOT in the image: the hostname and address come from the kernel command line
# (systemd.hostname=, ip=), /etc/machine-id is empty (systemd makes one at first boot), the SMBIOS product_uuid
# is QEMU's -uuid, and the SSH host key is an ed25519 key generated at first boot (RSA keygen takes a minute
# under TCG) whose fingerprint is printed to the serial console for the test to pin.
set -eu
OUT=$1 SUITE=$2 MIRROR=$3 PACKAGES=$4
TREE=$(mktemp -d /tmp/capkk-vm-tree.XXXXXX)
trap 'rm -rf "$TREE"' EXIT
ssh-keygen -q -t ed25519 -N '' -C capkk-vm-test -f "$OUT/id_ed25519"

mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook="chroot \"\$1\" dpkg-query -W -f '\${Package} \${Version}\n' > '$OUT/packages.txt'" \
  "$SUITE" "$TREE" "$MIRROR"

cp "$TREE"/boot/vmlinuz-* "$OUT/vmlinuz"
cp "$TREE"/boot/initrd.img-* "$OUT/initrd.img"

# Identity: nothing host-specific from the build machine.
rm -f "$TREE/etc/hostname" "$TREE/etc/resolv.conf" "$TREE"/etc/ssh/ssh_host_*
: > "$TREE/etc/machine-id"
rm -f "$TREE/var/lib/dbus/machine-id"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$TREE/etc/hosts"
printf '/dev/vda / ext4 rw,relatime 0 1\n' > "$TREE/etc/fstab"

# SSH: root by key only, ed25519 host key generated at first boot.
install -d -m 700 "$TREE/root/.ssh"
install -m 600 "$OUT/id_ed25519.pub" "$TREE/root/.ssh/authorized_keys"
cat > "$TREE/etc/ssh/sshd_config.d/capkk-vm.conf" <<'CONF'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF
cat > "$TREE/etc/systemd/system/capkk-hostkey.service" <<'UNIT'
[Unit]
Description=capkk test VM: ed25519 SSH host key, fingerprint on the console
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key
ExecStart=/bin/sh -c 'echo "capkk-hostkey: $(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub | cut -d" " -f2)" > /dev/console'

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/capkk-hostkey.service "$TREE/etc/systemd/system/multi-user.target.wants/capkk-hostkey.service"
# A second line on the console once sshd accepts connections (the test still dials port 22 to be sure).
cat > "$TREE/etc/systemd/system/capkk-ready.service" <<'UNIT'
[Unit]
Description=capkk test VM: report readiness on the console
After=ssh.service capkk-hostkey.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo "capkk-ready: $(hostname) $(cat /etc/machine-id)" > /dev/console'

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/capkk-ready.service "$TREE/etc/systemd/system/multi-user.target.wants/capkk-ready.service"

# A resolver configuration, as every real host has: the kubelet refuses to create pod sandboxes without
# /etc/resolv.conf. It names the gateway from ip= (the machine side of the bridge, which runs no DNS server,
# so lookups fail fast: enough for the kubelet and CoreDNS to start). Identity stays out of the image.
cat > "$TREE/etc/systemd/system/capkk-resolv.service" <<'UNIT'
[Unit]
Description=capkk test VM: /etc/resolv.conf naming the gateway of the kernel command line's ip=
ConditionPathExists=!/etc/resolv.conf
After=local-fs.target
Before=network.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'gw=; for a in $(cat /proc/cmdline); do case $a in ip=*) gw=$(echo "$a" | cut -d: -f3);; esac; done; echo "nameserver ${gw:-127.0.0.1}" > /etc/resolv.conf'

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/capkk-resolv.service "$TREE/etc/systemd/system/multi-user.target.wants/capkk-resolv.service"

# Network from the kernel command line's ip=: systemd-network-generator (not enabled by the package in a
# chroot) writes the networkd config that systemd-networkd applies.
mkdir -p "$TREE/etc/systemd/system/sysinit.target.wants"
ln -sf /lib/systemd/system/systemd-network-generator.service \
  "$TREE/etc/systemd/system/sysinit.target.wants/systemd-network-generator.service"
ln -sf /lib/systemd/system/systemd-networkd.service "$TREE/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
# Boot time under TCG: no timers or units a test host never needs.
# (Measured with systemd-analyze blame in a loaded TCG guest: getty-static 41 s, each modprobe@ unit ~20 s.)
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
         systemd-networkd-wait-online.service getty@tty1.service serial-getty@ttyS0.service getty-static.service \
         modprobe@fuse.service modprobe@efi_pstore.service modprobe@dm_mod.service modprobe@drm.service \
         systemd-pstore.service sys-kernel-debug.mount sys-kernel-tracing.mount; do
  ln -sf /dev/null "$TREE/etc/systemd/system/$u"
done
mkdir -p "$TREE/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\n' > "$TREE/etc/systemd/journald.conf.d/capkk-vm.conf"
# The kernel and initrd boot from outside the disk (direct kernel boot); /boot keeps what a Debian host has
# besides them: config-<version> (kubeadm's SystemVerification preflight reads it; without it kubeadm tries
# `modprobe configs`, which Debian does not build, and refuses to init) and System.map.
rm -rf "$TREE"/var/cache/apt/*.bin "$TREE"/var/lib/apt/lists/* "$TREE"/tmp/* "$TREE"/boot/vmlinuz-* "$TREE"/boot/initrd.img-*

# Inode tables and journal initialised now, not by the guest's ext4lazyinit thread after every fresh overlay's
# first mount: under TCG that thread once held a vCPU for minutes (soft lockups on both vCPUs, boot never
# reached SSH). qemu-img convert keeps the zeroed tables out of the qcow2.
mkfs.ext4 -q -L capkk-root -E root_owner=0:0,lazy_itable_init=0,lazy_journal_init=0 -d "$TREE" "$OUT/root.raw" 8G
qemu-img convert -q -f raw -O qcow2 "$OUT/root.raw" "$OUT/base.qcow2"
rm -f "$OUT/root.raw"

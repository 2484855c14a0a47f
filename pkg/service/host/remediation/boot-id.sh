# The host's boot ID (a new one on every boot): the controller compares it before and after a reboot.
cat /proc/sys/kernel/random/boot_id

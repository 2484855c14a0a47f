ISO=/var/lib/capkk/repository/x.iso
# Variables: ISO (path of the ISO on the host).
sha256sum "$ISO" 2>/dev/null | cut -d' ' -f1; true

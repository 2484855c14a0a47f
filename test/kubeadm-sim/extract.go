package main

import (
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// embedded holds gzipped control-plane binaries when built with -tags embedcp (see embed_cp.go).
var embedded *embed.FS

// extractEmbedded writes the embedded binary name to simDir/bin/name (once) and returns its path.
func extractEmbedded(name string) (string, bool, error) {
	if embedded == nil {
		return "", false, nil
	}
	f, err := embedded.Open("embedded/" + name + ".gz")
	if err != nil {
		return "", false, nil
	}
	defer f.Close()
	dest := filepath.Join(simDir, "bin", name)
	if st, err := os.Stat(dest); err == nil && st.Mode()&0o111 != 0 {
		return dest, true, nil
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", false, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", false, fmt.Errorf("embedded %s: %w", name, err)
	}
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return "", false, err
	}
	if _, err := io.Copy(out, zr); err != nil {
		out.Close()
		return "", false, fmt.Errorf("extract embedded %s: %w", name, err)
	}
	if err := out.Close(); err != nil {
		return "", false, err
	}
	return dest, true, os.Rename(tmp, dest)
}

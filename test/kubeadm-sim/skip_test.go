package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// requireOrSkip applies the project's skip policy (test/sandbox/src/skip.rs) to a Go test whose prerequisites
// are missing: the test fails naming them, unless CAPKK_ALLOW_SKIP=1, in which case it is skipped and the skip
// is appended to $CAPKK_SKIP_LOG ("reason<TAB>test") so that `make test` counts it.
func requireOrSkip(t *testing.T, what, missing string) {
	t.Helper()
	if missing == "" {
		return
	}
	if os.Getenv("CAPKK_ALLOW_SKIP") != "1" {
		t.Fatalf("%s cannot run here: %s. Run `make deps` as root, or set CAPKK_ALLOW_SKIP=1 to skip such tests on purpose", what, missing)
	}
	reason := fmt.Sprintf("%s unavailable (%s)", what, missing)
	if log := os.Getenv("CAPKK_SKIP_LOG"); log != "" {
		clean := strings.NewReplacer("\t", " ", "\n", " ")
		f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = fmt.Fprintf(f, "%s\t%s\n", clean.Replace(reason), clean.Replace(t.Name()))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			t.Fatalf("skipping: cannot append to %s: %v", log, err)
		}
	}
	t.Skip(reason)
}

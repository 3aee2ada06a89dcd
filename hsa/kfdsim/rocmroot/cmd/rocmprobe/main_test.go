package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/internal/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A library that lacks the probe's symbols is a failure line and exit
// status 1, not a panic; a host tool that fails is exit 1 too; extra
// arguments are a usage error.
func TestFailuresAreExitStatuses(t *testing.T) {
	libm, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libm.so.6")
	if err != nil {
		t.Skip("no libm at /lib/x86_64-linux-gnu to stand in for a runtime: ", err)
	}
	fake := filepath.Join(t.TempDir(), "libhsa-runtime64.so.1")
	data, err := os.ReadFile(libm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, data, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"-lib", fake, "-hsa"}, 1, "hsa_init=error: libhsa-runtime64 lacks it"},
		{[]string{"-host", "no-such-tool-for-rocmprobe"}, 1, "host no-such-tool-for-rocmprobe=error"},
		{[]string{"extra"}, 2, "unexpected arguments"},
	} {
		code, out := maintest.Run(t, c.args, nil)
		if code != c.code || !strings.Contains(out, c.says) || strings.Contains(out, "goroutine") {
			t.Errorf("rocmprobe %q: exit %d, want %d saying %q:\n%s", c.args, code, c.code, c.says, out)
		}
	}
}

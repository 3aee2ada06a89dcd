package hip

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rocsync/rocsync/internal/dl"
)

// Shared fixtures: the real libamdhip64 (when installed) and the fake one
// built from testdata/fakehip.c (when gcc is installed), each opened once
// per test binary.

var tmpRoot string

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

var realFix struct {
	once sync.Once
	lib  *Lib
	err  error
}

// realLib opens the installed libamdhip64, or skips.
func realLib(tb testing.TB) *Lib {
	tb.Helper()
	realFix.once.Do(func() { realFix.lib, realFix.err = Open() })
	if realFix.err != nil {
		if errors.Is(realFix.err, dl.ErrNotFound) {
			tb.Skipf("libamdhip64 is not installed, skipping: %v", realFix.err)
		}
		tb.Fatalf("Open: %v", realFix.err)
	}
	return realFix.lib
}

var fakeFix struct {
	once sync.Once
	lib  *Lib
	dir  string
	err  error
	skip string
}

// fakeLib compiles testdata/fakehip.c into <tmp>/lib/libamdhip64.so.7 and
// opens it through Open with ROCM_PATH=<tmp>, or skips when gcc is missing.
func fakeLib(tb testing.TB) *Lib {
	tb.Helper()
	fakeFix.once.Do(func() {
		gcc, err := exec.LookPath("gcc")
		if err != nil {
			fakeFix.skip = "gcc is not installed, so the fake libamdhip64 cannot be built"
			return
		}
		if tmpRoot == "" {
			if tmpRoot, fakeFix.err = os.MkdirTemp("", "hiptest"); fakeFix.err != nil {
				return
			}
		}
		fakeFix.dir = filepath.Join(tmpRoot, "fakerocm")
		libdir := filepath.Join(fakeFix.dir, "lib")
		if fakeFix.err = os.MkdirAll(libdir, 0o755); fakeFix.err != nil {
			return
		}
		out := filepath.Join(libdir, "libamdhip64.so.7")
		// No -soname: a later dlopen("libamdhip64.so.7") by bare name must
		// not find this fake through the loader's list of loaded objects.
		cmd := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", out, "testdata/fakehip.c")
		if msg, err := cmd.CombinedOutput(); err != nil {
			fakeFix.err = errors.New("building fakehip.c: " + err.Error() + "\n" + string(msg))
			return
		}
		old, had := os.LookupEnv("ROCM_PATH")
		os.Setenv("ROCM_PATH", fakeFix.dir)
		fakeFix.lib, fakeFix.err = Open()
		if had {
			os.Setenv("ROCM_PATH", old)
		} else {
			os.Unsetenv("ROCM_PATH")
		}
	})
	if fakeFix.skip != "" {
		tb.Skip(fakeFix.skip)
	}
	if fakeFix.err != nil {
		tb.Fatal(fakeFix.err)
	}
	return fakeFix.lib
}

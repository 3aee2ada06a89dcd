package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Shared fixtures: the fake libcuda built from testdata/fakecuda.c (when
// gcc is installed) and the real one (only with ROCSYNC_GPU=1), each opened
// once per test binary.

var tmpRoot string

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

var fakeFix struct {
	once sync.Once
	lib  *Lib
	path string
	err  error
	skip string
}

// BuildFake compiles testdata/fakecuda.c into dir/libcuda.so.1 and returns
// its path. Other packages' tests use the same source through their own
// copy of this helper.
func buildFake(dir, src string) (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "libcuda.so.1")
	// No -soname, so a later dlopen("libcuda.so.1") by bare name cannot
	// find the fake through the loader's list of loaded objects.
	cmd := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-ffp-contract=off", "-Wall", "-Werror", "-o", out, src, "-lm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("building fakecuda.c: " + err.Error() + "\n" + string(msg))
	}
	return out, nil
}

// fakeLib opens the fake libcuda through ROCSYNC_LIBCUDA, or skips when gcc
// is missing. cuInit has been called.
func fakeLib(tb testing.TB) *Lib {
	tb.Helper()
	fakeFix.once.Do(func() {
		if _, err := exec.LookPath("gcc"); err != nil {
			fakeFix.skip = "gcc is not installed, so the fake libcuda cannot be built"
			return
		}
		if _, err := os.Stat("testdata/fakecuda.c"); err != nil {
			fakeFix.skip = "testdata/fakecuda.c is not here (run the test binary in cuda/)"
			return
		}
		if tmpRoot == "" {
			if tmpRoot, fakeFix.err = os.MkdirTemp("", "cudatest"); fakeFix.err != nil {
				return
			}
		}
		if fakeFix.path, fakeFix.err = buildFake(tmpRoot, "testdata/fakecuda.c"); fakeFix.err != nil {
			return
		}
		old, had := os.LookupEnv(EnvLibCUDA)
		os.Setenv(EnvLibCUDA, fakeFix.path)
		fakeFix.lib, fakeFix.err = Open()
		if had {
			os.Setenv(EnvLibCUDA, old)
		} else {
			os.Unsetenv(EnvLibCUDA)
		}
		if fakeFix.err == nil {
			fakeFix.err = fakeFix.lib.Init()
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

var gpuFix struct {
	once sync.Once
	lib  *Lib
	ctx  *Ctx
	err  error
}

// gpuCtx opens the real driver and retains device 0's primary context, or
// skips unless ROCSYNC_GPU=1.
func gpuCtx(tb testing.TB) *Ctx {
	tb.Helper()
	if os.Getenv("ROCSYNC_GPU") != "1" {
		tb.Skip("set ROCSYNC_GPU=1 to run on an NVIDIA GPU")
	}
	gpuFix.once.Do(func() {
		if gpuFix.lib, gpuFix.err = Open(); gpuFix.err != nil {
			return
		}
		if gpuFix.err = gpuFix.lib.Init(); gpuFix.err != nil {
			return
		}
		var d Device
		if d, gpuFix.err = gpuFix.lib.DeviceGet(0); gpuFix.err != nil {
			return
		}
		gpuFix.ctx, gpuFix.err = gpuFix.lib.PrimaryCtxRetain(d)
	})
	if gpuFix.err != nil {
		tb.Fatal(gpuFix.err)
	}
	return gpuFix.ctx
}

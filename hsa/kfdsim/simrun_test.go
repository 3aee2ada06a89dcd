package kfdsim

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
)

// buildTool builds one of the repository's commands (CGO_ENABLED=0, as
// every rocsync program) into dir.
func buildTool(t *testing.T, dir, pkg string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build %s: %v", pkg, err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := rocmroot.HostCommand(context.Background(), goTool, "build", "-o", out, pkg)
	cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// simrun runs a tiny ROCm program (cmd/rocmprobe: dlopen, hsa_init, a
// queue and a barrier packet, hipMalloc, hipMemcpy, a stream) over the
// simulated driver with the release and GPUs asked for: on 5.2.3 (the
// host's libraries) with two GPUs of different targets, and on 6.4.3
// (sid's root) with an MI300X in DPX mode when that root is cached. The
// program's own output shows the release's libraries and the GPUs; its exit
// status is simrun's.
func TestSimrunRunsAProgram(t *testing.T) {
	LibraryOrSkip(t)
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"); err != nil && os.Getenv(EnvRequired) != "1" {
		t.Skipf("bookworm's HIP 5.2.3 is not installed: %v", err)
	}
	dir := t.TempDir()
	simrun := buildTool(t, dir, "./cmd/simrun")
	probe := buildTool(t, dir, "./rocmroot/cmd/rocmprobe")
	run := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		out, err := exec.Command(simrun, args...).CombinedOutput()
		t.Logf("simrun %s:\n%s", strings.Join(args, " "), out)
		return string(out), err
	}
	t.Run("5.2.3", func(t *testing.T) {
		out, err := run(t, "-rocm", "5.2.3", "-gpus", "gfx90a,gfx1030", "--", probe,
			"-lib", "libhsa-runtime64.so.1", "-lib", "libamdhip64.so.5", "-hsa", "-hip", "-ops")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"hipRuntimeGetVersion=0 version=50221153", "hipGetDeviceCount=0 count=2",
			"hsa agent=gfx90a device_type=1", "hsa agent=gfx1030 device_type=1", "hip memcpy=ok ok same=true"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the output", want)
			}
		}
	})
	t.Run("6.4.3", func(t *testing.T) {
		if _, ok := rocmroot.Cached(rocmroot.Options{Release: "sid"}); !ok {
			t.Skip("sid's root of the pinned packages is not cached (go run ./hsa/kfdsim/rocmroot/cmd/fetchroot -release sid)")
		}
		// HIP only: ROCr 6.4.3 does not initialise again in a process
		// after hsa_shut_down, which the probe's HSA part calls.
		out, err := run(t, "-rocm", "6.4.3", "-gpus", "gfx942/dpx", "--", probe, "-lib", "libamdhip64.so.6", "-hip")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"hipRuntimeGetVersion=0 version=6044", "hipGetDeviceCount=0 count=2", "/root/usr/lib/x86_64-linux-gnu/libamdhip64.so.6"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the output", want)
			}
		}
	})
	t.Run("failures", func(t *testing.T) {
		_, err := run(t, "-rocm", "7.0", "--", probe)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("an unknown release: %v, want exit status 1", err)
		}
		_, err = run(t, "-rocm", "5.2.3", "--", "/bin/sh", "-c", "exit 3")
		if !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Errorf("a program's exit status 3: %v", err)
		}
	})
}

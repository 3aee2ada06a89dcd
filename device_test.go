package rocsync

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/kernels"
)

func TestExplicitROCmFailsClearlyWithoutGPU(t *testing.T) {
	if _, err := hsa.Open(); err == nil && hasKFD() {
		t.Skip("this machine has /dev/kfd; the no-GPU path does not apply")
	}
	_, err := Open(Options{Backend: ROCm, LogLevel: LogOff})
	require.Error(t, err)
	require.ErrorIs(t, err, ErrUnavailable)
	if !errors.Is(err, dl.ErrNotFound) {
		// The library is installed: init itself must say there is no GPU.
		require.ErrorIs(t, err, hsa.ErrNoGPU)
		require.ErrorContains(t, err, "no AMD GPU found")
	}
}

func TestAutoFallsBackToEmulatorAndSaysWhy(t *testing.T) {
	if hasKFD() {
		t.Skip("this machine has /dev/kfd")
	}
	// Auto's second choice, NVIDIA's driver, is hidden: this is the
	// machine with neither GPU (TestAutoPicksCUDAAfterROCm has the other).
	t.Setenv(cuda.EnvLibCUDA, "/nonexistent/libcuda.so.1")
	var buf bytes.Buffer
	d, err := Open(Options{LogHandler: jsonLog(&buf, slog.LevelDebug)})
	require.NoError(t, err)
	defer d.Close()
	require.True(t, d.Emulated())
	require.Equal(t, "emulator", d.Backend())
	require.Contains(t, buf.String(), "using the emulated AMD device")
	require.Contains(t, buf.String(), `"reason":`)
	require.Equal(t, 1, bytes.Count(buf.Bytes(), []byte("\n")), "one log line: %s", buf.String())
}

func TestUnsupportedGPUNamesItsTarget(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, Emulator: EmulatorOptions{ISA: "gfx803"}})
	require.NoError(t, err)
	defer d.Close()
	x, err := d.FromFloat32(1, 1, []float32{1})
	require.NoError(t, err)
	_, err = d.DefaultTask().Neg(x)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, kernels.ErrUnsupportedTarget)
	require.ErrorContains(t, err, "gfx803")
	require.ErrorContains(t, err, "gfx90a")
}

func TestClosedDeviceRejectsOps(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	require.NoError(t, err)
	x, err := d.FromFloat32(1, 1, []float32{1})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	_, err = d.DefaultTask().Neg(x)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, x.Free(), ErrClosed)
}

func hasKFD() bool {
	_, err := os.Stat("/dev/kfd")
	return err == nil
}

func TestExplicitCUDAFailsClearlyWithoutDriver(t *testing.T) {
	if gpuRun() && gpuBackend() == CUDA {
		t.Skip("running on the CUDA hardware suite")
	}
	t.Setenv("ROCSYNC_LIBCUDA", "")
	_, err := Open(Options{Backend: CUDA, LogLevel: LogOff})
	if err == nil {
		t.Skip("this machine has a working CUDA driver")
	}
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, cuda.ErrNoDriver)
	require.ErrorContains(t, err, "libcuda")
}

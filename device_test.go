package rocsync

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
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

// More tasks than queues share the pool's queues, and stay correct.
func TestQueuePoolSharesQueues(t *testing.T) {
	d := openStrict(t, DeviceSide, func(o *Options) { o.MaxQueues = 2 })
	if d.Backend() == "cuda" {
		t.Skip("CUDA streams are not pooled HSA queues")
	}
	x, err := d.FromFloat32(4, 4, make([]float32, 16))
	require.NoError(t, err)
	var tasks []*Task
	for i := 0; i < 5; i++ {
		tk, err := d.NewTask()
		require.NoError(t, err)
		tasks = append(tasks, tk)
		require.NoError(t, tk.Fill(x, float64(i)))
	}
	// The tasks' kernel timelines are the pool's HSA queues: two.
	queues := map[syncstate.Timeline]bool{}
	for _, tk := range tasks {
		q, ok := tk.drv.Timeline(driver.LaneKernel).(*queue.Queue)
		require.True(t, ok, "a task's kernel timeline is its HSA queue")
		queues[q] = true
	}
	require.Len(t, queues, 2)
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, float32(4), got[0])
	for _, tk := range tasks {
		require.NoError(t, tk.Close())
	}
}

// Steady state creates no signals and no events: both are pooled.
func TestSignalsAndEventsArePooled(t *testing.T) {
	d := openStrict(t, DeviceSide)
	a, _ := d.NewTask()
	b, _ := d.NewTask()
	x, err := d.FromFloat32(8, 8, make([]float32, 64))
	require.NoError(t, err)
	y, _ := d.Empty(8, 8, Float32)
	round := func() {
		require.NoError(t, a.Fill(x, 1))
		require.NoError(t, b.AddInto(y, x, x)) // HSA→HSA crossing
		require.NoError(t, a.MatMulInto(x, y, y, false, false))
		require.NoError(t, b.MatMulInto(y, x, x, false, false)) // HIP→HIP crossing
		require.NoError(t, d.Synchronize())
	}
	for i := 0; i < 5; i++ {
		round()
	}
	sig, ev := d.SignalsCreated(), d.EventsCreated()
	for i := 0; i < 20; i++ {
		round()
	}
	require.Equal(t, sig, d.SignalsCreated())
	require.Equal(t, ev, d.EventsCreated())
	require.NotZero(t, d.Stats().EventsRecorded)
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

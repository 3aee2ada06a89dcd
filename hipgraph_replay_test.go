package rocsync

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/testhooks"
)

// openHIPGraphEmulator opens the emulator under Unified with the checker
// and random delays, HIP version hipVersion (0: the default), logging at
// debug level into log.
func openHIPGraphEmulator(t *testing.T, hipVersion int, log *bytes.Buffer) *Device {
	t.Helper()
	d, err := Open(Options{Backend: Emulator, Policy: Unified, LogHandler: jsonLog(log, slog.LevelDebug), Emulator: EmulatorOptions{
		HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 11, HIPVersion: hipVersion}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// hipGraphProgram is a kernel, a gemm and a library call of the user's
// (call) between them, into y, z and w.
func hipGraphProgram(tk *Task, x, y, z, w *Array, call func(stream uintptr) error) error {
	return errors.Join(tk.MulInto(y, x, x), tk.MatMulInto(z, y, x, false, false),
		tk.LibraryCall([]Arg{In(z), Out(w)}, call), tk.AddInto(w, z, x))
}

// replayAgainstEager records the program once, then iters times runs it
// eagerly into one set of arrays and replays it into another after a new
// upload of x, and requires equal results and no hazard. It returns the
// recording's Graphs() and the hipGraphLaunch calls its replays made.
func replayAgainstEager(t *testing.T, d *Device, call func(uintptr) error, iters int) (graphs int, fallbacks []error, launches uint64) {
	t.Helper()
	tk := d.DefaultTask()
	const n = 8
	x, err := d.FromFloat32(n, n, randMatrix(1, n))
	require.NoError(t, err)
	arrays := func() (y, z, w *Array) {
		var a [3]*Array
		for i := range a {
			a[i], err = d.Empty(n, n, Float32)
			require.NoError(t, err)
		}
		return a[0], a[1], a[2]
	}
	ey, ez, ew := arrays()
	ry, rz, rw := arrays()
	rec, err := tk.Record(func() error { return hipGraphProgram(tk, x, ry, rz, rw, call) })
	require.NoError(t, err)
	graphs, fallbacks = rec.Graphs()
	before := d.machine().HIP().GraphLaunches()
	for it := range iters {
		require.NoError(t, tk.UploadFloat32(x, randMatrix(uint64(20+it), n)))
		require.NoError(t, hipGraphProgram(tk, x, ey, ez, ew, call))
		require.NoError(t, rec.Replay())
		want, err := ew.Float32s()
		require.NoError(t, err)
		got, err := rw.Float32s()
		require.NoError(t, err)
		require.Equal(t, want, got, "iteration %d", it)
	}
	launches = d.machine().HIP().GraphLaunches() - before
	require.NoError(t, rec.Close())
	require.NoError(t, d.Synchronize())
	require.Empty(t, d.Hazards())
	return graphs, fallbacks, launches
}

// Under Unified the whole recording is one hipGraph on the emulator: one
// hipGraphLaunch per replay, equal to eager, no hazard.
func TestHIPGraphReplayUnified(t *testing.T) {
	var log bytes.Buffer
	d := openHIPGraphEmulator(t, 0, &log)
	graphs, fallbacks, launches := replayAgainstEager(t, d, func(uintptr) error { return nil }, 4)
	require.Empty(t, fallbacks)
	require.Equal(t, 1, graphs)
	require.EqualValues(t, 4, launches, "one hipGraphLaunch per replay")
}

// Where capture fails or HIP would not capture every call, the segment
// replays its recorded calls in order: correct, and visible in
// Recording.Graphs and the debug log.
func TestHIPGraphReplayFallsBack(t *testing.T) {
	t.Run("a library call that synchronizes its stream", func(t *testing.T) {
		var log bytes.Buffer
		d := openHIPGraphEmulator(t, 0, &log)
		hp := d.machine().HIP()
		calls := 0
		graphs, fallbacks, launches := replayAgainstEager(t, d, func(s uintptr) error {
			calls++
			return hp.StreamSynchronize(hip.Stream(s))
		}, 3)
		require.Zero(t, graphs)
		require.Len(t, fallbacks, 1)
		require.ErrorIs(t, fallbacks[0], &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		require.Zero(t, launches)
		require.Equal(t, 1+3+3, calls, "once at capture, then once per eager run and per replay")
		require.Contains(t, log.String(), "not captured into a graph")
		require.Contains(t, log.String(), "hipErrorStreamCaptureUnsupported")
	})
	t.Run("a HIP without the hipGraph API", func(t *testing.T) {
		var log bytes.Buffer
		d := openHIPGraphEmulator(t, 0, &log)
		d.machine().HIP().SetGraphsUnavailable(true)
		graphs, fallbacks, launches := replayAgainstEager(t, d, func(uintptr) error { return nil }, 3)
		require.Zero(t, graphs)
		require.Len(t, fallbacks, 1)
		require.ErrorIs(t, fallbacks[0], hip.ErrGraphsUnavailable)
		require.Zero(t, launches)
	})
	t.Run("HIP 5.2, which does not capture kernel launches", func(t *testing.T) {
		var log bytes.Buffer
		d := openHIPGraphEmulator(t, 50_221_153, &log)
		graphs, fallbacks, launches := replayAgainstEager(t, d, func(uintptr) error { return nil }, 3)
		require.Zero(t, graphs)
		require.Len(t, fallbacks, 1)
		require.ErrorIs(t, fallbacks[0], rocmdev.ErrNotCaptured)
		require.Zero(t, launches)
	})
}

// The HIP 5.2 rule is why rocsync does not capture kernels there: forced
// to (the test-only switch), the emulated HIP 5.2 runs the kernel at
// capture and the graph lacks it, so a replay computes nothing, as Debian's
// HIP 5.2.3 does (TestHIPGraphLacksModuleLaunchOnHIP52OnSimulatedDriver).
func TestHIPGraphForcedOnHIP52LacksKernels(t *testing.T) {
	testhooks.ForceHIPCapture.Store(true)
	defer testhooks.ForceHIPCapture.Store(false)
	var log bytes.Buffer
	d := openHIPGraphEmulator(t, 50_221_153, &log)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := d.FromFloat32(1, 4, []float32{0, 0, 0, 0})
	require.NoError(t, err)
	rec, err := tk.Record(func() error { return tk.MulInto(y, x, x) })
	require.NoError(t, err)
	graphs, _ := rec.Graphs()
	require.Equal(t, 1, graphs)
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9, 16}, got, "the kernel ran at capture")
	require.NoError(t, tk.Fill(y, 0))
	require.NoError(t, rec.Replay())
	got, err = y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{0, 0, 0, 0}, got, "the graph lacks the kernel")
	require.NoError(t, rec.Close())
}

// A hipGraph replay allocates nothing on the host (the checker off, as in
// the hot-path benchmarks).
func TestHIPGraphReplayAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	d, err := Open(Options{Backend: Emulator, Policy: Unified, LogLevel: LogOff})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	require.NoError(t, err)
	rec, err := tk.Record(func() error { return scaleChain(tk, x) })
	require.NoError(t, err)
	graphs, _ := rec.Graphs()
	require.Equal(t, 1, graphs)
	require.NoError(t, rec.Replay())
	require.NoError(t, tk.Synchronize())
	allocs := testing.AllocsPerRun(100, func() {
		if err := rec.Replay(); err != nil {
			t.Fatal(err)
		}
	})
	require.NoError(t, tk.Synchronize())
	require.Zero(t, allocs)
	require.NoError(t, rec.Close())
}

// A graph replay asks the fault injector about the ops inside it, as the
// eager ops are asked, never about hipGraphLaunch: a fault injected into
// the recorded kernel fails the replay with ErrFault.
func TestHIPGraphReplayInjectsFaultsIntoItsOps(t *testing.T) {
	var log bytes.Buffer
	d := openHIPGraphEmulator(t, 0, &log)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	rec, err := tk.Record(func() error { return tk.MulInto(y, x, x) })
	require.NoError(t, err)
	graphs, _ := rec.Graphs()
	require.Equal(t, 1, graphs)
	asked := make(chan string, 64)
	d.machine().SetFaultInjector(func(op string) bool {
		select {
		case asked <- op:
		default:
		}
		return op == "rocsync_mul_f32"
	})
	require.NoError(t, rec.Replay())
	_, err = y.Float32s()
	require.ErrorIs(t, err, ErrFault)
	d.machine().SetFaultInjector(nil)
	close(asked)
	var ops []string
	for op := range asked {
		ops = append(ops, op)
	}
	require.Contains(t, ops, "rocsync_mul_f32")
	require.NotContains(t, ops, "hipGraphLaunch")
	require.NoError(t, rec.Close())
}

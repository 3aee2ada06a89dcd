//go:build !rocsync_notrace

package rocsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/tracecheck"
	"github.com/rocsync/rocsync/syncstate"
)

// traceWork runs ops that make every kind of wait the trace draws: on two
// tasks, kernels and gemms (boundary crossings), a crossing between the
// tasks' queues (a device wait under DeviceSide, a host wait under
// SkipSameQueue), a read-back, a free of an array with work in flight,
// Synchronize, an upload and a download.
func traceWork(t *testing.T, d *Device) {
	t.Helper()
	t1 := d.DefaultTask()
	t2, err := d.NewTask()
	require.NoError(t, err)
	x, err := d.FromFloat32(16, 16, make([]float32, 256))
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		sq, err := t1.Mul(x, x)
		require.NoError(t, err)
		y, err := t1.MatMul(sq, x, false, false)
		require.NoError(t, err)
		z, err := t2.Add(y, sq) // crosses from t1's stream and queue
		require.NoError(t, err)
		require.NoError(t, t1.ScaleInto(x, 0.5, z)) // back to t1's queue
		require.NoError(t, sq.Free())
		require.NoError(t, y.Free())
		_, err = z.Float32s()
		require.NoError(t, err)
		require.NoError(t, z.Free())
	}
	require.NoError(t, t2.UploadFloat32(x, make([]float32, 256)))
	got := make([]float32, 256)
	p, err := t1.DownloadFloat32(x, got)
	require.NoError(t, err)
	require.NoError(t, p.Wait(context.Background()))
	p, err = t1.DownloadFloat32(x, got)
	require.NoError(t, err)
	called := make(chan error, 1)
	p.Then(func(err error) { called <- err })
	require.NoError(t, <-called)
	_, err = t2.Mul(x, x)
	require.NoError(t, err)
	require.NoError(t, t2.Synchronize())
	require.NoError(t, t2.Close())
}

// The trace of a run shows what its counters count: a slice per op on its
// queue's or stream's track and on its task's host track, a host-wait
// slice per host wait of each reason, a flow from the producer to every
// device and host wait, and only the tracks the run used.
func TestTraceMatchesStats(t *testing.T) {
	for _, pol := range syncstate.Policies {
		t.Run(pol.String(), func(t *testing.T) {
			var buf bytes.Buffer
			// A run-ahead cap of 2 makes the queues and streams throttle.
			d, err := Open(Options{Backend: Emulator, Policy: pol, LogLevel: LogOff, Trace: NewTrace(&buf), TraceName: "work",
				MaxInFlight: 2, Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 50 * time.Microsecond, Seed: 3}})
			require.NoError(t, err)
			traceWork(t, d)
			require.NoError(t, d.Close())
			require.Empty(t, d.Hazards())
			checkTrace(t, buf.Bytes(), "work", d.Stats())
		})
	}
	t.Run("LaunchBlocking", func(t *testing.T) {
		var buf bytes.Buffer
		d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, Trace: NewTrace(&buf), TraceName: "work", LaunchBlocking: true,
			MaxInFlightPerDevice: 2, Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 50 * time.Microsecond, Seed: 3}})
		require.NoError(t, err)
		traceWork(t, d)
		require.NoError(t, d.Close())
		require.NotZero(t, d.Stats().HostWaits[ReasonLaunchBlocking])
		checkTrace(t, buf.Bytes(), "work", d.Stats())
	})
}

// checkTrace checks a trace's process name against what st counts.
func checkTrace(t *testing.T, data []byte, name string, st Stats) {
	t.Helper()
	t.Logf("%s: %v", name, st)
	tr, err := tracecheck.Parse(data)
	require.NoError(t, err)
	require.NoError(t, tr.Check(name, countsOf(st)))
}

func countsOf(st Stats) tracecheck.Counts {
	// On the emulator every op's queue or stream times it on the device
	// (its 100 MHz clock ticks every 10 ns).
	c := tracecheck.Counts{Dispatches: st.Dispatches, DeviceWaits: st.DeviceWaits, HostWaits: map[string]uint64{},
		GPUSpans: st.Dispatches, ClockSkew: 0.01}
	for _, r := range syncstate.Reasons {
		c.HostWaits[r.String()] = st.HostWaits[r]
	}
	return c
}

// ROCSYNC_TRACE=file traces without an option, into a file written
// atomically with mode 0600 when the device closes.
func TestTraceEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	t.Setenv("ROCSYNC_TRACE", path)
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	require.NoError(t, err)
	traceWork(t, d)
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "written before Close")
	require.NoError(t, d.Close())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	checkTrace(t, data, "gpu0 DeviceSide (emulator)", d.Stats())
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".trace.json.tmp*"))
	require.Empty(t, left, "temporary files left")
}

// A trace that cannot be written is an error of Close and Flush, and
// leaves nothing behind.
func TestTraceWriteErrors(t *testing.T) {
	dir := t.TempDir()
	tr := NewTraceFile(filepath.Join(dir, "missing", "trace.json"))
	err := tr.Flush()
	var e *Error
	require.True(t, errors.As(err, &e), "%v", err)
	require.ErrorIs(t, err, ErrInvalid)

	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, Trace: NewTrace(failingWriter{})})
	require.NoError(t, err)
	x, err := d.FromFloat32(1, 4, make([]float32, 4))
	require.NoError(t, err)
	_, err = d.DefaultTask().Mul(x, x)
	require.NoError(t, err)
	require.ErrorIs(t, d.Close(), errWrite)
}

// A trace that cannot be written at Close does not make Close look like
// bad input: the device closed (a later op is ErrClosed, a second Close
// nil), and the error says so and wraps the writer's.
func TestCloseWithFailedTraceWriteClosesTheDevice(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, Trace: NewTrace(failingWriter{})})
	require.NoError(t, err)
	x, err := d.FromFloat32(1, 4, make([]float32, 4))
	require.NoError(t, err)
	_, err = d.DefaultTask().Mul(x, x)
	require.NoError(t, err)
	err = d.Close()
	require.ErrorIs(t, err, errWrite)
	require.NotErrorIs(t, err, ErrInvalid)
	require.NotErrorIs(t, err, ErrTimeout, "ErrTimeout would mean the device stayed open")
	require.ErrorContains(t, err, "trace")
	_, err = d.DefaultTask().Mul(x, x)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, d.Close())
}

var errWrite = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }

// With tracing off, submitting an op, waiting for it and the trace's
// nil-receiver helpers allocate nothing.
func TestTraceOffAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	require.NoError(t, err)
	defer d.Close()
	require.Nil(t, d.trace)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	require.NoError(t, err)
	for i := 0; i < 2000; i++ {
		require.NoError(t, tk.ScaleInto(x, 1, x))
	}
	require.NoError(t, tk.Synchronize())
	// Each op is waited for, so that the emulator's signal pool, which
	// grows (allocating) when more work is in flight than ever before,
	// does not come into it.
	// The first error is kept: an op that fails before it reaches the
	// queue would allocate nothing and pass.
	var firstErr error
	n := testing.AllocsPerRun(500, func() {
		if err := errors.Join(tk.ScaleInto(x, 1, x), tk.Synchronize()); err != nil && firstErr == nil {
			firstErr = err
		}
	})
	require.NoError(t, firstErr)
	require.Zero(t, n, "allocations per op and Synchronize with tracing off")
	var p *traceProc
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = p.opBegin()
		p.waitEnd(p.waitBegin("x", x.st.Writer(), ReasonSync, 0), nil)
		p.drained(tk)
	}))
}

// The debug log and the trace share the sync core's one Observer hook:
// with both on, each hears every decision.
func TestTraceWithDebugLog(t *testing.T) {
	var trace, log bytes.Buffer
	d, err := Open(Options{Backend: Emulator, LogLevel: LogDebug, LogWriter: &log, Trace: NewTrace(&trace), TraceName: "both"})
	require.NoError(t, err)
	traceWork(t, d)
	require.NoError(t, d.Close())
	checkTrace(t, trace.Bytes(), "both", d.Stats())
	st := d.Stats()
	require.EqualValues(t, st.HostWaits[ReasonBoundary], bytes.Count(log.Bytes(), []byte("reason=boundary")), "boundary waits logged")
	require.NotZero(t, st.HostWaits[ReasonBoundary])
}

// Every op of a traced run has device timestamps on its timeline's GPU
// track (HSA dispatch profiling on queues, timing events on HIP and CUDA
// streams): as many GPU slices as dispatches, each after its submission
// began, none overlapping another on its in-order queue or stream, each
// with a flow from its submission. It runs where the suite runs: on the
// emulator by default, on the GPU with ROCSYNC_GPU=1 (ROCSYNC_BACKEND=cuda
// for NVIDIA); ROCSYNC_TRACE_OUT=file keeps the trace.
func TestTraceDeviceTimestamps(t *testing.T) {
	if suiteOn() == onSimulatedDriver {
		t.Skip("TestTraceDeviceTimestampsOnSimulatedDriver runs this on the simulated driver")
	}
	for _, pol := range []Policy{DeviceSide, Unified, DeviceBridge} {
		t.Run(pol.String(), func(t *testing.T) {
			var buf bytes.Buffer
			d := openStrict(t, pol, func(o *Options) { o.Trace, o.TraceName = NewTrace(&buf), "timed" })
			traceWork(t, d)
			require.NoError(t, d.Close())
			st := d.Stats()
			if out := os.Getenv("ROCSYNC_TRACE_OUT"); out != "" {
				require.NoError(t, os.WriteFile(fmt.Sprintf("%s.%s.json", out, pol), buf.Bytes(), 0o600))
			}
			tr, err := tracecheck.Parse(buf.Bytes())
			require.NoError(t, err)
			c := countsOf(st)
			c.GPUSpans = st.Dispatches
			if gpuRun() {
				// Device clocks mapped to the host's: HSA's system clock
				// read once, CUDA's and HIP's float-millisecond elapsed
				// times from a reference event.
				c.ClockSkew = 5
			}
			require.NoError(t, tr.Check("timed", c))
			pid, _ := tr.ProcessByName("timed")
			var gpu, op []float64
			for _, s := range tr.Slices(pid, "gpu") {
				gpu = append(gpu, *s.Dur)
			}
			for _, s := range tr.Slices(pid, "op") {
				op = append(op, *s.Dur)
			}
			sort.Float64s(gpu)
			sort.Float64s(op)
			t.Logf("%d ops; device time per op (µs): median %.3f, max %.3f; execution slices as the host saw them: median %.3f, max %.3f; tracks %v",
				len(gpu), gpu[len(gpu)/2], gpu[len(gpu)-1], op[len(op)/2], op[len(op)-1], tr.TrackNames(pid))
		})
	}
}

// On Debian's real ROCr and HIP 5.2.3 over the simulated driver, whose
// packet processor writes each packet's start and end into its completion
// signal (amd_signal_t start_ts, end_ts) and whose thunk answers
// hsaKmtGetClockCounters: ROCr's hsa_amd_profiling_get_dispatch_time
// gives every dispatch on the HSA queues its device times, HIP's
// hipEventElapsedTime every op on its streams, and the trace draws them as
// it does on the emulator.
func TestTraceDeviceTimestampsOnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		var buf bytes.Buffer
		d, err := Open(Options{Backend: ROCm, Policy: DeviceSide, LogLevel: LogOff, Trace: NewTrace(&buf), TraceName: "timed"})
		require.NoError(t, err)
		traceWork(t, d)
		require.NoError(t, d.Close())
		tr, err := tracecheck.Parse(buf.Bytes())
		require.NoError(t, err)
		pid, _ := tr.ProcessByName("timed")
		ops := map[string]int{}
		for _, s := range tr.Slices(pid, "op") {
			ops[tr.Tracks[s.Track()]]++
		}
		timed := map[string]int{}
		for _, s := range tr.Slices(pid, "gpu") {
			timed[strings.TrimSuffix(tr.Tracks[s.Track()], tracecheck.GPUSuffix)]++
		}
		t.Logf("ops per track %v; ops with device times %v", ops, timed)
		var queues, streams int
		for track, n := range ops {
			require.Equal(t, n, timed[track], "every op on %s has device times", track)
			if strings.Contains(track, "/hsa-q") {
				queues++
			} else {
				streams++
			}
		}
		require.NotZero(t, queues)
		require.NotZero(t, streams)
		c := countsOf(d.Stats()) // every op has device times
		c.ClockSkew = 5
		require.NoError(t, tr.Check("timed", c))
	})
}

// The trace names its GPU tracks as tracecheck reads them.
func TestTraceGPUTrackSuffix(t *testing.T) {
	require.Equal(t, tracecheck.GPUSuffix, gpuTrackSuffix)
}

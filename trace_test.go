package rocsync

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
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
	require.NoError(t, p.Wait(nil))
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
			nop := zerolog.Nop()
			// A run-ahead cap of 2 makes the queues and streams throttle.
			d, err := Open(Options{Backend: Emulator, Policy: pol, Logger: &nop, Trace: NewTrace(&buf), TraceName: "work",
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
		nop := zerolog.Nop()
		d, err := Open(Options{Backend: Emulator, Logger: &nop, Trace: NewTrace(&buf), TraceName: "work", LaunchBlocking: true,
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
	pid, ok := tr.ProcessByName(name)
	require.True(t, ok, "no process %q in %v", name, tr.Processes)

	ops := tr.Slices(pid, "op")
	require.EqualValues(t, st.Dispatches, len(ops), "op slices on device tracks")
	require.EqualValues(t, st.Dispatches, len(tr.Slices(pid, "submit")), "op slices on host tracks")
	used := map[string]bool{}
	for _, o := range ops {
		track := tr.Tracks[o.Track()]
		require.False(t, tr.IsHost(o.Track()), "op %q on a host track", o.Name)
		require.True(t, strings.HasPrefix(o.Arg("fence"), track+"#"), "op at %s drawn on %s", o.Arg("fence"), track)
		used[track] = true
	}
	for _, s := range tr.Slices(pid, "submit") {
		require.True(t, tr.IsHost(s.Track()), "submission of %q off the host tracks", s.Name)
	}
	// Every track is a host track or a timeline an op ran on.
	for _, n := range tr.TrackNames(pid) {
		require.True(t, used[n] || strings.HasPrefix(n, "host"), "track %s holds no op", n)
	}
	require.Contains(t, tr.TrackNames(pid), "host")

	var byReason [len(Stats{}.HostWaits)]uint64
	for _, w := range tr.Slices(pid, "host-wait") {
		require.True(t, tr.IsHost(w.Track()))
		r := w.Arg("reason")
		found := false
		for i := range byReason {
			if Reason(i).String() == r {
				byReason[i]++
				found = true
			}
		}
		require.True(t, found, "unknown reason %q", r)
	}
	require.Equal(t, st.HostWaits, byReason, "host-wait slices by reason")

	// A host wait whose fence names a packet rocsync queued for itself
	// before any op of its timeline (a barrier packet, which takes a
	// ticket) waits for no op: it has no flow, and says so.
	var device, host, noProducer uint64
	for _, w := range tr.Slices(pid, "host-wait") {
		if w.Arg("producer") == "" {
			noProducer++
			require.False(t, covers(w.Arg("fence"), firstOp(tr, pid, w.Arg("fence"))), "a host wait for %s without a producer", w.Arg("fence"))
		}
	}
	for _, f := range tr.Flows {
		require.Equal(t, pid, f.From.PID)
		require.False(t, tr.IsHost(f.From), "a flow from a host track")
		require.Equal(t, "op", f.FromSlice.Cat)
		fence := f.FromSlice.Arg("fence")
		switch f.Name {
		case "device wait":
			device++
			require.False(t, tr.IsHost(f.To))
			require.NotEqual(t, f.From, f.To, "a device wait on the producer's own track")
			waited := false
			for _, w := range strings.Split(f.ToSlice.Arg("device_waits"), ", ") {
				waited = waited || covers(w, fence)
			}
			require.True(t, waited, "the op at %s waited on the device for %s, not for %s", f.ToSlice.Arg("fence"), f.ToSlice.Arg("device_waits"), fence)
		case "host wait":
			host++
			require.True(t, tr.IsHost(f.To))
			require.Equal(t, "host-wait", f.ToSlice.Cat)
			require.True(t, covers(f.ToSlice.Arg("fence"), fence), "a host wait for %s drawn from %s", f.ToSlice.Arg("fence"), fence)
			require.Equal(t, fence, f.ToSlice.Arg("producer"))
		default:
			t.Fatalf("unknown flow %q", f.Name)
		}
	}
	require.Equal(t, st.DeviceWaits, device, "device-wait flows")
	require.Equal(t, st.HostWaitsTotal(), host+noProducer, "host-wait flows")
}

// firstOp is the fence of the first op on the timeline of fence f.
func firstOp(tr *tracecheck.Trace, pid int, f string) string {
	tl := f[:strings.LastIndexByte(f, '#')]
	first, best := "", uint64(0)
	for _, o := range tr.Slices(pid, "op") {
		of := o.Arg("fence")
		i := strings.LastIndexByte(of, '#')
		n, _ := strconv.ParseUint(of[i+1:], 10, 64)
		if of[:i] == tl && (first == "" || n < best) {
			first, best = of, n
		}
	}
	return first
}

// covers reports whether waiting for fence w (timeline#ticket) waits for
// the op at fence op: the same timeline, and w's ticket at or after op's
// (a fence may name a barrier or marker packet after the op).
func covers(w, op string) bool {
	wi, oi := strings.LastIndexByte(w, '#'), strings.LastIndexByte(op, '#')
	if wi < 0 || oi < 0 || w[:wi] != op[:oi] {
		return false
	}
	wt, err1 := strconv.ParseUint(w[wi+1:], 10, 64)
	ot, err2 := strconv.ParseUint(op[oi+1:], 10, 64)
	return err1 == nil && err2 == nil && ot <= wt
}

// ROCSYNC_TRACE=file traces without an option, into a file written
// atomically with mode 0600 when the device closes.
func TestTraceEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	t.Setenv("ROCSYNC_TRACE", path)
	nop := zerolog.Nop()
	d, err := Open(Options{Backend: Emulator, Logger: &nop})
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

	nop := zerolog.Nop()
	d, err := Open(Options{Backend: Emulator, Logger: &nop, Trace: NewTrace(failingWriter{})})
	require.NoError(t, err)
	x, err := d.FromFloat32(1, 4, make([]float32, 4))
	require.NoError(t, err)
	_, err = d.DefaultTask().Mul(x, x)
	require.NoError(t, err)
	require.ErrorIs(t, d.Close(), errWrite)
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
	nop := zerolog.Nop()
	d, err := Open(Options{Backend: Emulator, Logger: &nop})
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
	n := testing.AllocsPerRun(500, func() {
		_ = tk.ScaleInto(x, 1, x)
		_ = tk.Synchronize()
	})
	require.Zero(t, n, "allocations per op and Synchronize with tracing off")
	var p *traceProc
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = p.opBegin()
		p.waitEnd(p.waitBegin("x", x.st.Writer(), ReasonSync, 0), nil)
		p.drained(tk)
	}))
}

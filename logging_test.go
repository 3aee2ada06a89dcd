package rocsync

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
)

// mixedProgram runs a kernel, a gemm reading it (a boundary crossing), a
// kernel on a second task reading the gemm's output, and a read-back.
func mixedProgram(t *testing.T, d *Device) {
	t.Helper()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	sq, err := tk.Mul(x, x)
	require.NoError(t, err)
	y, err := tk.MatMul(sq, x, false, false)
	require.NoError(t, err)
	other, err := d.NewTask()
	require.NoError(t, err)
	z, err := other.Add(y, y)
	require.NoError(t, err)
	_, err = z.Float32s()
	require.NoError(t, err)
	require.NoError(t, other.Close())
}

// By default Open logs nothing: no line per Open, none for the Auto
// fallback to the emulator; warnings would still print.
func TestDefaultLoggingIsQuiet(t *testing.T) {
	t.Setenv("ROCSYNC_LOG", "")
	for _, b := range []Backend{Auto, Emulator} {
		var buf bytes.Buffer
		d, err := Open(Options{Backend: b, LogWriter: &buf})
		require.NoError(t, err)
		mixedProgram(t, d)
		require.NoError(t, d.Close())
		require.Empty(t, buf.String(), "%v", b)
	}
}

// At info level the Auto fallback is one plain line: no AMD GPU, the
// emulator is in use; the runtime's own words (HSA_STATUS_ERROR_OUT_OF_
// RESOURCES, /dev/kfd) only at debug level.
func TestAutoFallbackIsOneLine(t *testing.T) {
	t.Setenv("ROCSYNC_LOG", "")
	t.Setenv(cuda.EnvLibCUDA, "/nonexistent/libcuda.so.1") // no NVIDIA driver either
	var buf bytes.Buffer
	d, err := Open(Options{LogLevel: LogInfo, LogWriter: &buf})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	if !d.Emulated() {
		t.Skip("ROCm works here: no fallback")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, buf.String())
	require.Regexp(t, `(no AMD GPU found|ROCm is not installed), using the emulated AMD device`, lines[0])
	require.NotContains(t, lines[0], "OUT_OF_RESOURCES")
	require.NotContains(t, lines[0], "ERR")

	buf.Reset()
	d, err = Open(Options{LogLevel: LogDebug, LogWriter: &buf})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	first := strings.SplitN(buf.String(), "\n", 2)[0]
	require.Contains(t, first, "using the emulated AMD device")
	require.Contains(t, first, "reason=", "the technical reason, at debug level")
}

// At debug level every sync decision is logged with its op, its queue or
// stream and the fence; each kind appears in a program that has them.
func TestDebugLogsSyncDecisions(t *testing.T) {
	var buf syncBuffer
	d, err := Open(Options{Backend: Emulator, LogLevel: LogDebug, LogWriter: &buf})
	require.NoError(t, err)
	tk := d.DefaultTask()
	other, err := d.NewTask()
	require.NoError(t, err)
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	release := d.machine().Hold() // the kernels stay pending
	sq, err := tk.Mul(x, x)
	require.NoError(t, err)
	require.NoError(t, tk.MulInto(sq, sq, x)) // same queue: skipped
	z, err := other.Add(sq, sq)               // another HSA queue: a device wait
	require.NoError(t, err)
	go func() { time.Sleep(20 * time.Millisecond); release() }()
	y, err := tk.MatMul(z, x, false, false) // HSA→HIP: a boundary host wait, z still pending
	require.NoError(t, err)
	releaseLater := func() { // work stays pending until the host waits for it
		release := d.machine().Hold()
		go func() { time.Sleep(20 * time.Millisecond); release() }()
	}
	releaseLater()
	require.NoError(t, tk.Synchronize())
	releaseLater()
	require.NoError(t, other.AddInto(z, y, y)) // y complete: skipped
	_, err = z.Float32s()
	require.NoError(t, err)
	require.NoError(t, other.Close())
	st := d.Stats()
	require.NoError(t, d.Close())
	out := buf.String()
	for _, want := range []string{
		"rocsync: skip (same timeline) after=gpu0/hsa-q0 on=gpu0/hsa-q0 op=Mul ticket=1",
		"rocsync: device wait after=gpu0/hsa-q0 on=gpu0/hsa-q1 op=Add ticket=2",
		"rocsync: host wait after=gpu0/hsa-q1 on=gpu0/hip-s1 op=MatMul reason=boundary ticket=2",
		"rocsync: skip (complete) after=gpu0/hip-s1 on=gpu0/hsa-q1 op=Add ticket=1",
		"op=Float32s reason=read-back",
		"op=Synchronize reason=sync",
	} {
		require.Contains(t, out, want)
	}
	// One line per counted decision.
	require.EqualValues(t, st.DeviceWaits, strings.Count(out, "rocsync: device wait"), out)
	require.EqualValues(t, st.SkippedWaits, strings.Count(out, "rocsync: skip"), out)
	require.EqualValues(t, st.HostWaitsTotal(), strings.Count(out, "rocsync: host wait"), out)
}

// A slog.Handler receives the logs as records: message, level and fields
// as attributes; its Enabled chooses the level.
func TestLogHandler(t *testing.T) {
	var buf syncBuffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	d, err := Open(Options{Backend: Emulator, LogHandler: h})
	require.NoError(t, err)
	mixedProgram(t, d)
	require.NoError(t, d.Close())
	out := buf.String()
	require.Contains(t, out, `"level":"INFO","msg":"rocsync: using the emulated AMD device, as requested","backend":"emulator"`)
	// The gemm's decision about the kernel depends on whether it finished
	// first; either way it is one record, fields in name order, numbers
	// as numbers.
	require.Regexp(t, `"level":"DEBUG","msg":"rocsync: (host wait|skip \(complete\))","after":"gpu0/hsa-q0","on":"gpu0/hip-s1","op":"MatMul",("reason":"boundary",)?"ticket":1}`, out)

	buf.Reset()
	h = slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})
	d, err = Open(Options{Backend: Emulator, LogHandler: h})
	require.NoError(t, err)
	require.True(t, d.obs == nil || d.obs.log == nil, "a handler that drops debug records turns decision logging off")
	mixedProgram(t, d)
	require.NoError(t, d.Close())
	require.Empty(t, buf.String())
}

// ROCSYNC_LOG sets the level from the environment; a bad value is an
// ErrInvalid error from Open.
func TestLogLevelFromEnvironment(t *testing.T) {
	var buf bytes.Buffer
	t.Setenv("ROCSYNC_LOG", "info")
	d, err := Open(Options{Backend: Emulator, LogWriter: &buf})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.Contains(t, buf.String(), "using the emulated AMD device")
	t.Setenv("ROCSYNC_LOG", "chatty")
	_, err = Open(Options{Backend: Emulator, LogWriter: io.Discard})
	require.ErrorIs(t, err, ErrInvalid)
	require.EqualError(t, err, `rocsync: Open: invalid argument: ROCSYNC_LOG="chatty" is not a log level (want off, error, warn, info or debug)`)
	// Any case, as log/slog spells its levels, and spaces around.
	for _, v := range []string{"DEBUG", " Debug "} {
		t.Setenv("ROCSYNC_LOG", v)
		buf.Reset()
		d, err = Open(Options{Backend: Emulator, LogWriter: &buf})
		require.NoError(t, err, v)
		require.NoError(t, d.Close())
		require.Contains(t, buf.String(), "using the emulated AMD device", v)
		l, err := ParseLogLevel(v)
		require.NoError(t, err)
		require.Equal(t, LogDebug, l)
	}
	t.Setenv("ROCSYNC_LOG", "")
	_, err = Open(Options{Backend: Emulator, LogLevel: 42})
	require.ErrorIs(t, err, ErrInvalid)
}

// With logging at its default level the submission path allocates
// nothing: the decision logger is not even installed. At debug level it
// is, and costs what zerolog costs.
func TestHotPathAllocationFreeWithLoggingOff(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, level := range []LogLevel{LogWarn, LogOff} {
		// A small ring and run-ahead cap: the signal pool, which grows
		// (allocating) whenever more work is in flight than ever before,
		// reaches its bound during the warm-up, whatever the host's lead.
		d, err := Open(Options{Backend: Emulator, LogLevel: level, LogWriter: io.Discard, QueueSize: 64, MaxInFlight: 32})
		require.NoError(t, err)
		require.Nil(t, d.engine.Observer)
		t1, err := d.NewTask()
		require.NoError(t, err)
		t2, err := d.NewTask()
		require.NoError(t, err)
		x, err := d.FromFloat32(1, 64, make([]float32, 64))
		require.NoError(t, err)
		tasks := [2]*Task{t1, t2}
		i := 0
		run := func() { // a skip and a device wait, alternately
			_ = tasks[(i/2)&1].ScaleInto(x, 1, x)
			i++
		}
		for range 20000 {
			run()
		}
		require.NoError(t, d.Synchronize())
		require.Zero(t, testing.AllocsPerRun(1000, run), "%v", level)
		require.NoError(t, d.Close())
	}
}

// syncBuffer is a bytes.Buffer safe for the emulator's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

var _ = context.Background

// envAutoChild makes a child of TestAutoPicksCUDAAfterROCm open Auto and
// print the backend it got.
const envAutoChild = "ROCSYNC_AUTO_TEST_CHILD"

// Auto tries ROCm, then CUDA, then the emulator: with no AMD GPU and an
// NVIDIA driver that works (the fake libcuda's two GPUs), it opens CUDA
// and says so at info level; with a driver that is not there, it falls
// back to the emulator in one quiet line; with one that fails to start,
// it warns with the reason. The fake library is loaded in children only,
// so no other test of this process sees it.
func TestAutoPicksCUDAAfterROCm(t *testing.T) {
	if os.Getenv(envAutoChild) == "1" {
		var buf bytes.Buffer
		d, err := Open(Options{LogLevel: LogInfo, LogWriter: &buf})
		if err != nil {
			fmt.Printf("auto: open failed: %v\n", err)
			return
		}
		fmt.Printf("auto: backend=%s\n%s", d.Backend(), buf.String())
		require.NoError(t, d.Close())
		return
	}
	if gpuRun() {
		t.Skip("running on the hardware suite")
	}
	p := buildFakeCUDA(t)
	run := func(libcuda string, extra ...string) string {
		env := append(os.Environ(), envAutoChild+"=1", "ROCSYNC_LOG=", cuda.EnvLibCUDA+"="+libcuda, cublas.EnvLibCUBLAS+"="+p.CUBLAS)
		cmd := exec.Command(os.Args[0], "-test.run=^TestAutoPicksCUDAAfterROCm$", "-test.count=1")
		cmd.Env = append(env, extra...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child:\n%s", out)
		return string(out)
	}
	out := run(p.CUDA)
	if strings.Contains(out, "backend=rocm") {
		t.Skip("ROCm works here: Auto takes it first")
	}
	require.Contains(t, out, "auto: backend=cuda", out)
	require.Contains(t, out, "using the CUDA driver and cuBLAS", out)

	out = run("/nonexistent/libcuda.so.1")
	require.Contains(t, out, "auto: backend=emulator", out)
	require.Regexp(t, `(no AMD GPU found|ROCm is not installed), using the emulated AMD device`, out)
	require.NotContains(t, out, "WRN", "no NVIDIA driver is the ordinary case")

	out = run("libc.so.6") // a library that is no CUDA driver: it fails to start
	require.Contains(t, out, "auto: backend=emulator", out)
	require.Contains(t, out, "the CUDA driver failed to start", out)
}

// jsonLog is a handler that writes every event at level or above into w as
// one JSON line, its fields as they are.
func jsonLog(w io.Writer, level slog.Level) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
}

// The debug log names every host wait the stats count, those made outside
// the sync core's decisions included: launch-blocking's wait after each
// op, like a read-back's.
func TestLogDebugNamesLaunchBlockingWaits(t *testing.T) {
	var buf syncBuffer
	d, err := Open(Options{Backend: Emulator, LogLevel: LogDebug, LogWriter: &buf, LaunchBlocking: true})
	require.NoError(t, err)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	sq, err := tk.Mul(x, x)
	require.NoError(t, err)
	_, err = tk.MatMul(sq, x, false, false)
	require.NoError(t, err)
	st := d.Stats()
	require.NoError(t, d.Close())
	out := buf.String()
	require.NotZero(t, st.HostWaits[ReasonLaunchBlocking])
	require.Contains(t, out, "op=Mul reason=launch-blocking")
	require.Contains(t, out, "op=MatMul reason=launch-blocking")
	require.EqualValues(t, st.HostWaitsTotal(), strings.Count(out, "rocsync: host wait"), out)
}

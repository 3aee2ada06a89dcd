package emu

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/rocblas"
)

// graphRig is a HIP stream with the fill kernel, a rocBLAS handle and a
// few buffers.
type graphRig struct {
	m    *Machine
	hp   *HIP
	b    *BLAS
	s    hip.Stream
	blas rocblas.Handle
	fill hip.Function
}

func newGraphRig(t *testing.T, o Options) *graphRig {
	t.Helper()
	m := New(o)
	require.NoError(t, m.HSA().Init())
	r := &graphRig{m: m, hp: m.HIP(), b: m.BLAS()}
	v := kernels.DefaultCodeObjectVersion
	if m.hipVersion() < 60_000_000 {
		v = kernels.CodeObjectV4 // HIP 5 loads code object v4
	}
	code, err := kernels.CodeObjectFor(m.Options().ISA, v)
	require.NoError(t, err)
	mod, err := r.hp.ModuleLoadData(0, code)
	require.NoError(t, err)
	r.fill, err = r.hp.ModuleGetFunction(mod, kernels.Fill.KernelName(kernels.F32))
	require.NoError(t, err)
	r.s, err = r.hp.StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	r.blas, err = r.b.CreateHandle(0)
	require.NoError(t, err)
	require.NoError(t, r.b.SetStream(r.blas, r.s))
	return r
}

// fillLaunch launches fill(out[0:n] = v) on s.
func (r *graphRig) fillLaunch(t *testing.T, s hip.Stream, out hip.DevicePtr, n uint32, v float64) {
	t.Helper()
	var args [kernels.KernargSize]byte
	ka := kernels.Args{Out: uint64(out), N: uint64(n), Alpha: v}
	ka.Encode(args[:], kernels.F32)
	require.NoError(t, r.hp.ModuleLaunchKernel(r.fill, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, s, args[:]))
}

func (r *graphRig) read(t *testing.T, p hip.DevicePtr, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	require.NoError(t, r.hp.MemcpyDtoH(0, unsafe.Pointer(&out[0]), p, uint64(4*n)))
	return out
}

// A capture records a kernel, a rocBLAS gemm and a copy instead of running
// them; each launch of the instantiated graph runs them in order as one
// stream command, seen by the hazard checker.
func TestGraphCaptureRecordsAndLaunchReplays(t *testing.T) {
	r := newGraphRig(t, Options{Hazards: true, MaxDelay: 30 * time.Microsecond, Seed: 7})
	hp := r.hp
	a, _ := hp.Malloc(0, 16)
	c, _ := hp.Malloc(0, 16)
	d, _ := hp.Malloc(0, 16)
	require.NoError(t, hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
	st, err := hp.StreamIsCapturing(r.s)
	require.NoError(t, err)
	require.Equal(t, hip.StreamCaptureStatusActive, st)
	r.fillLaunch(t, r.s, a, 4, 2) // a = 2 (2x2, column-major)
	require.NoError(t, r.b.Sgemm(r.blas, rocblas.OperationNone, rocblas.OperationNone, 2, 2, 2, 1, a, 2, a, 2, 0, c, 2))
	require.NoError(t, hp.MemcpyDtoDAsync(d, c, 16, r.s))
	g, err := hp.StreamEndCapture(r.s)
	require.NoError(t, err)
	st, err = hp.StreamIsCapturing(r.s)
	require.NoError(t, err)
	require.Equal(t, hip.StreamCaptureStatusNone, st)
	require.Equal(t, []float32{0, 0, 0, 0}, r.read(t, d, 4), "captured work must not run")
	e, err := hp.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, hp.GraphDestroy(g))
	for range 3 {
		require.NoError(t, hp.GraphLaunch(e, r.s))
	}
	require.NoError(t, hp.StreamSynchronize(r.s))
	require.Equal(t, []float32{8, 8, 8, 8}, r.read(t, d, 4))
	require.EqualValues(t, 3, hp.GraphLaunches())
	require.Empty(t, r.m.Hazards())
	require.NoError(t, hp.GraphExecDestroy(e))
	require.Zero(t, hp.LiveGraphs())
	require.ErrorIs(t, hp.GraphLaunch(e, r.s), &hip.Error{Code: hip.ErrorInvalidValue})
	require.ErrorIs(t, hp.GraphExecDestroy(e), &hip.Error{Code: hip.ErrorInvalidValue})
}

// The hazard checker sees a graph's accesses: a launch on one stream and
// a copy on another stream, not ordered after it, race.
func TestGraphLaunchAccessesAreChecked(t *testing.T) {
	r := newGraphRig(t, Options{Hazards: true})
	hp := r.hp
	a, _ := hp.Malloc(0, 256)
	b, _ := hp.Malloc(0, 256)
	require.NoError(t, hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
	r.fillLaunch(t, r.s, a, 64, 1)
	g, err := hp.StreamEndCapture(r.s)
	require.NoError(t, err)
	e, err := hp.GraphInstantiate(g)
	require.NoError(t, err)
	s2, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, hp.GraphLaunch(e, r.s))
	// Wait for the launch to end without the host learning of it (no
	// hipStreamSynchronize): Go's race detector sees the order, the
	// emulated GPU's clocks do not.
	st, err := hp.stream("test", r.s)
	require.NoError(t, err)
	st.mu.Lock()
	for st.ran < st.queued {
		st.cond.Wait()
	}
	st.mu.Unlock()
	require.NoError(t, hp.MemcpyDtoDAsync(b, a, 256, s2))
	require.NoError(t, hp.StreamSynchronize(r.s))
	require.NoError(t, hp.StreamSynchronize(s2))
	hz := r.m.Hazards()
	require.NotEmpty(t, hz, "an unordered reader of the graph's output must be a race")
}

// Each rule HIP enforces on capture fires.
func TestGraphCaptureRules(t *testing.T) {
	t.Run("sync and query of a capturing stream", func(t *testing.T) {
		r := newGraphRig(t, Options{})
		require.NoError(t, r.hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
		require.ErrorIs(t, r.hp.StreamSynchronize(r.s), &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		require.ErrorIs(t, r.hp.StreamQuery(r.s), &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		other, _ := r.hp.StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, r.hp.StreamSynchronize(other), "a relaxed capture leaves other streams alone")
		p, err := r.hp.Malloc(0, 16)
		require.NoError(t, err, "hipMalloc is allowed during a relaxed capture")
		_, err = r.hp.StreamEndCapture(r.s)
		require.NoError(t, err)
		require.NoError(t, r.hp.Free(0, p))
	})
	t.Run("HIP 5.2 syncs a capturing stream", func(t *testing.T) {
		r := newGraphRig(t, Options{HIPVersion: 50_221_153})
		require.NoError(t, r.hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
		require.NoError(t, r.hp.StreamSynchronize(r.s))
		require.NoError(t, r.hp.StreamQuery(r.s))
		_, err := r.hp.StreamEndCapture(r.s)
		require.NoError(t, err)
	})
	t.Run("global capture forbids unsafe calls everywhere", func(t *testing.T) {
		r := newGraphRig(t, Options{})
		other, _ := r.hp.StreamCreate(0, hip.StreamNonBlocking)
		keep, _ := r.hp.Malloc(0, 16)
		require.NoError(t, r.hp.StreamBeginCapture(r.s, hip.StreamCaptureModeGlobal))
		_, err := r.hp.Malloc(0, 16)
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		require.ErrorIs(t, r.hp.Free(0, keep), &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		_, err = r.hp.HostMalloc(16)
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		var x [4]float32
		require.ErrorIs(t, r.hp.MemcpyHtoD(0, keep, unsafe.Pointer(&x[0]), 16), &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		require.ErrorIs(t, r.hp.StreamSynchronize(other), &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		_, err = r.hp.StreamEndCapture(r.s)
		require.NoError(t, err)
		require.NoError(t, r.hp.Free(0, keep), "allowed again once the capture ended")
	})
	t.Run("begin and end", func(t *testing.T) {
		r := newGraphRig(t, Options{})
		require.ErrorIs(t, r.hp.StreamBeginCapture(0, hip.StreamCaptureModeRelaxed), &hip.Error{Code: hip.ErrorStreamCaptureUnsupported})
		require.ErrorIs(t, r.hp.StreamBeginCapture(r.s, 3), &hip.Error{Code: hip.ErrorInvalidValue})
		_, err := r.hp.StreamEndCapture(r.s)
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorStreamCaptureUnmatched})
		require.NoError(t, r.hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
		require.ErrorIs(t, r.hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed), &hip.Error{Code: hip.ErrorIllegalState})
		_, err = r.hp.GraphInstantiate(12345)
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidValue})
	})
	t.Run("events: captured records, a joining stream, isolation", func(t *testing.T) {
		r := newGraphRig(t, Options{Hazards: true})
		hp := r.hp
		a, _ := hp.Malloc(0, 256)
		b, _ := hp.Malloc(0, 256)
		fork, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
		ev, _ := hp.EventCreate(0, hip.EventDisableTiming)
		require.NoError(t, hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
		r.fillLaunch(t, r.s, a, 64, 3)
		require.NoError(t, hp.EventRecord(ev, r.s))
		require.NoError(t, hp.StreamWaitEvent(fork, ev)) // fork joins the capture
		st, _ := hp.StreamIsCapturing(fork)
		require.Equal(t, hip.StreamCaptureStatusActive, st)
		require.NoError(t, hp.MemcpyDtoDAsync(b, a, 256, fork))
		other, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, hp.StreamBeginCapture(other, hip.StreamCaptureModeRelaxed))
		require.ErrorIs(t, hp.StreamWaitEvent(other, ev), &hip.Error{Code: hip.ErrorStreamCaptureIsolation})
		_, err := hp.StreamEndCapture(other)
		require.NoError(t, err)
		g, err := hp.StreamEndCapture(r.s)
		require.NoError(t, err)
		st, _ = hp.StreamIsCapturing(fork)
		require.Equal(t, hip.StreamCaptureStatusNone, st, "the end of the capture releases the joined stream")
		require.Equal(t, make([]float32, 64), r.read(t, b, 64))
		e, err := hp.GraphInstantiate(g)
		require.NoError(t, err)
		require.NoError(t, hp.GraphLaunch(e, r.s))
		require.NoError(t, hp.StreamSynchronize(r.s))
		got := r.read(t, b, 64)
		require.Equal(t, float32(3), got[0])
		require.Equal(t, float32(3), got[63])
		require.Empty(t, r.m.Hazards())
	})
	t.Run("HIP 5.2 runs module launches at capture", func(t *testing.T) {
		r := newGraphRig(t, Options{HIPVersion: 50_221_153})
		a, _ := r.hp.Malloc(0, 16)
		require.NoError(t, r.hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
		r.fillLaunch(t, r.s, a, 4, 5)
		g, err := r.hp.StreamEndCapture(r.s)
		require.NoError(t, err)
		require.NoError(t, r.hp.StreamSynchronize(r.s))
		require.Equal(t, []float32{5, 5, 5, 5}, r.read(t, a, 4), "HIP 5.2 launched it on the stream")
		r.hp.mu.Lock()
		nodes := len(r.hp.graphs.graphs[g].nodes)
		r.hp.mu.Unlock()
		require.Zero(t, nodes, "and the graph lacks it")
	})
	t.Run("launch of a graph whose memory was freed faults", func(t *testing.T) {
		r := newGraphRig(t, Options{Hazards: true})
		a, _ := r.hp.Malloc(0, 16)
		require.NoError(t, r.hp.StreamBeginCapture(r.s, hip.StreamCaptureModeRelaxed))
		r.fillLaunch(t, r.s, a, 4, 1)
		g, err := r.hp.StreamEndCapture(r.s)
		require.NoError(t, err)
		e, err := r.hp.GraphInstantiate(g)
		require.NoError(t, err)
		require.NoError(t, r.hp.Free(0, a))
		require.NoError(t, r.hp.GraphLaunch(e, r.s), "HIP does not look at the memory at launch")
		// The kernel faults when it runs, as an eager launch on freed
		// memory does in the emulator; the stream carries the error.
		err = r.hp.StreamSynchronize(r.s)
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorLaunchFailure})
		require.ErrorContains(t, err, "was freed")
	})
	t.Run("destroying the capturing stream ends the capture", func(t *testing.T) {
		r := newGraphRig(t, Options{})
		s, _ := r.hp.StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, r.hp.StreamBeginCapture(s, hip.StreamCaptureModeGlobal))
		require.NoError(t, r.hp.StreamDestroy(s))
		_, err := r.hp.Malloc(0, 16)
		require.NoError(t, err)
	})
}

package cuda

import (
	"errors"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/kernels"
)

func TestOpenMissingDriver(t *testing.T) {
	t.Setenv(EnvLibCUDA, "/nonexistent/libcuda.so.1")
	_, err := Open()
	if err == nil {
		t.Fatal("Open succeeded with a missing library")
	}
	if !errors.Is(err, ErrNoDriver) || !errors.Is(err, dl.ErrNotFound) {
		t.Fatalf("error does not match ErrNoDriver and dl.ErrNotFound: %v", err)
	}
	for _, want := range []string{"libcuda.so.1", EnvLibCUDA, "/nonexistent/libcuda.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// Without the override, a machine with no NVIDIA driver gets the same
// clear error, naming every directory searched.
func TestOpenDefaultSearch(t *testing.T) {
	os.Unsetenv(EnvLibCUDA)
	l, err := Open()
	if err == nil {
		t.Skipf("an NVIDIA driver is installed here (%s)", l.Path())
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("want ErrNoDriver, got %v", err)
	}
	for _, d := range SearchDirs {
		if !strings.Contains(err.Error(), d) {
			t.Errorf("error %q does not list %s", err, d)
		}
	}
	t.Log(err)
}

func TestOpenNotADriver(t *testing.T) {
	t.Setenv(EnvLibCUDA, "libc.so.6")
	_, err := Open()
	var ms *dl.MissingSymbolsError
	if !errors.As(err, &ms) || len(ms.Missing) != len(BoundSymbols) {
		t.Fatalf("want a MissingSymbolsError listing every symbol, got %v", err)
	}
}

func TestFakeDevice(t *testing.T) {
	l := fakeLib(t)
	n, err := l.DeviceCount()
	if err != nil || n != 2 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	d, err := l.DeviceGet(1)
	if err != nil || d != 1 {
		t.Fatalf("DeviceGet(1) = %d, %v", d, err)
	}
	name, err := l.DeviceName(d)
	if err != nil || name != "Fake NVIDIA GPU 1" {
		t.Fatalf("DeviceName = %q, %v", name, err)
	}
	ma, mi, err := l.ComputeCapability(0)
	if err != nil || ma != 9 || mi != 0 {
		t.Fatalf("ComputeCapability(0) = %d.%d, %v", ma, mi, err)
	}
	v, err := l.DriverVersion()
	if err != nil || v != 13000 {
		t.Fatalf("DriverVersion = %d, %v", v, err)
	}
	if _, err := l.DeviceGet(7); !errors.Is(err, &Error{Code: ErrorInvalidDevice}) {
		t.Fatalf("DeviceGet(7): %v", err)
	}
}

// onBareThread runs f on a locked OS thread with no current context.
func onBareThread(t *testing.T, l *Lib, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := l.CtxSetCurrent(0); err != nil {
			t.Error(err)
			return
		}
		f()
	}()
	<-done
}

func TestFakeContextIsPerThread(t *testing.T) {
	for _, check := range []bool{false, true} {
		checkCurrent = check
		testContextIsPerThread(t)
	}
	checkCurrent = true
}

func testContextIsPerThread(t *testing.T) {
	l := fakeLib(t)
	c := fakeCtx(t, l, 0)
	// The raw call on a thread with no context fails, as the real driver
	// does (cuda-h100.md): the fake is strict enough for the test below
	// to mean something.
	onBareThread(t, l, func() {
		cur, err := l.CtxGetCurrent()
		if err != nil || cur != 0 {
			t.Errorf("CtxGetCurrent = %#x, %v", cur, err)
		}
		_, err = l.MemAlloc(64)
		var ce *Error
		if !errors.As(err, &ce) || ce.Code != ErrorInvalidContext || ce.Func != "cuMemAlloc_v2" ||
			ce.Name != "CUDA_ERROR_INVALID_CONTEXT" || ce.Text != "invalid device context" {
			t.Errorf("raw MemAlloc without a context: %#v", err)
		}
	})
	// Every Ctx call works from any goroutine on any thread, including
	// threads whose current context was cleared.
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if err := l.CtxSetCurrent(0); err != nil {
				t.Error(err)
			}
			runtime.UnlockOSThread()
			for i := 0; i < 50; i++ {
				s, err := c.StreamCreate(StreamNonBlocking)
				if err != nil {
					t.Error(err)
					return
				}
				e, err := c.EventCreate(EventDisableTiming)
				if err != nil {
					t.Error(err)
					return
				}
				p, err := c.MemAlloc(16)
				if err != nil {
					t.Error(err)
					return
				}
				runtime.Gosched()
				src := []uint32{uint32(i), 7, 8, 9}
				dst := make([]uint32, 4)
				errs := []error{
					c.MemcpyHtoD(p, unsafe.Pointer(&src[0]), 16),
					c.EventRecord(e, s), c.StreamWaitEvent(s, e), c.EventQuery(e),
					c.EventSynchronize(e), c.StreamQuery(s), c.StreamSynchronize(s),
					c.MemcpyDtoH(unsafe.Pointer(&dst[0]), p, 16),
					c.MemFree(p), c.EventDestroy(e), c.StreamDestroy(s),
				}
				if err := errors.Join(errs...); err != nil {
					t.Error(err)
					return
				}
				if dst[0] != uint32(i) || dst[3] != 9 {
					t.Errorf("copy round trip: %v", dst)
				}
			}
		}()
	}
	wg.Wait()
}

func TestFakeErrorsAreCached(t *testing.T) {
	l := fakeLib(t)
	c := fakeCtx(t, l, 0)
	e1 := c.EventQuery(0)
	e2 := c.EventQuery(0)
	if e1 == nil || e1 != e2 {
		t.Fatalf("errors not cached: %v %v", e1, e2)
	}
	if got := e1.Error(); got != "cuda: cuEventQuery: error 400 CUDA_ERROR_INVALID_HANDLE: invalid resource handle" {
		t.Fatalf("message %q", got)
	}
	if !errors.Is(e1, &Error{Code: ErrorInvalidHandle, Func: "cuEventQuery"}) || errors.Is(e1, &Error{Code: ErrorInvalidHandle, Func: "cuEventRecord"}) {
		t.Fatal("Is does not match code and function")
	}
	if l.ErrorName(12345) != "" {
		t.Fatal("an unknown code has a name")
	}
}

func TestFakeModuleAndLaunch(t *testing.T) {
	l := fakeLib(t)
	c := fakeCtx(t, l, 0)
	ptx, err := kernels.PTX("sm_90")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.ModuleLoadData(ptx)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range kernels.AllOps() {
		for _, dt := range kernels.AllDTypes() {
			if _, err := c.ModuleGetFunction(m, op.KernelName(dt)); err != nil {
				t.Fatalf("%s: %v", op.KernelName(dt), err)
			}
		}
	}
	if _, err := c.ModuleGetFunction(m, "rocsync_nope_f32"); !errors.Is(err, &Error{Code: ErrorNotFound}) {
		t.Fatalf("missing kernel: %v", err)
	}
	f, err := c.ModuleGetFunction(m, kernels.AXPY.KernelName(kernels.F32))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	a, b, out := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i)*0.25, float32(n-i)
	}
	dp := make([]DevicePtr, 3)
	for i := range dp {
		if dp[i], err = c.MemAlloc(4 * n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.MemcpyHtoD(dp[1], unsafe.Pointer(&a[0]), 4*n); err != nil {
		t.Fatal(err)
	}
	if err := c.MemcpyHtoD(dp[2], unsafe.Pointer(&b[0]), 4*n); err != nil {
		t.Fatal(err)
	}
	offs := make([]int, len(kernels.Layout))
	for i, s := range kernels.Layout {
		offs[i] = int(s.Offset)
	}
	pb, err := NewParamBlock(kernels.KernargSize, offs)
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Free()
	args := kernels.Args{Out: uint64(dp[0]), A: uint64(dp[1]), B: uint64(dp[2]), Alpha: 1.5, N: n}
	args.Encode(pb.Bytes(), kernels.F32)
	if err := c.LaunchKernel(f, Dim3{4, 1, 1}, Dim3{256, 1, 1}, 0, s, pb.Params()); err != nil {
		t.Fatal(err)
	}
	if err := c.MemcpyDtoH(unsafe.Pointer(&out[0]), dp[0], 4*n); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	kernels.RefF32(kernels.AXPY, want, a, b, 1.5)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(out[i]) {
			t.Fatalf("element %d: %g, want %g", i, out[i], want[i])
		}
	}
	// What the fake saw.
	type launch struct {
		grid, block  [3]uint32
		shared       uint32
		stream       uintptr
		out, a, b, n uint64
		alpha        float64
		name         [64]byte
	}
	var got launch
	fn, err := purego.Dlsym(l.handle, "fakecuda_last_launch")
	if err != nil {
		t.Fatal(err)
	}
	purego.SyscallN(fn, uintptr(unsafe.Pointer(&got)))
	if got.grid != [3]uint32{4, 1, 1} || got.block != [3]uint32{256, 1, 1} || got.stream != uintptr(s) ||
		got.out != uint64(dp[0]) || got.a != uint64(dp[1]) || got.b != uint64(dp[2]) || got.n != n || got.alpha != 1.5 {
		t.Fatalf("launch seen by the driver: %+v", got)
	}
	// Without the kernelParams the fake refuses the launch.
	if err := c.LaunchKernel(f, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, s, 0); !errors.Is(err, &Error{Code: ErrorInvalidValue}) {
		t.Fatalf("launch without params: %v", err)
	}
	for _, p := range dp {
		if err := c.MemFree(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(c.StreamDestroy(s), c.ModuleUnload(m)); err != nil {
		t.Fatal(err)
	}
}

func TestParamBlockLayout(t *testing.T) {
	pb, err := NewParamBlock(40, []int{0, 8, 16, 24, 32})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Free()
	base := uintptr(unsafe.Pointer(&pb.Bytes()[0]))
	for i, p := range pb.Pointers() {
		if p != base+uintptr(8*i) {
			t.Fatalf("pointer %d is %#x, want %#x", i, p, base+uintptr(8*i))
		}
	}
	if _, err := NewParamBlock(40, []int{40}); err == nil {
		t.Fatal("an offset outside the buffer was accepted")
	}
}

// The calls a dispatch loop makes allocate nothing.
func TestFakeHotPathsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l := fakeLib(t)
	c := fakeCtx(t, l, 0)
	o := newFakeObjs(t, c)
	defer o.close()
	calls := map[string]func(){
		"Ctx.LaunchKernel":    func() { _ = c.LaunchKernel(o.f, Dim3{1, 1, 1}, Dim3{256, 1, 1}, 0, o.s, o.pb.Params()) },
		"Ctx.EventRecord":     func() { _ = c.EventRecord(o.e, o.s) },
		"Ctx.StreamWaitEvent": func() { _ = c.StreamWaitEvent(o.s, o.e) },
		"Ctx.EventQuery":      func() { _ = c.EventQuery(o.e) },
		"Ctx.StreamQuery":     func() { _ = c.StreamQuery(o.s) },
		"Ctx.EventQuery(bad)": func() { _ = c.EventQuery(0) },
		"Lib.EventRecord":     func() { _ = l.EventRecord(o.e, o.s) },
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.MakeCurrent(); err != nil {
		t.Fatal(err)
	}
	for name, f := range calls {
		f()
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}

type fakeObjs struct {
	c  *Ctx
	s  Stream
	e  Event
	m  Module
	f  Function
	p  DevicePtr
	pb *ParamBlock
}

func newFakeObjs(tb testing.TB, c *Ctx) *fakeObjs {
	tb.Helper()
	o := &fakeObjs{c: c}
	var err error
	ptx, _ := kernels.PTX("sm_90")
	if o.s, err = c.StreamCreate(StreamNonBlocking); err == nil {
		if o.e, err = c.EventCreate(EventDisableTiming); err == nil {
			if o.m, err = c.ModuleLoadData(ptx); err == nil {
				if o.f, err = c.ModuleGetFunction(o.m, "rocsync_mul_f32"); err == nil {
					if o.p, err = c.MemAlloc(1024); err == nil {
						o.pb, err = NewParamBlock(40, []int{0, 8, 16, 24, 32})
					}
				}
			}
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	args := kernels.Args{Out: uint64(o.p), A: uint64(o.p), B: uint64(o.p), N: 256}
	args.Encode(o.pb.Bytes(), kernels.F32)
	return o
}

func (o *fakeObjs) close() {
	o.pb.Free()
	_ = errors.Join(o.c.MemFree(o.p), o.c.ModuleUnload(o.m), o.c.EventDestroy(o.e), o.c.StreamDestroy(o.s))
}

// cuEventElapsedTime takes the output float first and the events in order,
// its float result comes back whole, and DisableTiming events are refused.
func TestFakeEventElapsedTime(t *testing.T) {
	l := fakeLib(t)
	c := fakeCtx(t, l, 0)
	s, err := c.StreamCreate(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.StreamDestroy(s)
	a, _ := c.EventCreate(0)
	defer c.EventDestroy(a)
	b, _ := c.EventCreate(0)
	defer c.EventDestroy(b)
	untimed, _ := c.EventCreate(EventDisableTiming)
	defer c.EventDestroy(untimed)
	for _, e := range []Event{a, untimed, b} {
		if err := c.EventRecord(e, s); err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := c.EventElapsedTime(a, b); err != nil || ms != 0.5 {
		t.Errorf("EventElapsedTime = %v, %v; want 0.5 (two records apart)", ms, err)
	}
	if ms, err := c.EventElapsedTime(b, a); err != nil || ms != -0.5 {
		t.Errorf("EventElapsedTime backwards = %v, %v", ms, err)
	}
	if _, err := c.EventElapsedTime(a, untimed); !errors.Is(err, &Error{Code: ErrorInvalidHandle, Func: "cuEventElapsedTime"}) {
		t.Errorf("EventElapsedTime with a DisableTiming event = %v", err)
	}
}

// fakeCount reads the fake libcuda's call counter i (fakelib.Count*).
func fakeCount(t *testing.T, i int) int64 {
	t.Helper()
	c, err := fakelib.OpenCounts(fakeFix.path)
	if err != nil {
		t.Fatal(err)
	}
	return c.Get(i)
}

// MakeCurrent and the graph calls take the context as every Ctx call
// does: on a thread with none current they set it, and with it current
// they make one cuCtxGetCurrent and no cuCtxSetCurrent (with the check
// off, one cuCtxSetCurrent each).
func TestFakeGraphLaunchAndMakeCurrentTakeTheContext(t *testing.T) {
	l := fakeLib(t)
	c := fakeCtx(t, l, 0)
	s, err := c.StreamCreate(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.StreamDestroy(s) }()
	if err := c.BeginCapture(s, CaptureModeRelaxed); err != nil {
		t.Fatal(err)
	}
	g, err := c.EndCapture(s)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := c.GraphInstantiate(g)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.GraphDestroy(g); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.GraphExecDestroy(exec) }()
	for _, check := range []bool{true, false} {
		checkCurrent = check
		onBareThread(t, l, func() {
			if err := c.GraphLaunch(exec, s); err != nil {
				t.Errorf("check %v: GraphLaunch on a bare thread: %v", check, err)
			}
			if cur, err := l.CtxGetCurrent(); err != nil || cur != c.h {
				t.Errorf("check %v: after GraphLaunch the thread's context is %#x, %v; want %#x", check, cur, err, c.h)
			}
		})
		onBareThread(t, l, func() {
			if err := c.MakeCurrent(); err != nil {
				t.Errorf("check %v: MakeCurrent on a bare thread: %v", check, err)
			}
			if cur, err := l.CtxGetCurrent(); err != nil || cur != c.h {
				t.Errorf("check %v: after MakeCurrent the thread's context is %#x, %v; want %#x", check, cur, err, c.h)
			}
			// Now current: count the calls each makes.
			get0, set0, launch0 := fakeCount(t, fakelib.CountGetCurrent), fakeCount(t, fakelib.CountSetCurrent), fakeCount(t, fakelib.CountGraphLaunch)
			if err := c.MakeCurrent(); err != nil {
				t.Error(err)
			}
			if err := c.GraphLaunch(exec, s); err != nil {
				t.Error(err)
			}
			get, set, launch := fakeCount(t, fakelib.CountGetCurrent)-get0, fakeCount(t, fakelib.CountSetCurrent)-set0, fakeCount(t, fakelib.CountGraphLaunch)-launch0
			wantGet, wantSet := int64(2), int64(0)
			if !check {
				wantGet, wantSet = 0, 2
			}
			if get != wantGet || set != wantSet || launch != 1 {
				t.Errorf("check %v: MakeCurrent and GraphLaunch with the context current made %d cuCtxGetCurrent, %d cuCtxSetCurrent, %d cuGraphLaunch; want %d, %d, 1",
					check, get, set, launch, wantGet, wantSet)
			}
		})
	}
	checkCurrent = true
}

// A Ctx call on a thread where the caller made another context current
// puts that context back afterwards: the caller's own driver calls on the
// thread it locked go on in the context it chose, not silently in
// rocsync's (on another GPU). A thread with no context keeps the call's,
// and one with the call's context current pays no cuCtxSetCurrent. Bind
// and Unbind do the same around calls of other libraries (cuBLAS).
func TestFakeCtxCallsPutTheCallersContextBack(t *testing.T) {
	l := fakeLib(t)
	c0 := fakeCtx(t, l, 0)
	c1 := fakeCtx(t, l, 1)
	s, err := c0.StreamCreate(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c0.StreamDestroy(s) }()
	current := func() Context {
		cur, err := l.CtxGetCurrent()
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, c := range []struct {
		name        string
		before      Context
		after       Context
		setCurrents int64
	}{
		{"another context", c1.h, c1.h, 2},
		{"no context", 0, c0.h, 1},
		{"the call's context", c0.h, c0.h, 0},
	} {
		if err := l.CtxSetCurrent(c.before); err != nil {
			t.Fatal(err)
		}
		set0 := fakeCount(t, fakelib.CountSetCurrent)
		if err := c0.StreamSynchronize(s); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := current(); got != c.after {
			t.Errorf("%s: after a Ctx call the thread's context is %#x, want %#x", c.name, got, c.after)
		}
		if n := fakeCount(t, fakelib.CountSetCurrent) - set0; n != c.setCurrents {
			t.Errorf("%s: %d cuCtxSetCurrent, want %d", c.name, n, c.setCurrents)
		}
		if err := l.CtxSetCurrent(c.before); err != nil {
			t.Fatal(err)
		}
		prev, err := c0.Bind()
		if err != nil || current() != c0.h {
			t.Fatalf("%s: Bind: %v, current %#x", c.name, err, current())
		}
		c0.Unbind(prev)
		if got := current(); got != c.after {
			t.Errorf("%s: after Bind and Unbind the thread's context is %#x, want %#x", c.name, got, c.after)
		}
	}
}

// fakeCtx retains device dev's primary context of the fake library for
// the test.
func fakeCtx(t *testing.T, l *Lib, dev Device) *Ctx {
	t.Helper()
	c, err := l.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Release() })
	return c
}

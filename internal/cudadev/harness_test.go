package cudadev

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakelib.Cleanup()
	os.Exit(code)
}

func gpuEnabled() bool { return testenv.OnGPU() }

// A backendKind opens a Device for a policy: "emu" (the Go emulation,
// always), "cfake" (the real bindings over the fake C libraries, with gcc)
// and "gpu" (the real driver, with ROCSYNC_GPU=1).
type backendKind struct {
	name string
	open func(t testing.TB, cfg driver.DeviceConfig) (*Device, *emuBackend)
}

var backendKinds = []backendKind{
	{"emu", func(t testing.TB, cfg driver.DeviceConfig) (*Device, *emuBackend) {
		e := newEmu()
		d, err := newDevice(e, cfg, 0, "emulated GPU", 9, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d, e
	}},
	{"cfake", func(t testing.TB, cfg driver.DeviceConfig) (*Device, *emuBackend) {
		cfakeEnv(t)
		return openFirst(t, cfg), nil
	}},
	{"gpu", func(t testing.TB, cfg driver.DeviceConfig) (*Device, *emuBackend) {
		if !gpuEnabled() {
			t.Skip("set ROCSYNC_GPU=1 to run on an NVIDIA GPU")
		}
		return openFirst(t, cfg), nil
	}},
}

func openFirst(t testing.TB, cfg driver.DeviceConfig) *Device {
	devs, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs[1:] {
		_ = d.Close()
	}
	return devs[0].(*Device)
}

// harness drives a Device the way the front package does: every op goes
// through syncstate (Op.Begin, submit, Commit) with the device's engine.
type harness struct {
	t      testing.TB
	d      *Device
	emu    *emuBackend // nil on the real bindings
	eng    syncstate.Engine
	stats  *syncstate.Stats
	tasks  []*htask
	arrays []*harr
}

type htask struct {
	h     *harness
	tk    *Task
	stats syncstate.Stats
	sinks syncstate.Sinks
}

type harr struct {
	ptr  driver.DevicePtr
	st   *syncstate.State
	n    int // elements (rows = cols = side for matrices)
	side int
	dt   kernels.DType
}

func newHarness(t testing.TB, kind backendKind, p syncstate.Policy) *harness {
	return newHarnessConfig(t, kind, driver.DeviceConfig{Policy: p})
}

// newHarnessConfig is newHarness with more of the device's configuration.
func newHarnessConfig(t testing.TB, kind backendKind, cfg driver.DeviceConfig) *harness {
	t.Helper()
	p := cfg.Policy
	h := &harness{t: t, stats: new(syncstate.Stats), eng: syncstate.Engine{Policy: p}}
	cfg.Stats = h.stats
	h.d, h.emu = kind.open(t, cfg)
	t.Cleanup(h.close)
	return h
}

func (h *harness) close() {
	var errs []error
	// Closing the tasks drains them; then nothing uses the memory.
	for _, tk := range h.tasks {
		errs = append(errs, tk.tk.Close())
	}
	for _, a := range h.arrays {
		errs = append(errs, h.d.Free(a.ptr))
	}
	errs = append(errs, h.d.Close())
	if err := errors.Join(errs...); err != nil {
		h.t.Error(err)
	}
	if h.emu != nil {
		if errs := h.emu.errors(); len(errs) > 0 {
			h.t.Errorf("the emulated device saw errors: %v", errs)
		}
		if live := h.emu.liveMem(); len(live) > 0 {
			h.t.Errorf("leaked device memory: %#x", live)
		}
	}
}

func (h *harness) task() *htask {
	tk := &htask{h: h}
	tk.sinks = syncstate.Sinks{&tk.stats, h.stats}
	dt, err := h.d.NewTask(tk.sinks)
	if err != nil {
		h.t.Fatal(err)
	}
	tk.tk = dt.(*Task)
	h.tasks = append(h.tasks, tk)
	return tk
}

func (h *harness) alloc(n int, dt kernels.DType) *harr {
	p, err := h.d.Malloc(uint64(n * dt.Size()))
	if err != nil {
		h.t.Fatal(err)
	}
	a := &harr{ptr: p, st: syncstate.NewState(), n: n, dt: dt, side: int(math.Sqrt(float64(n)))}
	h.arrays = append(h.arrays, a)
	return a
}

func (h *harness) upload(vals []float32) *harr {
	a := h.alloc(len(vals), kernels.F32)
	if err := h.d.CopyHtoD(a.ptr, unsafe.Pointer(&vals[0]), uint64(4*len(vals))); err != nil {
		h.t.Fatal(err)
	}
	return a
}

// elementwise runs out = op(a, b) on the task's kernel timeline.
func (tk *htask) elementwise(op kernels.Op, out, a, b *harr, alpha float64) {
	h := tk.h
	var sop syncstate.Op
	args := kernels.Args{Out: uint64(out.ptr), Alpha: alpha, N: uint64(out.n)}
	ra, rb := op.Reads()
	if ra {
		sop.Read(a.st)
		args.A = uint64(a.ptr)
	}
	if rb {
		sop.Read(b.st)
		args.B = uint64(b.ptr)
	}
	sop.Write(out.st)
	if err := sop.Begin(&h.eng, tk.tk.Timeline(driver.LaneKernel), tk.sinks); err != nil {
		h.t.Fatal(err)
	}
	ticket, err := tk.tk.Launch(op, out.dt, args)
	if err != nil {
		sop.Abort()
		h.t.Fatal(err)
	}
	tk.sinks.Dispatch()
	if err := sop.Commit(ticket, tk.sinks); err != nil {
		h.t.Fatal(err)
	}
}

func (tk *htask) mul(out, a, b *harr) { tk.elementwise(kernels.Mul, out, a, b, 0) }

// matmul runs c = a·b for row-major square matrices: column-major cuBLAS
// computes cᵀ = bᵀ·aᵀ, which reads the row-major buffers as they are.
func (tk *htask) matmul(c, a, b *harr) {
	h := tk.h
	var sop syncstate.Op
	sop.Read(a.st)
	sop.Read(b.st)
	sop.Write(c.st)
	if err := sop.Begin(&h.eng, tk.tk.Timeline(driver.LaneLibrary), tk.sinks); err != nil {
		h.t.Fatal(err)
	}
	n := c.side
	ticket, err := tk.tk.Gemm(c.dt, false, false, n, n, n, 1, b.ptr, n, a.ptr, n, 0, c.ptr, n)
	if err != nil {
		sop.Abort()
		h.t.Fatal(err)
	}
	tk.sinks.Dispatch()
	if err := sop.Commit(ticket, tk.sinks); err != nil {
		h.t.Fatal(err)
	}
}

// read waits for a's writer on the host (a read-back wait) and copies it.
func (h *harness) read(a *harr) []float32 {
	a.st.Lock()
	w := a.st.WriterLocked()
	a.st.Unlock()
	if !w.Done() {
		syncstate.Sinks{h.stats}.HostWait(syncstate.ReasonReadBack)
		if err := w.TL.WaitHost(w.Ticket); err != nil {
			h.t.Fatal(err)
		}
	}
	out := make([]float32, a.n)
	if err := h.d.CopyDtoH(unsafe.Pointer(&out[0]), a.ptr, uint64(4*a.n)); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func randVals(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n)
	for i := range out {
		out[i] = r.Float32() - 0.5
	}
	return out
}

// closeTo reports the first element of got off want by more than rel of
// want's largest magnitude, or -1.
func closeTo(want []float64, got []float32, rel float64) int {
	scale := 0.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range want {
		if !(math.Abs(want[i]-float64(got[i])) <= rel*scale+1e-30) {
			return i
		}
	}
	return -1
}

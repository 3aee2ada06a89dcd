package cudadev

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// Tests that need the real GPU (ROCSYNC_GPU=1); skipped otherwise.

func gpuDevice(t *testing.T, p syncstate.Policy) *Device {
	t.Helper()
	if !gpuEnabled() {
		t.Skip("set ROCSYNC_GPU=1 to run on an NVIDIA GPU")
	}
	d, _ := backendKinds[2].open(t, driver.DeviceConfig{Policy: p})
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// inputs returns n values of type T for op: random in a range that keeps
// the results finite, led by special values.
func inputs(op kernels.Op, which int, n int, seed uint64) []float64 {
	r := rand.New(rand.NewPCG(seed, uint64(which)))
	out := make([]float64, n)
	specials := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 1, -1, 1e-40, -1e-40, 3.5e38, 1e-300}
	for i := range out {
		switch {
		case i < len(specials):
			out[i] = specials[i]
		case op == kernels.Exp:
			out[i] = r.Float64()*60 - 30
		case which == 1 && op == kernels.Div:
			out[i] = (r.Float64() + 0.1) * float64(1-2*r.IntN(2))
		default:
			out[i] = (r.Float64() - 0.5) * 16
		}
	}
	return out
}

func ulps32(a, b float32) uint32 {
	x, y := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if x < 0 {
		x = math.MinInt32 - x
	}
	if y < 0 {
		y = math.MinInt32 - y
	}
	if d := x - y; d < 0 {
		return uint32(-d)
	} else {
		return uint32(d)
	}
}

func ulps64(a, b float64) uint64 {
	x, y := int64(math.Float64bits(a)), int64(math.Float64bits(b))
	if x < 0 {
		x = math.MinInt64 - x
	}
	if y < 0 {
		y = math.MinInt64 - y
	}
	if x > y {
		return uint64(x - y)
	}
	return uint64(y - x)
}

// TestGPUElementwise runs every kernel in both types against the CPU
// reference: bit for bit (NaN payloads aside), except exp, which may differ
// by up to 2 ulp in float64 and 1 in float32 (see kernels/ref.go). One op
// also runs over more elements than one grid covers, through the kernels'
// grid-stride loop.
func TestGPUElementwise(t *testing.T) {
	d := gpuDevice(t, syncstate.DeviceSide)
	tk := newTask(t, d, syncstate.Sinks{})
	defer tk.Close()
	type cse struct {
		op kernels.Op
		n  int
	}
	var cases []cse
	for _, op := range kernels.AllOps() {
		cases = append(cases, cse{op, 100_003})
	}
	cases = append(cases, cse{kernels.Mul, maxBlocks*BlockSize + 12345})
	for _, c := range cases {
		for _, dt := range kernels.AllDTypes() {
			a64, b64 := inputs(c.op, 0, c.n, 1), inputs(c.op, 1, c.n, 2)
			alpha := 1.75
			size := uint64(c.n * dt.Size())
			pa, err1 := d.Malloc(size)
			pb, err2 := d.Malloc(size)
			po, err3 := d.Malloc(size)
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			var mism, maxUlp int
			if dt == kernels.F32 {
				a, b := make([]float32, c.n), make([]float32, c.n)
				for i := range a {
					a[i], b[i] = float32(a64[i]), float32(b64[i])
				}
				_ = d.CopyHtoD(pa, unsafe.Pointer(&a[0]), size)
				_ = d.CopyHtoD(pb, unsafe.Pointer(&b[0]), size)
				tick, err := tk.Launch(c.op, dt, kernels.Args{Out: uint64(po), A: uint64(pa), B: uint64(pb), Alpha: alpha, N: uint64(c.n)})
				if err == nil {
					err = tk.Kernel().WaitHost(tick)
				}
				if err != nil {
					t.Fatal(err)
				}
				got, want := make([]float32, c.n), make([]float32, c.n)
				if err := d.CopyDtoH(unsafe.Pointer(&got[0]), po, size); err != nil {
					t.Fatal(err)
				}
				kernels.RefF32(c.op, want, a, b, float32(alpha))
				for i := range want {
					if math.Float32bits(got[i]) == math.Float32bits(want[i]) || (got[i] != got[i] && want[i] != want[i]) {
						continue
					}
					u := int(ulps32(got[i], want[i]))
					if c.op == kernels.Exp && u <= 1 {
						maxUlp = max(maxUlp, u)
						continue
					}
					if mism++; mism <= 5 {
						t.Errorf("%s[%d]: a=%g b=%g: got %g (%#x), want %g (%#x)", c.op.KernelName(dt), i, a[i], b[i],
							got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			} else {
				_ = d.CopyHtoD(pa, unsafe.Pointer(&a64[0]), size)
				_ = d.CopyHtoD(pb, unsafe.Pointer(&b64[0]), size)
				tick, err := tk.Launch(c.op, dt, kernels.Args{Out: uint64(po), A: uint64(pa), B: uint64(pb), Alpha: alpha, N: uint64(c.n)})
				if err == nil {
					err = tk.Kernel().WaitHost(tick)
				}
				if err != nil {
					t.Fatal(err)
				}
				got, want := make([]float64, c.n), make([]float64, c.n)
				if err := d.CopyDtoH(unsafe.Pointer(&got[0]), po, size); err != nil {
					t.Fatal(err)
				}
				kernels.RefF64(c.op, want, a64, b64, alpha)
				for i := range want {
					if math.Float64bits(got[i]) == math.Float64bits(want[i]) || (got[i] != got[i] && want[i] != want[i]) {
						continue
					}
					u := int(min(ulps64(got[i], want[i]), 1<<30))
					if c.op == kernels.Exp && u <= 2 {
						maxUlp = max(maxUlp, u)
						continue
					}
					if mism++; mism <= 5 {
						t.Errorf("%s[%d]: a=%g b=%g: got %g, want %g (%d ulp)", c.op.KernelName(dt), i, a64[i], b64[i], got[i], want[i], u)
					}
				}
			}
			if mism > 0 {
				t.Errorf("%s over %d elements: %d mismatches", c.op.KernelName(dt), c.n, mism)
			} else if c.op == kernels.Exp {
				t.Logf("%s over %d elements: matches within %d ulp", c.op.KernelName(dt), c.n, maxUlp)
			}
			if err := errors.Join(d.Free(pa), d.Free(pb), d.Free(po)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("JIT (cuModuleLoadData of %s PTX + 26 cuModuleGetFunction) on %s: %v", d.PTXArch(), d.Name(), d.JITTime())
}

// TestGPUGemm checks sgemm and dgemm, every transpose, non-square shapes,
// leading dimensions larger than the rows, alpha and beta, against a
// float64 CPU reference.
func TestGPUGemm(t *testing.T) {
	d := gpuDevice(t, syncstate.DeviceSide)
	tk := newTask(t, d, syncstate.Sinks{})
	defer tk.Close()
	const m, n, k = 70, 50, 30
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range kernels.AllDTypes() {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			rowsA, colsA, rowsB, colsB := m, k, k, n
			if tr[0] {
				rowsA, colsA = k, m
			}
			if tr[1] {
				rowsB, colsB = n, k
			}
			lda, ldb, ldc := rowsA+3, rowsB+1, m+5
			a, b, c := make([]float64, lda*colsA), make([]float64, ldb*colsB), make([]float64, ldc*n)
			for _, x := range [][]float64{a, b, c} {
				for i := range x {
					x[i] = float64(float32(r.Float64()*2 - 1))
				}
			}
			want := append([]float64(nil), c...)
			absRef := make([]float64, len(c))
			for j := 0; j < n; j++ {
				for i := 0; i < m; i++ {
					s, abs := 0.0, 0.0
					for p := 0; p < k; p++ {
						var av, bv float64
						if tr[0] {
							av = a[p+i*lda]
						} else {
							av = a[i+p*lda]
						}
						if tr[1] {
							bv = b[j+p*ldb]
						} else {
							bv = b[p+j*ldb]
						}
						s += av * bv
						abs += math.Abs(av * bv)
					}
					want[i+j*ldc] = 1.5*s + 0.5*c[i+j*ldc]
					absRef[i+j*ldc] = 1.5*abs + 0.5*math.Abs(c[i+j*ldc])
				}
			}
			ptrs := make([]driver.DevicePtr, 3)
			for i, x := range [][]float64{a, b, c} {
				var err error
				if ptrs[i], err = d.Malloc(uint64(len(x) * dt.Size())); err != nil {
					t.Fatal(err)
				}
				if dt == kernels.F32 {
					x32 := make([]float32, len(x))
					for j := range x {
						x32[j] = float32(x[j])
					}
					err = d.CopyHtoD(ptrs[i], unsafe.Pointer(&x32[0]), uint64(4*len(x)))
				} else {
					err = d.CopyHtoD(ptrs[i], unsafe.Pointer(&x[0]), uint64(8*len(x)))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			tick, err := tk.Gemm(dt, tr[0], tr[1], m, n, k, 1.5, ptrs[0], lda, ptrs[1], ldb, 0.5, ptrs[2], ldc)
			if err == nil {
				err = tk.Library().WaitHost(tick)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float64, len(c))
			if dt == kernels.F32 {
				g32 := make([]float32, len(c))
				err = d.CopyDtoH(unsafe.Pointer(&g32[0]), ptrs[2], uint64(4*len(c)))
				for i := range g32 {
					got[i] = float64(g32[i])
				}
			} else {
				err = d.CopyDtoH(unsafe.Pointer(&got[0]), ptrs[2], uint64(8*len(c)))
			}
			if err != nil {
				t.Fatal(err)
			}
			eps := 0x1p-23
			if dt == kernels.F64 {
				eps = 0x1p-52
			}
			for j := 0; j < n; j++ {
				for i := 0; i < ldc; i++ {
					idx := i + j*ldc
					tol := 2 * float64(k+2) * eps * absRef[idx]
					if i >= m {
						tol = 0 // padding rows must be untouched
					}
					if math.Abs(got[idx]-want[idx]) > tol {
						t.Fatalf("%v trans=%v C[%d,%d]: got %g, want %g (tol %g)", dt, tr, i, j, got[idx], want[idx], tol)
					}
				}
			}
			for _, p := range ptrs {
				_ = d.Free(p)
			}
		}
	}
}

// TestGPUContextPerThread shows why every call sets the context: on an OS
// thread where no context is current, the driver refuses calls that need
// one (cuda-h100.md saw cuMemAlloc fail with 201). It also reports which
// calls on handles happen to work without one (informational: the binding
// does not rely on it).
func TestGPUContextPerThread(t *testing.T) {
	d := gpuDevice(t, syncstate.DeviceBridge)
	tk := newTask(t, d, syncstate.Sinks{})
	defer tk.Close()
	b := d.b.(*cudaBackend)
	lib := b.lib
	p, err := d.Malloc(1 << 12)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	ev, err := b.eventCreate()
	if err != nil {
		t.Fatal(err)
	}
	defer b.eventDestroy(ev)
	f, err := d.function(kernels.Fill, kernels.F32)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := lib.CtxSetCurrent(0); err != nil {
			t.Error(err)
			return
		}
		_, err := lib.MemAlloc(64)
		if !errors.Is(err, &cuda.Error{Code: cuda.ErrorInvalidContext}) {
			t.Errorf("cuMemAlloc with no current context: %v (want CUDA_ERROR_INVALID_CONTEXT)", err)
		}
		s := cuda.Stream(tk.Kernel().Handle())
		probe := map[string]error{
			"cuEventRecord":       lib.EventRecord(cuda.Event(ev), s),
			"cuStreamWaitEvent":   lib.StreamWaitEvent(s, cuda.Event(ev)),
			"cuEventQuery":        lib.EventQuery(cuda.Event(ev)),
			"cuStreamQuery":       lib.StreamQuery(s),
			"cuLaunchKernel":      lib.LaunchKernel(cuda.Function(f), cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}, 0, s, tk.params.Params()),
			"cuStreamSynchronize": lib.StreamSynchronize(s),
		}
		for name, err := range probe {
			t.Logf("without a current context: %-20s -> %v", name, err)
		}
	}()
	<-done
	// TestConcurrentTasks/gpu runs tasks from goroutines that hop threads.
}

// TestGPUJIT measures cuModuleLoadData of the embedded PTX in this process
// (the first load JIT-compiles unless the driver's compute cache has it).
func TestGPUJIT(t *testing.T) {
	d := gpuDevice(t, syncstate.DeviceSide)
	tk := newTask(t, d, syncstate.Sinks{})
	defer tk.Close()
	p, _ := d.Malloc(1024)
	defer d.Free(p)
	start := time.Now()
	if _, err := tk.Launch(kernels.Fill, kernels.F32, kernels.Args{Out: uint64(p), N: 256}); err != nil {
		t.Fatal(err)
	}
	t.Logf("first launch %v, of which module load + lookups %v (%s PTX on %s, %s)", time.Since(start), d.JITTime(), d.PTXArch(), d.Name(), d.Target())
}

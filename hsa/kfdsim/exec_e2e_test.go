//go:build linux && (amd64 || arm64)

package kfdsim_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/rocblas/simblas"
)

// End to end over Debian's real ROCr and HIP 5.2.3 on the simulated driver,
// with the Go executor registered before the runtime starts.

// registerExecutor registers the Go executor with the simulated driver this
// child process preloads (found by soname), before hsa_init.
func registerExecutor(t *testing.T) *kfdsim.Executor {
	t.Helper()
	e, err := kfdsim.RegisterExecutor("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// loadKernel loads kernels/co/gfx90a.hsaco through rocsync's hsa binding and
// returns the kernel object of name.
func loadKernel(t *testing.T, r *rt, gpu hsa.Agent, name string) uint64 {
	t.Helper()
	co, err := kernels.CodeObject("gfx90a")
	if err != nil {
		t.Fatal(err)
	}
	rd, err := r.lib.CodeObjectReaderCreateFromMemory(co)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := r.lib.ExecutableCreateAlt(hsa.ProfileFull, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.lib.ExecutableLoadAgentCodeObject(exe, gpu, rd); err != nil {
		t.Fatalf("loading gfx90a.hsaco: %v", err)
	}
	if err := r.lib.ExecutableFreeze(exe); err != nil {
		t.Fatal(err)
	}
	sym, err := r.lib.ExecutableSymbolByName(exe, name+".kd", gpu)
	if err != nil {
		t.Fatal(err)
	}
	ko, err := r.lib.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject)
	if err != nil {
		t.Fatal(err)
	}
	return ko
}

func dispatchPacket(ko uint64, kernarg unsafe.Pointer, n uint32, done hsa.Signal) packet {
	var p packet
	p.put16(0, hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	p.put16(2, 1) // one dimension
	p.put16(4, 256)
	p.put16(6, 1)
	p.put16(8, 1)
	p.put32(12, n)
	p.put32(16, 1)
	p.put32(20, 1)
	p.put64(32, ko)
	p.put64(40, uint64(uintptr(kernarg)))
	p.put64(56, uint64(done))
	return p
}

// rocsync_mul_f32 from the committed code object runs on the real ROCr with
// kernargs in allow_access'ed memory and equals the CPU reference; the same
// dispatch with kernargs the GPU cannot reach is a queue error, not a hang.
func TestExecRocsyncKernelOverRealROCr(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	e := registerExecutor(t)
	r := initRuntime(t)
	r.registerFaultHandler()
	gpu := r.gpus[0] // gfx90a
	ko := loadKernel(t, r, gpu, kernels.Mul.KernelName(kernels.F32))

	const n = 3000
	fine := r.pool(r.cpu, hsa.GlobalFlagFineGrained)
	a, b, out := r.alloc(fine, 4*n), r.alloc(fine, 4*n), r.alloc(fine, 4*n)
	for _, p := range []unsafe.Pointer{a, b, out} {
		if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu}, p); err != nil {
			t.Fatal(err)
		}
	}
	av, bv, ov := unsafe.Slice((*float32)(a), n), unsafe.Slice((*float32)(b), n), unsafe.Slice((*float32)(out), n)
	for i := range av {
		av[i], bv[i] = float32(i)*0.25-7, float32(i%11)+0.5
	}
	karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 64)
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu}, karg); err != nil {
		t.Fatal(err)
	}
	args := kernels.Args{Out: uint64(uintptr(out)), A: uint64(uintptr(a)), B: uint64(uintptr(b)), N: n}
	args.Encode(unsafe.Slice((*byte)(karg), kernels.KernargSize), kernels.F32)

	q, qe := r.queue(gpu)
	done := r.signal(1)
	r.submit(q, dispatchPacket(ko, karg, 1024, done))
	if ok, st, bad := r.waitOrError(done, qe, 20*time.Second); !ok {
		t.Fatalf("dispatch did not complete (queue error %v %#x)", bad, st)
	}
	want := make([]float32, n)
	kernels.RefF32(kernels.Mul, want, av, bv, 0)
	for i := range want {
		if ov[i] != want[i] {
			t.Fatalf("out[%d] = %v, want %v", i, ov[i], want[i])
		}
	}
	if st := e.Stats(); st.Runs != 1 {
		t.Errorf("executor stats %+v, want one run", st)
	}

	// The kernarg ring rocsync's queue/ allocates without allow_access.
	unmapped := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 64)
	args.Encode(unsafe.Slice((*byte)(unmapped), kernels.KernargSize), kernels.F32)
	clear(ov)
	q2, qe2 := r.queue(gpu)
	done2 := r.signal(1)
	r.submit(q2, dispatchPacket(ko, unmapped, 1024, done2))
	ok, st, gotErr := r.waitOrError(done2, qe2, 20*time.Second)
	if ok || !gotErr || st != 41 /* HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION */ {
		t.Fatalf("completed=%v error=%v status %#x, want MEMORY_APERTURE_VIOLATION", ok, gotErr, st)
	}
	for i := range ov {
		if ov[i] != 0 {
			t.Fatalf("the faulting dispatch wrote out[%d]", i)
		}
	}
	if st := e.Stats(); st.Faults != 1 {
		t.Errorf("executor stats %+v, want one fault", st)
	}
}

// HIP over the simulated GPU: hipMemcpy both ways, hipModuleLoadData of a
// code object v4 and hipModuleLaunchKernel, and simblas's sgemm through
// rocsync's rocblas binding on a stream, equal to a CPU gemm.
func TestExecHIPOverSimulatedGPU(t *testing.T) {
	if !kfdsim.InChild(t) {
		runtimeOrSkip(t)
		root, err := simblas.Build(t.TempDir())
		if err != nil {
			t.Skipf("building simblas: %v", err)
		}
		kfdsim.Run(t, twoGPUs, t.Name(), kfdsim.Options{Env: []string{"ROCM_PATH=" + root}})
		return
	}
	registerExecutor(t)
	openThunk(t)
	lib, err := hip.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Init(); err != nil {
		t.Fatalf("hipInit: %v", err)
	}
	const dev = 0 // the gfx90a

	// hipMemcpy host to device and back, large enough for the blit kernels.
	const size = 3<<20 + 5
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i*31 + i>>9)
	}
	d, err := lib.Malloc(dev, size)
	if err != nil {
		t.Fatalf("hipMalloc: %v", err)
	}
	defer lib.Free(dev, d)
	if err := lib.MemcpyHtoD(dev, d, unsafe.Pointer(&src[0]), size); err != nil {
		t.Fatalf("hipMemcpy H2D: %v", err)
	}
	back := make([]byte, size)
	if err := lib.MemcpyDtoH(dev, unsafe.Pointer(&back[0]), d, size); err != nil {
		t.Fatalf("hipMemcpy D2H: %v", err)
	}
	if string(back) != string(src) {
		t.Fatal("hipMemcpy round trip changed the data")
	}
	// hipMemsetAsync of an odd range inside the buffer, then back again.
	s0, err := lib.StreamCreate(dev, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.StreamDestroy(s0)
	if err := lib.MemsetAsync(d+4099, 0x5a, 70001, s0); err != nil {
		t.Fatalf("hipMemsetAsync: %v", err)
	}
	if err := lib.StreamSynchronize(s0); err != nil {
		t.Fatal(err)
	}
	if err := lib.MemcpyDtoH(dev, unsafe.Pointer(&back[0]), d, size); err != nil {
		t.Fatalf("hipMemcpy D2H: %v", err)
	}
	for i := range back {
		want := src[i]
		if i >= 4099 && i < 4099+70001 {
			want = 0x5a
		}
		if back[i] != want {
			t.Fatalf("after hipMemsetAsync byte %d = %#x, want %#x", i, back[i], want)
		}
	}

	// A v4 code object through hipModuleLoadData and hipModuleLaunchKernel.
	co, err := os.ReadFile(filepath.Join(os.Getenv("ROCM_PATH"), "co", "gfx90a.hsaco"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := lib.ModuleLoadData(dev, co)
	if err != nil {
		t.Fatalf("hipModuleLoadData: %v", err)
	}
	defer lib.ModuleUnload(mod)
	fn, err := lib.ModuleGetFunction(mod, simblas.DgemmKernel)
	if err != nil {
		t.Fatalf("hipModuleGetFunction: %v", err)
	}
	s, err := lib.StreamCreate(dev, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.StreamDestroy(s)
	// C (2×2) = 1.0 * A (2×1) * B (1×2), all in one device buffer.
	vals := []float64{1, 2, 3, 4, 0, 0, 0, 0}
	mat, err := lib.Malloc(dev, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Free(dev, mat)
	if err := lib.MemcpyHtoD(dev, mat, unsafe.Pointer(&vals[0]), 64); err != nil {
		t.Fatal(err)
	}
	kargs := make([]byte, 96)
	le := binary.LittleEndian
	for i, v := range []uint64{uint64(mat), uint64(mat) + 16, uint64(mat) + 32, 2, 2, 1, 2, 1, 2} {
		le.PutUint64(kargs[8*i:], v)
	}
	le.PutUint64(kargs[72:], math.Float64bits(1))
	if err := lib.ModuleLaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{16, 16, 1}, 0, s, kargs); err != nil {
		t.Fatalf("hipModuleLaunchKernel: %v", err)
	}
	if err := lib.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if err := lib.MemcpyDtoH(dev, unsafe.Pointer(&vals[0]), mat, 64); err != nil {
		t.Fatal(err)
	}
	if want := []float64{3, 6, 4, 8}; vals[4] != want[0] || vals[5] != want[1] || vals[6] != want[2] || vals[7] != want[3] {
		t.Fatalf("launched dgemm: C = %v, want %v", vals[4:], want)
	}

	// simblas through rocsync's rocblas binding ($ROCM_PATH/lib/librocblas.so.0).
	blas, err := rocblas.Open(lib.Major())
	if err != nil {
		t.Fatalf("rocblas.Open: %v", err)
	}
	h, err := blas.CreateHandle(dev)
	if err != nil {
		t.Fatalf("rocblas_create_handle: %v", err)
	}
	defer blas.DestroyHandle(h)
	if err := blas.SetStream(h, s); err != nil {
		t.Fatal(err)
	}
	const m, n, k = 37, 21, 13
	ah, bh, ch := make([]float32, k*m), make([]float32, k*n), make([]float32, m*n)
	for i := range ah {
		ah[i] = float32(i%9) - 4
	}
	for i := range bh {
		bh[i] = float32(i%7) * 0.25
	}
	for i := range ch {
		ch[i] = float32(i % 3)
	}
	bufs := make([]hip.DevicePtr, 3)
	for i, host := range [][]float32{ah, bh, ch} {
		if bufs[i], err = lib.Malloc(dev, uint64(4*len(host))); err != nil {
			t.Fatal(err)
		}
		defer lib.Free(dev, bufs[i])
		if err := lib.MemcpyHtoD(dev, bufs[i], unsafe.Pointer(&host[0]), uint64(4*len(host))); err != nil {
			t.Fatal(err)
		}
	}
	// C = 1.5 * Aᵀ * B - 0.5 * C, with A stored k×m (lda = k), B k×n.
	if err := blas.Sgemm(h, rocblas.OperationTranspose, rocblas.OperationNone, m, n, k, 1.5,
		bufs[0], k, bufs[1], k, -0.5, bufs[2], m); err != nil {
		t.Fatalf("rocblas_sgemm: %v", err)
	}
	if err := lib.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, m*n)
	if err := lib.MemcpyDtoH(dev, unsafe.Pointer(&got[0]), bufs[2], uint64(4*len(got))); err != nil {
		t.Fatal(err)
	}
	for j := range n {
		for i := range m {
			var sum float64
			for l := range k {
				sum += float64(ah[l+i*k]) * float64(bh[l+j*k])
			}
			want := 1.5*sum - 0.5*float64(ch[i+j*m])
			if g := float64(got[i+j*m]); math.Abs(g-want) > 1e-4*(1+math.Abs(want)) {
				t.Fatalf("C[%d,%d] = %v, want %v", i, j, g, want)
			}
		}
	}
	// rocBLAS's argument checks.
	if err := blas.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, m, n, k, 1,
		bufs[0], m-1, bufs[1], k, 0, bufs[2], m); !isStatus(err, rocblas.StatusInvalidSize) {
		t.Errorf("lda < m: %v, want invalid_size", err)
	}
	if err := blas.Sgemm(h, rocblas.Operation(7), rocblas.OperationNone, m, n, k, 1,
		bufs[0], m, bufs[1], k, 0, bufs[2], m); !isStatus(err, rocblas.StatusInvalidValue) {
		t.Errorf("bad transpose: %v, want invalid_value", err)
	}
	if err := blas.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, m, n, k, 1,
		0, m, bufs[1], k, 0, bufs[2], m); !isStatus(err, rocblas.StatusInvalidPointer) {
		t.Errorf("A = NULL: %v, want invalid_pointer", err)
	}
}

func isStatus(err error, s rocblas.Status) bool {
	e, ok := err.(*rocblas.Error)
	return ok && e.Status == s
}

// rocsync_sum_rows_f32 from the committed code object runs on the real ROCr
// through the Go executor, three launches over one workspace zeroed once,
// each equal to the reference and leaving the workspace zero; a workspace
// made dirty is refused and the queue reports an error instead of a wrong
// sum.
func TestExecRocsyncReductionOverRealROCr(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	e := registerExecutor(t)
	r := initRuntime(t)
	r.registerFaultHandler()
	gpu := r.gpus[0] // gfx90a
	ko := loadKernel(t, r, gpu, kernels.SumRows.KernelName(kernels.F32))

	const rows, cols = 3, 5000
	s, err := kernels.SumRows.Shape(rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	wsSize := s.WorkspaceSize(kernels.F32)
	fine := r.pool(r.cpu, hsa.GlobalFlagFineGrained)
	in, out, ws := r.alloc(fine, 4*rows*cols), r.alloc(fine, 4*rows), r.alloc(fine, wsSize)
	for _, p := range []unsafe.Pointer{in, out, ws} {
		if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu}, p); err != nil {
			t.Fatal(err)
		}
	}
	inv := unsafe.Slice((*float32)(in), rows*cols)
	for i := range inv {
		inv[i] = float32(i%97)*0.125 - 6
	}
	wsBytes := unsafe.Slice((*byte)(ws), wsSize)
	clear(wsBytes) // zeroed once
	karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 64)
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu}, karg); err != nil {
		t.Fatal(err)
	}
	args := kernels.ReduceArgs{Out: uint64(uintptr(out)), In: uint64(uintptr(in)), Workspace: uint64(uintptr(ws)), Rows: rows, Cols: cols}
	args.Encode(unsafe.Slice((*byte)(karg), kernels.ReduceKernargSize))
	reducePacket := func(done hsa.Signal) packet {
		p := dispatchPacket(ko, karg, s.Workgroups()*kernels.ReduceWorkgroupSize, done)
		p.put32(28, kernels.ReduceGroupSegmentSize(kernels.F32)) // group_segment_size
		return p
	}
	want := make([]float32, rows)
	kernels.RefReduceF32(kernels.SumRows, want, inv, rows, cols)
	q, qe := r.queue(gpu)
	for i := range 3 {
		done := r.signal(1)
		r.submit(q, reducePacket(done))
		if ok, st, bad := r.waitOrError(done, qe, 20*time.Second); !ok {
			t.Fatalf("launch %d did not complete (queue error %v %#x)", i, bad, st)
		}
		if got := unsafe.Slice((*float32)(out), rows); !slices.Equal(got, want) {
			t.Fatalf("launch %d: %v, want %v", i, got, want)
		}
		if err := kernels.CheckZeroed(wsBytes); err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
	}
	if st := e.Stats(); st.Runs != 3 || st.Refused != 0 {
		t.Errorf("executor stats %+v, want three runs", st)
	}

	wsBytes[0] = 1 // row 0's semaphore left counting
	clear(unsafe.Slice((*float32)(out), rows))
	q2, qe2 := r.queue(gpu)
	done := r.signal(1)
	r.submit(q2, reducePacket(done))
	if ok, _, gotErr := r.waitOrError(done, qe2, 20*time.Second); ok || !gotErr {
		t.Fatalf("dirty workspace: completed=%v error=%v, want a queue error", ok, gotErr)
	}
	if !errors.Is(e.LastRefusal(), kernels.ErrWorkspaceNotZero) || e.Stats().Refused != 1 {
		t.Errorf("refusal %v, stats %+v", e.LastRefusal(), e.Stats())
	}
	for _, v := range unsafe.Slice((*float32)(out), rows) {
		if v != 0 {
			t.Fatal("the refused reduction wrote its output")
		}
	}
}

package emu

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/rocblas"
)

type rig struct {
	m      *Machine
	h      *HSA
	q      *hsa.Queue
	qerr   chan hsa.Status
	kernel map[string]uint64
	karg   unsafe.Pointer
}

func newRig(t *testing.T, o Options) *rig {
	m := New(o)
	h := m.HSA()
	require.NoError(t, h.Init())
	r := &rig{m: m, h: h, qerr: make(chan hsa.Status, 4), kernel: map[string]uint64{}}
	q, err := h.QueueCreate(gpuAgent(0), 64, hsa.QueueTypeSingle, func(s hsa.Status) { r.qerr <- s })
	require.NoError(t, err)
	r.q = q
	code, err := kernels.CodeObject(m.Options().ISA)
	require.NoError(t, err)
	rd, err := h.CodeObjectReaderCreateFromMemory(code)
	require.NoError(t, err)
	exe, err := h.ExecutableCreateAlt(hsa.ProfileFull, 0)
	require.NoError(t, err)
	require.NoError(t, h.ExecutableLoadAgentCodeObject(exe, gpuAgent(0), rd))
	require.NoError(t, h.ExecutableFreeze(exe))
	for _, op := range []kernels.Op{kernels.Fill, kernels.Add} {
		sym, err := h.ExecutableSymbolByName(exe, op.Symbol(kernels.F32), gpuAgent(0))
		require.NoError(t, err)
		obj, err := h.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject)
		require.NoError(t, err)
		r.kernel[op.String()] = obj
	}
	r.karg, err = h.MemoryPoolAllocate(kernargPool, 64*64)
	require.NoError(t, err)
	require.NoError(t, h.AgentsAllowAccess([]hsa.Agent{gpuAgent(0)}, r.karg))
	t.Cleanup(func() { _ = h.QueueDestroy(q) })
	return r
}

// submit writes one dispatch packet with the real encoder and rings the
// doorbell; it returns the completion signal.
func (r *rig) submit(t *testing.T, op string, barrier bool, args kernels.Args) hsa.Signal {
	return r.submitHeader(t, op, hsa.Header(hsa.PacketTypeKernelDispatch, barrier, hsa.FenceScopeSystem, hsa.FenceScopeSystem), args)
}

// submitHeader is submit with the packet's header given.
func (r *rig) submitHeader(t *testing.T, op string, header uint16, args kernels.Args) hsa.Signal {
	sig, err := r.h.SignalCreate(1, nil)
	require.NoError(t, err)
	idx := r.h.QueueAddWriteIndexScacqScrel(r.q, 1)
	ka := unsafe.Add(r.karg, uintptr(idx%64)*64)
	args.Encode(unsafe.Slice((*byte)(ka), 64), kernels.F32)
	p := hsa.DispatchPacket{Header: header,
		Setup: 1, WorkgroupSize: [3]uint16{64, 1, 1}, GridSize: [3]uint32{uint32(args.N), 1, 1},
		KernelObject: r.kernel[op], KernargAddress: uint64(uintptr(ka)), CompletionSignal: sig}
	slot := hsa.Slot(r.q, idx)
	p.EncodeBody(slot)
	hsa.PublishHeader(slot, p.FirstWord())
	r.h.SignalStoreScrelease(r.q.Doorbell, int64(idx))
	return sig
}

func (r *rig) wait(sig hsa.Signal) {
	r.h.SignalWaitScacquire(sig, hsa.ConditionLt, 1, hsa.TimeoutInfinite, hsa.WaitStateBlocked)
}

func TestDispatchRunsTheKernelFromThePacket(t *testing.T) {
	r := newRig(t, Options{Hazards: true})
	buf, err := r.m.HIP().Malloc(0, 4*100)
	require.NoError(t, err)
	r.wait(r.submit(t, "fill", true, kernels.Args{Out: uint64(buf), Alpha: 2.5, N: 100}))
	r.wait(r.submit(t, "add", true, kernels.Args{Out: uint64(buf), A: uint64(buf), B: uint64(buf), N: 100}))
	out := make([]float32, 100)
	require.NoError(t, r.m.HIP().MemcpyDtoH(0, unsafe.Pointer(&out[0]), buf, 400))
	for _, v := range out {
		require.Equal(t, float32(5), v)
	}
	require.Empty(t, r.m.Hazards())
}

// Without the barrier bit a packet may overlap the one before it, so two
// writes to the same buffer race; with it they do not.
func TestBarrierBitIsHonoured(t *testing.T) {
	for _, barrier := range []bool{true, false} {
		r := newRig(t, Options{Hazards: true})
		buf, err := r.m.HIP().Malloc(0, 4*64)
		require.NoError(t, err)
		s1 := r.submit(t, "fill", barrier, kernels.Args{Out: uint64(buf), Alpha: 1, N: 64})
		// Let the first finish without the host observing it, so that
		// only the checker's clocks, not Go's race detector, see the race.
		for r.m.signal(s1).v.Load() != 0 {
			time.Sleep(10 * time.Microsecond)
		}
		s2 := r.submit(t, "fill", barrier, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64})
		r.wait(s2)
		if barrier {
			require.Empty(t, r.m.Hazards())
		} else {
			require.NotEmpty(t, r.m.Hazards())
			require.Equal(t, HazardWriteWrite, r.m.Hazards()[0].Kind)
		}
	}
}

func TestInvalidPacketBreaksTheQueue(t *testing.T) {
	r := newRig(t, Options{})
	idx := r.h.QueueAddWriteIndexScacqScrel(r.q, 1)
	slot := hsa.Slot(r.q, idx)
	hsa.PublishHeader(slot, uint32(hsa.Header(hsa.PacketTypeAgentDispatch, true, 0, 0)))
	r.h.SignalStoreScrelease(r.q.Doorbell, int64(idx))
	select {
	case s := <-r.qerr:
		require.Equal(t, hsa.StatusErrorInvalidPacket, s)
	case <-time.After(5 * time.Second):
		t.Fatal("no queue error")
	}
}

func TestUnknownKernelObjectFaults(t *testing.T) {
	r := newRig(t, Options{})
	r.kernel["bogus"] = 0xdead
	r.submit(t, "bogus", true, kernels.Args{N: 1})
	select {
	case s := <-r.qerr:
		require.Equal(t, hsa.StatusErrorMemoryFault, s)
	case <-time.After(5 * time.Second):
		t.Fatal("no queue error")
	}
}

func TestSignalValuePointerNeedsNonInterruptSignal(t *testing.T) {
	m := New(Options{})
	h := m.HSA()
	require.NoError(t, h.Init())
	intr, err := h.SignalCreate(1, nil)
	require.NoError(t, err)
	_, err = h.SignalValuePointer(intr)
	require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorInvalidArgument})
	gpuOnly, err := h.AMDSignalCreate(1, nil, hsa.SignalAttrAMDGPUOnly)
	require.NoError(t, err)
	p, err := h.SignalValuePointer(gpuOnly)
	require.NoError(t, err)
	require.EqualValues(t, 1, *(*int64)(p))
}

func TestSignalWaitTimesOut(t *testing.T) {
	m := New(Options{})
	h := m.HSA()
	require.NoError(t, h.Init())
	s, _ := h.SignalCreate(1, nil)
	start := time.Now()
	v := h.SignalWaitScacquire(s, hsa.ConditionLt, 1, uint64(2*time.Millisecond), hsa.WaitStateBlocked)
	require.EqualValues(t, 1, v)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Millisecond)
	go func() { time.Sleep(time.Millisecond); h.SignalStoreScrelease(s, 0) }()
	require.EqualValues(t, 0, h.SignalWaitScacquire(s, hsa.ConditionEq, 0, hsa.TimeoutInfinite, hsa.WaitStateBlocked))
}

// Events capture the newest record at hipStreamWaitEvent time, and a gemm
// on a stream that did not wait for the producer stream is a hazard.
func TestStreamsEventsAndGemm(t *testing.T) {
	m := New(Options{Hazards: true, MaxDelay: 50 * time.Microsecond})
	hp, b := m.HIP(), m.BLAS()
	s1, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	s2, _ := hp.StreamCreate(0, hip.StreamNonBlocking)
	a, _ := hp.Malloc(0, 4*4)
	c, _ := hp.Malloc(0, 4*4)
	host := []float32{1, 2, 3, 4} // column-major 2x2
	require.NoError(t, hp.MemcpyHtoD(0, a, unsafe.Pointer(&host[0]), 16))
	h, _ := b.CreateHandle(0)
	require.NoError(t, b.SetStream(h, s2))
	// Producer on s1 overwrites a; s2 waits for it through an event.
	require.NoError(t, hp.MemsetAsync(a, 0, 16, s1))
	ev, _ := hp.EventCreate(0, hip.EventDisableTiming)
	require.NoError(t, hp.EventRecord(ev, s1))
	require.NoError(t, hp.StreamWaitEvent(s2, ev))
	require.NoError(t, b.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, 2, 2, 2, 1, a, 2, a, 2, 0, c, 2))
	require.NoError(t, hp.StreamSynchronize(s2))
	require.Empty(t, m.Hazards())
	// Now without the wait: the checker reports the race.
	require.NoError(t, hp.MemcpyHtoD(0, a, unsafe.Pointer(&host[0]), 16))
	require.NoError(t, hp.MemsetAsync(a, 0, 16, s1))
	require.NoError(t, hp.StreamSynchronize(s1))
	require.NoError(t, b.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, 2, 2, 2, 1, a, 2, a, 2, 0, c, 2))
	require.NoError(t, hp.StreamSynchronize(s2))
	require.Empty(t, m.Hazards(), "host-synchronized work is ordered")
	err := b.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, -1, 2, 2, 1, a, 2, a, 2, 0, c, 2)
	require.ErrorIs(t, err, &rocblas.Error{Status: rocblas.StatusInvalidSize})
}

func TestGemmMatchesReference(t *testing.T) {
	m := New(Options{})
	hp, b := m.HIP(), m.BLAS()
	s, _ := hp.StreamCreate(0, 0)
	h, _ := b.CreateHandle(0)
	require.NoError(t, b.SetStream(h, s))
	// A is 2x3, B is 3x2, column-major.
	A := []float64{1, 4, 2, 5, 3, 6}
	B := []float64{7, 9, 11, 8, 10, 12}
	pa, _ := hp.Malloc(0, 48)
	pb, _ := hp.Malloc(0, 48)
	pc, _ := hp.Malloc(0, 32)
	require.NoError(t, hp.MemcpyHtoD(0, pa, unsafe.Pointer(&A[0]), 48))
	require.NoError(t, hp.MemcpyHtoD(0, pb, unsafe.Pointer(&B[0]), 48))
	require.NoError(t, b.Dgemm(h, rocblas.OperationNone, rocblas.OperationNone, 2, 2, 3, 1, pa, 2, pb, 3, 0, pc, 2))
	require.NoError(t, hp.StreamSynchronize(s))
	C := make([]float64, 4)
	require.NoError(t, hp.MemcpyDtoH(0, unsafe.Pointer(&C[0]), pc, 32))
	require.Equal(t, []float64{58, 139, 64, 154}, C)
}

func TestUseAfterFreeIsReported(t *testing.T) {
	r := newRig(t, Options{Hazards: true})
	buf, _ := r.m.HIP().Malloc(0, 64)
	require.NoError(t, r.m.HIP().Free(0, buf))
	r.submit(t, "fill", true, kernels.Args{Out: uint64(buf), Alpha: 1, N: 16})
	select {
	case <-r.qerr:
	case <-time.After(5 * time.Second):
		t.Fatal("no fault")
	}
	hz := r.m.Hazards()
	require.NotEmpty(t, hz)
	require.Equal(t, HazardUseAfterFree, hz[0].Kind)
	require.True(t, errors.Is(hz[0], ErrHazard))
}

// Transposed operands are read only inside their own extent: B stored
// n×k (transposed) is smaller than k×n would need when n < k.
func TestGemmTransposedShapes(t *testing.T) {
	m := New(Options{})
	hp, b := m.HIP(), m.BLAS()
	s, _ := hp.StreamCreate(0, 0)
	h, _ := b.CreateHandle(0)
	require.NoError(t, b.SetStream(h, s))
	const M, N, K = 3, 2, 5
	A := make([]float64, K*M) // op(A) = Aᵀ: A stored K×M, lda = K
	B := make([]float64, N*K) // op(B) = Bᵀ: B stored N×K, ldb = N
	for i := range A {
		A[i] = float64(i + 1)
	}
	for i := range B {
		B[i] = float64(2*i - 3)
	}
	pa, _ := hp.Malloc(0, uint64(8*len(A)))
	pb, _ := hp.Malloc(0, uint64(8*len(B)))
	pc, _ := hp.Malloc(0, 8*M*N)
	require.NoError(t, hp.MemcpyHtoD(0, pa, unsafe.Pointer(&A[0]), uint64(8*len(A))))
	require.NoError(t, hp.MemcpyHtoD(0, pb, unsafe.Pointer(&B[0]), uint64(8*len(B))))
	require.NoError(t, b.Dgemm(h, rocblas.OperationTranspose, rocblas.OperationTranspose, M, N, K, 1, pa, K, pb, N, 0, pc, M))
	require.NoError(t, hp.StreamSynchronize(s))
	C := make([]float64, M*N)
	require.NoError(t, hp.MemcpyDtoH(0, unsafe.Pointer(&C[0]), pc, 8*M*N))
	for i := 0; i < M; i++ {
		for j := 0; j < N; j++ {
			var want float64
			for l := 0; l < K; l++ {
				want += A[l+i*K] * B[j+l*N]
			}
			require.Equal(t, want, C[i+j*M], "C[%d,%d]", i, j)
		}
	}
}

// Kernarg memory from the CPU pool is mapped to no GPU until
// hsa_amd_agents_allow_access: a dispatch reading it breaks the queue with
// the status ROCr's callback reports for a VM fault.
func TestKernargNeedsAllowAccess(t *testing.T) {
	r := newRig(t, Options{})
	faults := handleFaults(t, r.h)
	karg, err := r.h.MemoryPoolAllocate(kernargPool, 64*64)
	require.NoError(t, err)
	r.karg = karg // not allowed to gpu0
	buf, err := r.m.HIP().Malloc(0, 4)
	require.NoError(t, err)
	r.submit(t, kernels.Fill.String(), true, kernels.Args{Out: uint64(buf), N: 1, Alpha: 1})
	select {
	case s := <-r.qerr:
		require.Equal(t, hsa.StatusErrorMemoryApertureViolation, s)
	case <-time.After(5 * time.Second):
		t.Fatal("no queue error")
	}
	f := nextFault(t, faults)
	require.Equal(t, gpuAgent(0), f.Agent)
	require.Equal(t, uint64(uintptr(karg)), f.Address, "the fault names the kernarg address read")
	require.Equal(t, hsa.MemoryFaultPageNotPresent, f.Reason)
	require.ErrorIs(t, r.h.AgentsAllowAccess([]hsa.Agent{99}, karg), &hsa.Error{Status: hsa.StatusErrorInvalidAgent})
	require.ErrorIs(t, r.h.AgentsAllowAccess([]hsa.Agent{gpuAgent(0)}, unsafe.Pointer(&buf)), &hsa.Error{Status: hsa.StatusErrorInvalidArgument})
}

// hipMalloc memory belongs to its GPU: another GPU's kernel faults on it,
// and so does a gemm on another GPU's stream.
func TestDeviceMemoryIsPrivateToItsGPU(t *testing.T) {
	r := newRig(t, Options{Devices: 2})
	// Two faults on one GPU: the second needs the GPU to run on after the
	// first, which KFD's eviction would stop.
	r.m.SetVMFaultEviction(false)
	faults := handleFaults(t, r.h)
	other, err := r.m.HIP().Malloc(1, 4)
	require.NoError(t, err)
	r.submit(t, kernels.Fill.String(), true, kernels.Args{Out: uint64(other), N: 1, Alpha: 1})
	select {
	case s := <-r.qerr:
		require.Equal(t, hsa.StatusErrorMemoryApertureViolation, s)
	case <-time.After(5 * time.Second):
		t.Fatal("no queue error")
	}
	require.Equal(t, hsa.MemoryFault{Agent: gpuAgent(0), Address: uint64(other), Reason: hsa.MemoryFaultPageNotPresent}, nextFault(t, faults))

	hp, b := r.m.HIP(), r.m.BLAS()
	s, err := hp.StreamCreate(0, 0)
	require.NoError(t, err)
	h, err := b.CreateHandle(0)
	require.NoError(t, err)
	require.NoError(t, b.SetStream(h, s))
	mine, err := hp.Malloc(0, 4)
	require.NoError(t, err)
	require.NoError(t, b.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, 1, 1, 1, 1, mine, 1, other, 1, 0, mine, 1))
	require.ErrorIs(t, hp.StreamSynchronize(s), &hip.Error{Code: hip.ErrorIllegalAddress})
	// A VM fault in a library kernel is the same KFD memory event.
	require.Equal(t, hsa.MemoryFault{Agent: gpuAgent(0), Address: uint64(other), Reason: hsa.MemoryFaultPageNotPresent}, nextFault(t, faults))
}

// The loader keeps the reader's memory as the code object's storage: the
// emulator reports releasing it while an executable is loaded, and
// changing it before the executable is destroyed.
func TestCodeObjectStorageMustOutliveExecutable(t *testing.T) {
	m := New(Options{})
	h := m.HSA()
	require.NoError(t, h.Init())
	code, err := kernels.CodeObject(m.Options().ISA)
	require.NoError(t, err)
	load := func(buf []byte) (hsa.Executable, hsa.CodeObjectReader) {
		rd, err := h.CodeObjectReaderCreateFromMemory(buf)
		require.NoError(t, err)
		exe, err := h.ExecutableCreateAlt(hsa.ProfileFull, 0)
		require.NoError(t, err)
		require.NoError(t, h.ExecutableLoadAgentCodeObject(exe, gpuAgent(0), rd))
		require.NoError(t, h.ExecutableFreeze(exe))
		return exe, rd
	}
	exe, rd := load(code)
	require.NoError(t, h.ExecutableDestroy(exe))
	require.NoError(t, h.CodeObjectReaderDestroy(rd))
	require.Empty(t, h.CodeObjectStorageFaults(), "the right order")

	exe, rd = load(code)
	require.NoError(t, h.CodeObjectReaderDestroy(rd))
	require.Len(t, h.CodeObjectStorageFaults(), 1)
	require.NoError(t, h.ExecutableDestroy(exe))

	buf := append([]byte(nil), code...)
	exe, rd = load(buf)
	buf[len(buf)-1] ^= 0xff
	require.NoError(t, h.ExecutableDestroy(exe))
	require.Len(t, h.CodeObjectStorageFaults(), 2)
	require.Contains(t, h.CodeObjectStorageFaults()[1], "changed")
	require.NoError(t, h.CodeObjectReaderDestroy(rd))
	require.Zero(t, h.LiveExecutables())
}

// hipStreamWaitValue64/WriteValue64 take an HSA signal's value address
// only from HIP 5.6 on; HIP's own signal memory works on every release.
func TestStreamMemoryOpsByHIPVersion(t *testing.T) {
	for _, tc := range []struct {
		version int
		hsaOK   bool
	}{{50_221_153, false}, {50_500_000, false}, {50_600_000, true}, {0, true}} {
		m := New(Options{HIPVersion: tc.version})
		h, hp := m.HSA(), m.HIP()
		require.NoError(t, h.Init())
		s, err := hp.StreamCreate(0, 0)
		require.NoError(t, err)
		sig, err := h.AMDSignalCreate(1, nil, hsa.SignalAttrIPC)
		require.NoError(t, err)
		ptr, err := h.SignalValuePointer(sig)
		require.NoError(t, err)
		errW := hp.StreamWriteValue64(s, ptr, 0, 0)
		errWait := hp.StreamWaitValue64(s, ptr, 0, hip.StreamWaitValueEq, ^uint64(0))
		if tc.hsaOK {
			require.NoError(t, errW, "version %d", tc.version)
			require.NoError(t, errWait)
		} else {
			require.ErrorIs(t, errW, &hip.Error{Code: hip.ErrorInvalidValue}, "version %d", tc.version)
			require.ErrorIs(t, errWait, &hip.Error{Code: hip.ErrorInvalidValue})
		}
		mem, err := hp.ExtMalloc(0, 8, hip.MallocSignalMemory)
		require.NoError(t, err)
		p := *(*unsafe.Pointer)(unsafe.Pointer(&mem)) // the host address HIP returned
		require.NoError(t, hp.StreamWriteValue64(s, p, 7, 0))
		require.NoError(t, hp.StreamWaitValue64(s, p, 7, hip.StreamWaitValueEq, ^uint64(0)))
		require.NoError(t, hp.StreamSynchronize(s))
		require.NoError(t, hp.Free(0, mem))
		_, err = hp.ExtMalloc(0, 16, hip.MallocSignalMemory)
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidValue})
	}
}

// hipModuleLaunchKernel's sharedMemBytes is the dynamic LDS: over the
// limit alone it is refused at the call; with the kernel's static LDS over
// the limit, the launch fails on the stream. A dispatch packet whose group
// segment is smaller than the kernel's static LDS breaks the queue.
func TestLDSLimits(t *testing.T) {
	m := New(Options{KernelGroupSegmentSize: 48 << 10})
	require.NoError(t, m.HSA().Init())
	hp := m.HIP()
	code, err := kernels.CodeObject(m.Options().ISA)
	require.NoError(t, err)
	mod, err := hp.ModuleLoadData(0, code)
	require.NoError(t, err)
	f, err := hp.ModuleGetFunction(mod, kernels.Fill.KernelName(kernels.F32))
	require.NoError(t, err)
	s, err := hp.StreamCreate(0, 0)
	require.NoError(t, err)
	buf, err := hp.Malloc(0, 4)
	require.NoError(t, err)
	var args [kernels.KernargSize]byte
	ka := kernels.Args{Out: uint64(buf), N: 1, Alpha: 2}
	ka.Encode(args[:], kernels.F32)
	err = hp.ModuleLaunchKernel(f, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, LDSPerWorkgroup+1, s, args[:])
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidValue})
	require.NoError(t, hp.ModuleLaunchKernel(f, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 16<<10, s, args[:]))
	require.NoError(t, hp.StreamSynchronize(s), "48 KiB static + 16 KiB dynamic fits")
	require.EqualValues(t, 16<<10, hp.MaxDynamicSharedMem())
	require.NoError(t, hp.ModuleLaunchKernel(f, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 16<<10+1, s, args[:]))
	require.ErrorIs(t, hp.StreamSynchronize(s), &hip.Error{Code: hip.ErrorLaunchFailure})

	r := newRig(t, Options{KernelGroupSegmentSize: 1024})
	out, err := r.m.HIP().Malloc(0, 4)
	require.NoError(t, err)
	r.submit(t, kernels.Fill.String(), true, kernels.Args{Out: uint64(out), N: 1, Alpha: 1}) // group segment 0 < 1024
	select {
	case st := <-r.qerr:
		require.Equal(t, hsa.StatusErrorInvalidAllocation, st)
	case <-time.After(5 * time.Second):
		t.Fatal("no queue error")
	}
}

// HIP_VISIBLE_DEVICES reorders and filters HIP's devices and stops at the
// first entry naming no GPU; every HIP call maps to the GPU it names.
func TestHIPVisibleDevices(t *testing.T) {
	m := New(Options{Devices: 3, HIPVisibleDevices: []int{2, 0, 7, 1}})
	require.NoError(t, m.HSA().Init())
	hp := m.HIP()
	n, err := hp.DeviceCount()
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for hipDev, gpu := range []int{2, 0} {
		bus, err := hp.DeviceAttribute(hipDev, hip.DeviceAttributePciBusId)
		require.NoError(t, err)
		bdf, err := m.HSA().AgentInfoUint32(gpuAgent(gpu), hsa.AgentInfoBDFID)
		require.NoError(t, err)
		require.EqualValues(t, bdf>>8, bus)
		p, err := hp.Malloc(hipDev, 4)
		require.NoError(t, err)
		require.Equal(t, gpu, int((uint64(p)-deviceBase)/deviceSpan))
	}
	_, err = hp.Malloc(2, 4)
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidDevice})
	none := New(Options{HIPVisibleDevices: []int{}})
	_, err = none.HIP().DeviceCount()
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorNoDevice})
}

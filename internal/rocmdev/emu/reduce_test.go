package emu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
)

// reduceRig is an HSA queue (or two) with every kernel of the embedded
// code object looked up, dispatching through real AQL packets.
type reduceRig struct {
	m    *Machine
	h    *HSA
	qs   []*hsa.Queue
	qerr chan hsa.Status
	obj  map[string]uint64 // kernel name -> kernel object
	karg unsafe.Pointer
	next uint64 // kernarg slot
	sig  hsa.Signal
}

const reduceKargSlots = 64

func newReduceRig(t testing.TB, o Options, queues int) *reduceRig {
	m := New(o)
	h := m.HSA()
	require.NoError(t, h.Init())
	r := &reduceRig{m: m, h: h, qerr: make(chan hsa.Status, 8), obj: map[string]uint64{}}
	for range queues {
		q, err := h.QueueCreate(gpuAgent(0), 64, hsa.QueueTypeSingle, func(s hsa.Status) { r.qerr <- s })
		require.NoError(t, err)
		r.qs = append(r.qs, q)
		t.Cleanup(func() { _ = h.QueueDestroy(q) })
	}
	code, err := kernels.CodeObject(m.Options().ISA)
	require.NoError(t, err)
	rd, err := h.CodeObjectReaderCreateFromMemory(code)
	require.NoError(t, err)
	exe, err := h.ExecutableCreateAlt(hsa.ProfileFull, 0)
	require.NoError(t, err)
	require.NoError(t, h.ExecutableLoadAgentCodeObject(exe, gpuAgent(0), rd))
	require.NoError(t, h.ExecutableFreeze(exe))
	names := []string{kernels.Fill.KernelName(kernels.F32)}
	for _, red := range kernels.AllReductions() {
		for _, dt := range kernels.AllDTypes() {
			names = append(names, red.KernelName(dt))
		}
	}
	for _, name := range names {
		sym, err := h.ExecutableSymbolByName(exe, name+".kd", gpuAgent(0))
		require.NoError(t, err)
		obj, err := h.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject)
		require.NoError(t, err)
		r.obj[name] = obj
	}
	r.karg, err = h.MemoryPoolAllocate(kernargPool, reduceKargSlots*64)
	require.NoError(t, err)
	require.NoError(t, h.AgentsAllowAccess([]hsa.Agent{gpuAgent(0)}, r.karg))
	r.sig, err = h.SignalCreate(0, nil)
	require.NoError(t, err)
	return r
}

// dispatch writes one packet on queue qi; the kernarg bytes come from
// encode. Callers keep fewer than reduceKargSlots packets in flight.
func (r *reduceRig) dispatch(qi int, name string, barrier bool, wg uint16, grid uint32, lds uint32, sig hsa.Signal, encode func([]byte)) {
	ka := unsafe.Add(r.karg, uintptr(r.next%reduceKargSlots)*64)
	r.next++
	encode(unsafe.Slice((*byte)(ka), 64))
	q := r.qs[qi]
	idx := r.h.QueueAddWriteIndexScacqScrel(q, 1)
	p := hsa.DispatchPacket{Header: hsa.Header(hsa.PacketTypeKernelDispatch, barrier, hsa.FenceScopeSystem, hsa.FenceScopeSystem),
		Setup: 1, WorkgroupSize: [3]uint16{wg, 1, 1}, GridSize: [3]uint32{grid, 1, 1}, GroupSegmentSize: lds,
		KernelObject: r.obj[name], KernargAddress: uint64(uintptr(ka)), CompletionSignal: sig}
	slot := hsa.Slot(q, idx)
	p.EncodeBody(slot)
	hsa.PublishHeader(slot, p.FirstWord())
	r.h.SignalStoreScrelease(q.Doorbell, int64(idx))
}

// reduce dispatches one reduction the way the op path is to: workgroups of
// kernels.ReduceWorkgroupSize, shape.Workgroups() of them (or groups when
// non-zero), the kernel's LDS, the barrier bit.
func (r *reduceRig) reduce(qi int, red kernels.Reduction, dt kernels.DType, args kernels.ReduceArgs, groups uint32, sig hsa.Signal) {
	if groups == 0 {
		s, _ := red.Shape(args.Rows, args.Cols)
		groups = s.Workgroups()
	}
	r.dispatch(qi, red.KernelName(dt), true, kernels.ReduceWorkgroupSize, groups*kernels.ReduceWorkgroupSize,
		kernels.ReduceGroupSegmentSize(dt), sig, func(b []byte) { args.Encode(b) })
}

// memset is the memset-per-launch variant's extra op: rocsync_fill_f32
// with 0 over the workspace (n bytes, a multiple of 4), on the same queue.
func (r *reduceRig) memset(qi int, addr, n uint64, sig hsa.Signal) {
	args := kernels.Args{Out: addr, N: n / 4}
	r.dispatch(qi, kernels.Fill.KernelName(kernels.F32), true, 256, uint32(max((n/4+255)/256, 1)*256), 0, sig,
		func(b []byte) { args.Encode(b, kernels.F32) })
}

// run dispatches f with the rig's signal and waits for it.
func (r *reduceRig) run(f func(sig hsa.Signal)) {
	r.h.SignalStoreRelaxed(r.sig, 1)
	f(r.sig)
	r.h.SignalWaitScacquire(r.sig, hsa.ConditionLt, 1, hsa.TimeoutInfinite, hsa.WaitStateBlocked)
}

func (r *reduceRig) alloc(t testing.TB, n uint64) hip.DevicePtr {
	p, err := r.m.HIP().Malloc(0, max(n, 8))
	require.NoError(t, err)
	return p
}

func (r *reduceRig) upload(t testing.TB, dst hip.DevicePtr, b []byte) {
	if len(b) > 0 {
		require.NoError(t, r.m.HIP().MemcpyHtoD(0, dst, unsafe.Pointer(&b[0]), uint64(len(b))))
	}
}

func (r *reduceRig) download(t testing.TB, src hip.DevicePtr, n uint64) []byte {
	b := make([]byte, n)
	if n > 0 {
		require.NoError(t, r.m.HIP().MemcpyDtoH(0, unsafe.Pointer(&b[0]), src, n))
	}
	return b
}

func randomMatrix(dt kernels.DType, n uint64, seed uint64) []byte {
	g := rand.New(rand.NewPCG(seed, n))
	b := make([]byte, n*uint64(dt.Size()))
	for i := uint64(0); i < n; i++ {
		v := (g.Float64() - 0.5) * math.Pow(2, float64(g.IntN(30)-15))
		if dt == kernels.F32 {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		} else {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		}
	}
	return b
}

// wantReduce is the CPU reference's bytes for the same input.
func wantReduce(t testing.TB, red kernels.Reduction, dt kernels.DType, in []byte, rows, cols uint64) []byte {
	s, err := red.Shape(rows, cols)
	require.NoError(t, err)
	out := make([]byte, s.Outputs*uint64(dt.Size()))
	require.NoError(t, kernels.ReduceBytes(red, dt, out, in, make([]byte, s.WorkspaceSize(dt)), rows, cols))
	return out
}

// Every reduction kernel, dispatched from the code object by name through
// AQL packets, equals the reference bit for bit across sizes (one element,
// not a multiple of the workgroup, several slices per output) and grids
// (one workgroup, the suggested number), and leaves the workspace zero.
func TestReductionKernelsMatchReference(t *testing.T) {
	r := newReduceRig(t, Options{Hazards: true, MaxDelay: 200 * time.Microsecond, Seed: 3}, 1)
	sizes := [][2]uint64{{1, 1}, {1, 255}, {3, 257}, {1, 4097}, {2, 9000}, {9000, 2}, {70, 70}, {1, 300_001}, {0, 3}}
	for _, sz := range sizes {
		rows, cols := sz[0], sz[1]
		for _, dt := range kernels.AllDTypes() {
			in := randomMatrix(dt, rows*cols, rows^cols)
			dIn := r.alloc(t, uint64(len(in)))
			r.upload(t, dIn, in)
			for _, red := range kernels.AllReductions() {
				s, err := red.Shape(rows, cols)
				require.NoError(t, err)
				wsSize := s.WorkspaceSize(dt)
				outSize := s.Outputs * uint64(dt.Size())
				dOut, dWS := r.alloc(t, outSize), r.alloc(t, wsSize)
				for _, groups := range []uint32{1, 0} {
					r.upload(t, dOut, bytes.Repeat([]byte{0x7f}, int(outSize)))
					args := kernels.ReduceArgs{Out: uint64(dOut), In: uint64(dIn), Workspace: uint64(dWS), Rows: rows, Cols: cols}
					r.run(func(sig hsa.Signal) { r.reduce(0, red, dt, args, groups, sig) })
					require.Equal(t, wantReduce(t, red, dt, in, rows, cols), r.download(t, dOut, outSize),
						"%v %v %dx%d, %d workgroups", red, dt, rows, cols, groups)
					require.NoError(t, kernels.CheckZeroed(r.download(t, dWS, wsSize)), "%v %v %dx%d", red, dt, rows, cols)
				}
			}
		}
	}
	require.Empty(t, r.m.Hazards())
	require.Empty(t, r.m.KernelFaults())
}

// The acceptance criterion: after the first launch no memset, and the
// zero check (in every launch, and on the host every 1000) passes over
// 10^4 launches sharing one workspace, across all six kernels.
func TestReductionWorkspaceStaysZeroOver10kLaunches(t *testing.T) {
	r := newReduceRig(t, Options{Hazards: true}, 1)
	// 1 x 4097 and 4097 x 1: two slices in every kernel (the smallest
	// shape that uses the workspace), so 10^4 launches stay quick.
	const rows, cols = 1, 4097
	var wsSize uint64
	for _, red := range kernels.AllReductions() {
		for _, dt := range kernels.AllDTypes() {
			s, _ := red.Shape(rows, cols)
			wsSize = max(wsSize, s.WorkspaceSize(dt))
			s, _ = red.Shape(cols, rows)
			wsSize = max(wsSize, s.WorkspaceSize(dt))
		}
	}
	dWS := r.alloc(t, wsSize)
	ins := map[kernels.DType][]byte{}
	dIns := map[kernels.DType]hip.DevicePtr{}
	for _, dt := range kernels.AllDTypes() {
		ins[dt] = randomMatrix(dt, rows*cols, uint64(dt))
		dIns[dt] = r.alloc(t, uint64(len(ins[dt])))
		r.upload(t, dIns[dt], ins[dt])
	}
	dOut := r.alloc(t, 8*cols)
	launches := 10_000
	if testing.Short() {
		launches = 1000
	}
	for i := range launches {
		red := kernels.AllReductions()[i%3]
		dt := kernels.AllDTypes()[(i/3)%2]
		rr, cc := uint64(rows), uint64(cols)
		if (i/6)%2 == 1 {
			rr, cc = cc, rr
		}
		args := kernels.ReduceArgs{Out: uint64(dOut), In: uint64(dIns[dt]), Workspace: uint64(dWS), Rows: rr, Cols: cc}
		r.run(func(sig hsa.Signal) { r.reduce(0, red, dt, args, 0, sig) })
		if i%1000 == 999 || i < 12 {
			require.NoError(t, kernels.CheckZeroed(r.download(t, dWS, wsSize)), "after launch %d", i)
			s, _ := red.Shape(rr, cc)
			require.Equal(t, wantReduce(t, red, dt, ins[dt], rr, cc), r.download(t, dOut, s.Outputs*uint64(dt.Size())), "launch %d", i)
		}
	}
	require.Empty(t, r.m.KernelFaults())
	require.Empty(t, r.m.Hazards())
}

// A workspace that is not zero when a reduction starts is refused as a
// kernel fault (the queue breaks; KernelFaults says why): the emulator's
// checkZeroed. Without it, a GPU would count the semaphores wrong.
func TestReductionRefusesDirtyWorkspace(t *testing.T) {
	r := newReduceRig(t, Options{Hazards: true}, 1)
	const rows, cols = 2, 9000
	in := randomMatrix(kernels.F32, rows*cols, 1)
	dIn := r.alloc(t, uint64(len(in)))
	r.upload(t, dIn, in)
	s, _ := kernels.SumRows.Shape(rows, cols)
	wsSize := s.WorkspaceSize(kernels.F32)
	dWS, dOut := r.alloc(t, wsSize), r.alloc(t, 8)
	dirty := make([]byte, wsSize)
	dirty[4] = 1 // row 1's semaphore
	r.upload(t, dWS, dirty)
	args := kernels.ReduceArgs{Out: uint64(dOut), In: uint64(dIn), Workspace: uint64(dWS), Rows: rows, Cols: cols}
	r.reduce(0, kernels.SumRows, kernels.F32, args, 0, r.sig)
	select {
	case st := <-r.qerr:
		require.Equal(t, hsa.StatusErrorMemoryFault, st)
	case <-time.After(5 * time.Second):
		t.Fatal("a dirty workspace did not break the queue")
	}
	faults := r.m.KernelFaults()
	require.Len(t, faults, 1)
	require.ErrorIs(t, faults[0], kernels.ErrWorkspaceNotZero)
	require.ErrorIs(t, faults[0], ErrKernelLaunch)
	var nz *kernels.WorkspaceNotZeroError
	require.True(t, errors.As(faults[0], &nz))
	require.Equal(t, uint64(4), nz.Offset)
}

// The reductions require 256-wide workgroups and a whole number of them;
// any other shape is refused rather than computed.
func TestReductionRefusesOtherWorkgroupShapes(t *testing.T) {
	for name, geo := range map[string][2]uint32{"workgroup 64": {64, 256}, "partial workgroup": {256, 300}} {
		r := newReduceRig(t, Options{}, 1)
		dIn, dOut := r.alloc(t, 4*16), r.alloc(t, 4)
		args := kernels.ReduceArgs{Out: uint64(dOut), In: uint64(dIn), Rows: 4, Cols: 4}
		r.dispatch(0, kernels.SumAll.KernelName(kernels.F32), true, uint16(geo[0]), geo[1], kernels.ReduceGroupSegmentSize(kernels.F32), r.sig,
			func(b []byte) { args.Encode(b) })
		select {
		case st := <-r.qerr:
			require.Equal(t, hsa.StatusErrorInvalidPacket, st, name)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no queue error", name)
		}
		require.Len(t, r.m.KernelFaults(), 1, name)
		require.ErrorIs(t, r.m.KernelFaults()[0], ErrKernelLaunch, name)
	}
	// Too little LDS in the packet is refused too (the kernels' static LDS).
	r := newReduceRig(t, Options{}, 1)
	dIn, dOut := r.alloc(t, 64), r.alloc(t, 8)
	args := kernels.ReduceArgs{Out: uint64(dOut), In: uint64(dIn), Rows: 4, Cols: 4}
	r.dispatch(0, kernels.SumAll.KernelName(kernels.F64), true, 256, 256, kernels.ReduceGroupSegmentSize(kernels.F32), r.sig,
		func(b []byte) { args.Encode(b) })
	select {
	case st := <-r.qerr:
		require.Equal(t, hsa.StatusErrorInvalidAllocation, st)
	case <-time.After(5 * time.Second):
		t.Fatal("too little LDS: no queue error")
	}
}

// The workspace is tracked like an array: the hazard checker sees each
// reduction read and write it, so two reductions sharing one workspace on
// two queues with no dependency between them are a race, and with a
// barrier-AND packet waiting for the first they are not.
func TestReductionWorkspaceHandedOverWithoutDependencyIsARace(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		r := newReduceRig(t, Options{Hazards: true}, 2)
		const rows, cols = 1, 9000
		in := randomMatrix(kernels.F32, rows*cols, 5)
		dIn := r.alloc(t, uint64(len(in)))
		r.upload(t, dIn, in)
		s, _ := kernels.SumAll.Shape(rows, cols)
		dWS := r.alloc(t, s.WorkspaceSize(kernels.F32))
		dOut1, dOut2 := r.alloc(t, 4), r.alloc(t, 4)
		first, err := r.h.SignalCreate(1, nil)
		require.NoError(t, err)
		r.reduce(0, kernels.SumAll, kernels.F32, kernels.ReduceArgs{Out: uint64(dOut1), In: uint64(dIn), Workspace: uint64(dWS), Rows: rows, Cols: cols}, 0, first)
		// Let the first finish unobserved by the host, so only the
		// checker's clocks decide.
		for r.m.signal(first).v.Load() != 0 {
			time.Sleep(10 * time.Microsecond)
		}
		if ordered {
			idx := r.h.QueueAddWriteIndexScacqScrel(r.qs[1], 1)
			b := hsa.BarrierAndPacket{Header: hsa.Header(hsa.PacketTypeBarrierAnd, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem)}
			b.DepSignals[0] = first
			slot := hsa.Slot(r.qs[1], idx)
			b.EncodeBody(slot)
			hsa.PublishHeader(slot, b.FirstWord())
			r.h.SignalStoreScrelease(r.qs[1].Doorbell, int64(idx))
		}
		r.run(func(sig hsa.Signal) {
			r.reduce(1, kernels.SumAll, kernels.F32, kernels.ReduceArgs{Out: uint64(dOut2), In: uint64(dIn), Workspace: uint64(dWS), Rows: rows, Cols: cols}, 0, sig)
		})
		hz := r.m.Hazards()
		if ordered {
			require.Empty(t, hz)
			continue
		}
		require.NotEmpty(t, hz, "the unordered hand-over was not caught")
		for _, h := range hz {
			require.GreaterOrEqual(t, h.Lo, uint64(dWS), "only the workspace is shared: %v", h)
			require.Contains(t, h.Op, "rocsync_sum_all_f32")
		}
	}
}

// The HIP path runs the same kernels by name (hipModuleLaunchKernel).
func TestReductionThroughHIPModule(t *testing.T) {
	m := New(Options{Hazards: true})
	h := m.HIP()
	code, err := kernels.CodeObject(m.Options().ISA)
	require.NoError(t, err)
	mod, err := h.ModuleLoadData(0, code)
	require.NoError(t, err)
	fn, err := h.ModuleGetFunction(mod, kernels.SumCols.KernelName(kernels.F64))
	require.NoError(t, err)
	const rows, cols = 5000, 3
	in := randomMatrix(kernels.F64, rows*cols, 9)
	dIn, err := h.Malloc(0, uint64(len(in)))
	require.NoError(t, err)
	require.NoError(t, h.MemcpyHtoD(0, dIn, unsafe.Pointer(&in[0]), uint64(len(in))))
	s, _ := kernels.SumCols.Shape(rows, cols)
	dWS, err := h.Malloc(0, s.WorkspaceSize(kernels.F64))
	require.NoError(t, err)
	dOut, err := h.Malloc(0, 8*cols)
	require.NoError(t, err)
	stream, err := h.StreamCreate(0, 0)
	require.NoError(t, err)
	args := make([]byte, kernels.ReduceKernargSize)
	(&kernels.ReduceArgs{Out: uint64(dOut), In: uint64(dIn), Workspace: uint64(dWS), Rows: rows, Cols: cols}).Encode(args)
	for range 3 {
		require.NoError(t, h.ModuleLaunchKernel(fn, [3]uint32{s.Workgroups(), 1, 1}, [3]uint32{kernels.ReduceWorkgroupSize, 1, 1}, 0, stream, args))
	}
	require.NoError(t, h.StreamSynchronize(stream))
	out := make([]byte, 8*cols)
	require.NoError(t, h.MemcpyDtoH(0, unsafe.Pointer(&out[0]), dOut, uint64(len(out))))
	require.Equal(t, wantReduce(t, kernels.SumCols, kernels.F64, in, rows, cols), out)
	require.Empty(t, m.KernelFaults())
	require.Empty(t, m.Hazards())
}

// BenchmarkReductionZeroedArena compares the zeroed-arena protocol (the
// reduction alone, its workspace reused as the last launch left it) with a
// memset per launch (a fill of the workspace, then the reduction, on the
// same queue), each launch waited for. On the emulator: these are CPU
// times of the model, not GPU times; what carries over is the extra op per
// launch.
func BenchmarkReductionZeroedArena(b *testing.B) {
	for _, variant := range []string{"arena", "memset"} {
		for _, sz := range [][2]uint64{{1, 4097}, {64, 8192}} {
			rows, cols := sz[0], sz[1]
			b.Run(variant+"/"+shapeName(rows, cols), func(b *testing.B) {
				r := newReduceRig(b, Options{}, 1)
				in := randomMatrix(kernels.F32, rows*cols, 1)
				dIn := r.alloc(b, uint64(len(in)))
				r.upload(b, dIn, in)
				s, _ := kernels.SumRows.Shape(rows, cols)
				wsSize := (s.WorkspaceSize(kernels.F32) + 3) &^ 3
				dWS, dOut := r.alloc(b, wsSize), r.alloc(b, 4*rows)
				args := kernels.ReduceArgs{Out: uint64(dOut), In: uint64(dIn), Workspace: uint64(dWS), Rows: rows, Cols: cols}
				b.ResetTimer()
				for range b.N {
					r.h.SignalStoreRelaxed(r.sig, 1)
					if variant == "memset" {
						r.memset(0, uint64(dWS), wsSize, 0)
					}
					r.reduce(0, kernels.SumRows, kernels.F32, args, 0, r.sig)
					r.h.SignalWaitScacquire(r.sig, hsa.ConditionLt, 1, hsa.TimeoutInfinite, hsa.WaitStateBlocked)
				}
				b.StopTimer()
				require.Empty(b, r.m.KernelFaults())
			})
		}
	}
}

func shapeName(rows, cols uint64) string {
	return strconv.FormatUint(rows, 10) + "x" + strconv.FormatUint(cols, 10)
}

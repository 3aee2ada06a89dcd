package cudadev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
)

// emuBackend is a backend that emulates a CUDA device in Go, to test the
// timelines, the policies and the results without a GPU: this package's
// tests open it directly, and the root package's conformance suites open
// it through OpenFunc with testhooks.Switches.CUDAEmulator on.
//
// The device is lazy and adversarial: enqueued work runs only when the
// host blocks on it (cuEventSynchronize, cuStreamSynchronize, Close), and
// then, among the streams whose next op may run, it always runs the op
// submitted last. Within a stream ops run in order; across streams only
// cuStreamWaitEvent orders them. So an op that should have waited for
// another stream but was not made to runs before its producer, and reads
// stale data: a missing wait shows up as a wrong result (see
// TestMissingWaitsAreCaught). Queries never make progress, like a GPU that
// is busy for as long as the host does not wait, which makes the host-wait
// counts exact.
//
// Memory is host memory behind fake device addresses; an op that touches
// freed or unknown memory is recorded in errs.
type emuBackend struct {
	mu      sync.Mutex
	next    uintptr
	seq     uint64
	streams map[uintptr]*emuStream
	events  map[uintptr]*emuEvent
	funcs   map[uintptr]emuFunc
	blas    map[uintptr]uintptr // handle → stream
	mem     map[uint64][]byte
	nextMem uint64
	loaded  bool
	noBLAS  error
	graphs  map[uintptr][]emuOp // graphs and instantiated graphs

	graphLaunches int
	errs          []error
	// noMemOps, when set, is why streams cannot wait for mapped host
	// memory (as on a driver without stream memory operations).
	noMemOps error
	// dropValueWaits makes cuStreamWaitValue64 a no-op: the missing wait
	// TestHostFuncDeviceWaitIsNeeded shows is caught.
	dropValueWaits bool
	// watches lets streams write their progress words
	// (cuStreamWriteValue64); off, as on a driver without it, unless a
	// test sets it. earlyWrites makes the write happen at the call,
	// before the stream's work: the wrong order a test shows is caught.
	watches, earlyWrites bool

	// counters
	records, waits, eventSyncs, streamSyncs, queries, launches, gemms, eventsMade, valueWaits, valueWrites int
}

type emuFunc struct {
	op kernels.Op
	dt kernels.DType
}

type emuOp struct {
	seq  uint64
	run  func()
	wait *emuStream // for a wait: runnable once wait.done >= pos
	pos  uint64
	// until, for a wait on host memory, is runnable once it holds: the
	// host writes that memory, so nothing on the device can make it so.
	until func() bool
}

type emuStream struct {
	ops   []emuOp // pending, in order
	total uint64  // ops ever submitted
	done  uint64  // ops ever run
	// capture, while the stream is captured, receives what is enqueued
	// on it instead (a graph's nodes), as CUDA's stream capture does.
	capture *[]emuOp
}

type emuEvent struct {
	s        *emuStream
	pos      uint64
	recorded bool
}

func newEmu() *emuBackend {
	return &emuBackend{next: 0x100, streams: map[uintptr]*emuStream{}, events: map[uintptr]*emuEvent{},
		funcs: map[uintptr]emuFunc{}, blas: map[uintptr]uintptr{}, mem: map[uint64][]byte{}, nextMem: 1 << 32,
		graphs: map[uintptr][]emuOp{}}
}

var _ backend = (*emuBackend)(nil)

func (f *emuBackend) handle() uintptr { f.next += 0x10; return f.next }

func (f *emuBackend) push(s *emuStream, op emuOp) {
	if s.capture != nil {
		*s.capture = append(*s.capture, op)
		return
	}
	f.seq++
	op.seq = f.seq
	s.ops = append(s.ops, op)
	s.total++
}

// step runs one op, the newest runnable head; false when none can run.
func (f *emuBackend) step() bool {
	var best *emuStream
	for _, s := range f.streams {
		if len(s.ops) == 0 {
			continue
		}
		h := s.ops[0]
		if h.wait != nil && h.wait.done < h.pos {
			continue
		}
		if h.until != nil && !h.until() {
			continue
		}
		if best == nil || h.seq > best.ops[0].seq {
			best = s
		}
	}
	if best == nil {
		return false
	}
	op := best.ops[0]
	best.ops = best.ops[1:]
	if op.run != nil {
		op.run()
	}
	best.done++
	return true
}

// runUntil steps until cond holds. When nothing can run but a stream
// waits for host memory, it lets go of the lock while the host (a host
// lane's goroutine) gets to write it, for up to 10 s.
func (f *emuBackend) runUntil(cond func() bool) error {
	var deadline time.Time
	for !cond() {
		if f.step() {
			continue
		}
		if !f.waitsOnHost() {
			return fmt.Errorf("emu: deadlock: nothing can run")
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(10 * time.Second)
		} else if time.Now().After(deadline) {
			return fmt.Errorf("emu: deadlock: a stream waits for host memory nobody writes")
		}
		f.mu.Unlock()
		time.Sleep(20 * time.Microsecond)
		f.mu.Lock()
	}
	return nil
}

func (f *emuBackend) waitsOnHost() bool {
	for _, s := range f.streams {
		if len(s.ops) > 0 && s.ops[0].until != nil {
			return true
		}
	}
	return false
}

func (f *emuBackend) streamMemOps() error { return f.noMemOps }

func (f *emuBackend) mappedAlloc(size uint64) (unsafe.Pointer, driver.DevicePtr, error) {
	if f.noMemOps != nil {
		return nil, 0, f.noMemOps
	}
	b := make([]uint64, (size+7)/8)
	p := unsafe.Pointer(&b[0])
	return p, driver.DevicePtr(uintptr(p)), nil // unified addressing
}

func (f *emuBackend) streamWaitValueGEQ(s uintptr, addr driver.DevicePtr, value uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	if f.noMemOps != nil {
		return f.noMemOps
	}
	f.valueWaits++
	if f.dropValueWaits {
		return nil
	}
	word := (*uint64)(cptrOf(uintptr(addr)))
	f.push(st, emuOp{until: func() bool { return atomic.LoadUint64(word) >= value }})
	return nil
}

func (f *emuBackend) streamWriteSupport() error {
	if !f.watches {
		return errors.New("emu: no stream writes")
	}
	return f.noMemOps
}

func (f *emuBackend) streamWriteValue(s uintptr, addr driver.DevicePtr, value uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	f.valueWrites++
	word := (*uint64)(cptrOf(uintptr(addr)))
	if f.earlyWrites {
		atomic.StoreUint64(word, value)
		return nil
	}
	f.push(st, emuOp{run: func() { atomic.StoreUint64(word, value) }})
	return nil
}

func (f *emuBackend) streamCreate() (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.handle()
	f.streams[h] = &emuStream{}
	return h, nil
}

func (f *emuBackend) stream(s uintptr) (*emuStream, error) {
	st := f.streams[s]
	if st == nil {
		return nil, fmt.Errorf("emu: bad stream %#x", s)
	}
	return st, nil
}

func (f *emuBackend) streamDestroy(s uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	// cuStreamDestroy lets pending work finish.
	if err := f.runUntil(func() bool { return len(st.ops) == 0 }); err != nil {
		return err
	}
	delete(f.streams, s)
	return nil
}

func (f *emuBackend) streamQuery(s uintptr) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stream(s)
	if err != nil {
		return false, err
	}
	return len(st.ops) == 0, nil
}

func (f *emuBackend) streamSynchronize(s uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	if st.capture != nil {
		// cuStreamSynchronize on a captured stream invalidates the capture.
		return fmt.Errorf("emu: stream %#x is being captured (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)", s)
	}
	f.streamSyncs++
	target := st.total
	return f.runUntil(func() bool { return st.done >= target })
}

func (f *emuBackend) eventCreate() (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.handle()
	f.events[h] = &emuEvent{}
	f.eventsMade++
	return h, nil
}

func (f *emuBackend) eventDestroy(e uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.events[e] == nil {
		return fmt.Errorf("emu: bad event %#x", e)
	}
	delete(f.events, e)
	return nil
}

func (f *emuBackend) eventRecord(e, s uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, st := f.events[e], f.streams[s]
	if ev == nil || st == nil {
		return fmt.Errorf("emu: bad event %#x or stream %#x", e, s)
	}
	*ev = emuEvent{s: st, pos: st.total, recorded: true}
	f.records++
	return nil
}

func (ev *emuEvent) reached() bool { return !ev.recorded || ev.s.done >= ev.pos }

func (f *emuBackend) eventQuery(e uintptr) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	ev := f.events[e]
	if ev == nil {
		return false, fmt.Errorf("emu: bad event %#x", e)
	}
	return ev.reached(), nil
}

func (f *emuBackend) eventSynchronize(e uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.events[e]
	if ev == nil {
		return fmt.Errorf("emu: bad event %#x", e)
	}
	f.eventSyncs++
	return f.runUntil(ev.reached)
}

func (f *emuBackend) streamWaitEvent(s, e uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, st := f.events[e], f.streams[s]
	if ev == nil || st == nil {
		return fmt.Errorf("emu: bad event %#x or stream %#x", e, s)
	}
	f.waits++
	if !ev.recorded {
		return nil // as in CUDA: waiting for a never-recorded event is a no-op
	}
	// The wait captures the newest record now.
	f.push(st, emuOp{wait: ev.s, pos: ev.pos})
	return nil
}

func (f *emuBackend) malloc(size uint64) (driver.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.nextMem
	f.mem[p] = make([]byte, size)
	f.nextMem += (size + 0xfff) &^ 0xfff
	f.nextMem += 0x1000 // a gap, so overruns hit nothing
	return driver.DevicePtr(p), nil
}

func (f *emuBackend) free(p driver.DevicePtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mem[uint64(p)] == nil {
		return fmt.Errorf("emu: free of unknown pointer %#x", p)
	}
	delete(f.mem, uint64(p))
	return nil
}

// bytesAt resolves [p, p+n) to host memory; the caller holds f.mu.
func (f *emuBackend) bytesAt(p uint64, n uint64) ([]byte, error) {
	for base, buf := range f.mem {
		if p >= base && p+n <= base+uint64(len(buf)) {
			return buf[p-base : p-base+n], nil
		}
	}
	return nil, fmt.Errorf("emu: %d bytes at %#x are not allocated (freed too early?)", n, p)
}

func (f *emuBackend) copyHtoD(dst driver.DevicePtr, src unsafe.Pointer, size uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.bytesAt(uint64(dst), size)
	if err != nil {
		return err
	}
	copy(d, unsafe.Slice((*byte)(src), size))
	return nil
}

func (f *emuBackend) copyDtoH(dst unsafe.Pointer, src driver.DevicePtr, size uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.bytesAt(uint64(src), size)
	if err != nil {
		return err
	}
	copy(unsafe.Slice((*byte)(dst), size), s)
	return nil
}

func (f *emuBackend) loadModule(ptx []byte) error {
	if len(ptx) == 0 || ptx[len(ptx)-1] != 0 {
		return fmt.Errorf("emu: the PTX is not NUL-terminated")
	}
	f.mu.Lock()
	f.loaded = true
	f.mu.Unlock()
	return nil
}

func (f *emuBackend) function(name string) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	op, dt, ok := kernels.ParseSymbol(name)
	if !f.loaded || !ok {
		return 0, fmt.Errorf("emu: no kernel %q", name)
	}
	h := f.handle()
	f.funcs[h] = emuFunc{op, dt}
	return h, nil
}

// launch reads the arguments the way the driver does, through the
// kernelParams pointer array, at enqueue time.
func (f *emuBackend) launch(fn uintptr, grid3, block3 [3]uint32, s uintptr, pb *cuda.ParamBlock) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.funcs[fn]
	st := f.streams[s]
	grid, block := grid3[0], block3[0]
	if !ok || st == nil || grid == 0 || block != BlockSize || grid3[1] != 1 || grid3[2] != 1 || block3[1] != 1 || block3[2] != 1 {
		return fmt.Errorf("emu: bad launch fn=%#x stream=%#x grid=%d block=%d", fn, s, grid, block)
	}
	ptrs := pb.Pointers()
	if len(ptrs) != len(kernels.Layout) {
		return fmt.Errorf("emu: %d kernel parameters, want %d", len(ptrs), len(kernels.Layout))
	}
	var vals [kernels.KernargSize]byte
	for i, spec := range kernels.Layout {
		n := int(spec.Size(k.dt))
		src := unsafe.Slice((*byte)(cptrOf(ptrs[i])), n)
		copy(vals[spec.Offset:], src)
	}
	args := kernels.DecodeArgs(vals[:], k.dt)
	f.launches++
	f.push(st, emuOp{run: func() {
		size := uint64(k.dt.Size())
		readsA, readsB := k.op.Reads()
		out, err := f.bytesAt(args.Out, args.N*size)
		var a, b []byte
		if err == nil && readsA {
			a, err = f.bytesAt(args.A, args.N*size)
		}
		if err == nil && readsB {
			b, err = f.bytesAt(args.B, args.N*size)
		}
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %w", k.op.KernelName(k.dt), err))
			return
		}
		kernels.RefBytes(k.op, k.dt, out, a, b, args.Alpha)
	}})
	return nil
}

// The fake runs no user code.
func (f *emuBackend) loadImage([]byte) (uint64, error) {
	return 0, errors.New("emu: the fake CUDA backend runs no user kernels")
}

func (f *emuBackend) functionIn(uint64, string) (uintptr, error) {
	return 0, errors.New("emu: the fake CUDA backend runs no user kernels")
}

// copyAsync runs the copy in stream order.
func (f *emuBackend) copyAsync(dir driver.CopyDirection, dst, src driver.DevicePtr, host unsafe.Pointer, size uint64, s uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[s]
	if st == nil {
		return fmt.Errorf("emu: bad stream %#x", s)
	}
	f.push(st, emuOp{run: func() {
		var from, to []byte
		var err error
		switch dir {
		case driver.HostToDevice:
			from = unsafe.Slice((*byte)(host), size)
			to, err = f.bytesAt(uint64(dst), size)
		case driver.DeviceToHost:
			to = unsafe.Slice((*byte)(host), size)
			from, err = f.bytesAt(uint64(src), size)
		default:
			if from, err = f.bytesAt(uint64(src), size); err == nil {
				to, err = f.bytesAt(uint64(dst), size)
			}
		}
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("copy: %w", err))
			return
		}
		copy(to, from)
	}})
	return nil
}

func (f *emuBackend) hostAlloc(size uint64) (unsafe.Pointer, error) {
	b := make([]byte, max(size, 1))
	return unsafe.Pointer(&b[0]), nil
}

func (f *emuBackend) hostFree(unsafe.Pointer) error { return nil }

func (f *emuBackend) call(fn func(stream uintptr) error, s uintptr) error { return fn(s) }

func cptrOf(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }

func (f *emuBackend) blasError() error { return f.noBLAS }

func (f *emuBackend) blasCreate(s uintptr) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streams[s] == nil {
		return 0, fmt.Errorf("emu: bad stream")
	}
	h := f.handle()
	f.blas[h] = s
	return h, nil
}

func (f *emuBackend) blasDestroy(h uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.blas, h)
	return nil
}

func (f *emuBackend) gemm(h uintptr, dt kernels.DType, transA, transB bool, m, n, k int, alpha float64,
	a driver.DevicePtr, lda int, b driver.DevicePtr, ldb int, beta float64, c driver.DevicePtr, ldc int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.blas[h]
	if !ok {
		return fmt.Errorf("emu: bad cuBLAS handle")
	}
	rowsA, rowsB := m, k
	if transA {
		rowsA = k
	}
	if transB {
		rowsB = n
	}
	if lda < max(1, rowsA) || ldb < max(1, rowsB) || ldc < max(1, m) {
		return fmt.Errorf("emu: bad leading dimension")
	}
	f.gemms++
	f.push(f.streams[s], emuOp{run: func() {
		size := uint64(dt.Size())
		colsA, colsB := k, n
		if transA {
			colsA = m
		}
		if transB {
			colsB = k
		}
		ab, err := f.bytesAt(uint64(a), uint64(lda*(colsA-1)+rowsA)*size)
		var bb, cb []byte
		if err == nil {
			bb, err = f.bytesAt(uint64(b), uint64(ldb*(colsB-1)+rowsB)*size)
		}
		if err == nil {
			cb, err = f.bytesAt(uint64(c), uint64(ldc*(n-1)+m)*size)
		}
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("gemm: %w", err))
			return
		}
		get := func(buf []byte, i int) float64 {
			if dt == kernels.F32 {
				return float64(math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])))
			}
			return math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:]))
		}
		set := func(buf []byte, i int, v float64) {
			if dt == kernels.F32 {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
			} else {
				binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(v))
			}
		}
		for j := 0; j < n; j++ {
			for i := 0; i < m; i++ {
				s := 0.0
				for p := 0; p < k; p++ {
					ai, bi := i+p*lda, p+j*ldb
					if transA {
						ai = p + i*lda
					}
					if transB {
						bi = j + p*ldb
					}
					s += get(ab, ai) * get(bb, bi)
				}
				v := alpha * s
				if beta != 0 {
					v += beta * get(cb, i+j*ldc)
				}
				set(cb, i+j*ldc, v)
			}
		}
	}})
	return nil
}

func (f *emuBackend) captureBegin(s uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	if st.capture != nil {
		return fmt.Errorf("emu: stream %#x is already captured", s)
	}
	st.capture = new([]emuOp)
	return nil
}

func (f *emuBackend) captureEnd(s uintptr) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stream(s)
	if err != nil {
		return 0, err
	}
	if st.capture == nil {
		return 0, fmt.Errorf("emu: stream %#x is not captured", s)
	}
	g := f.handle()
	f.graphs[g] = *st.capture
	st.capture = nil
	return g, nil
}

func (f *emuBackend) graphInstantiate(g uintptr) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	nodes, ok := f.graphs[g]
	if !ok {
		return 0, fmt.Errorf("emu: bad graph %#x", g)
	}
	delete(f.graphs, g)
	e := f.handle()
	f.graphs[e] = nodes
	return e, nil
}

func (f *emuBackend) graphDestroy(g uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.graphs[g]; !ok {
		return fmt.Errorf("emu: bad graph %#x", g)
	}
	delete(f.graphs, g)
	return nil
}

// graphLaunch enqueues the graph's nodes on s, in order: what the captured
// calls enqueued, their arguments as they were at capture.
func (f *emuBackend) graphLaunch(e, s uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	nodes, ok := f.graphs[e]
	st := f.streams[s]
	if !ok || st == nil || st.capture != nil {
		return fmt.Errorf("emu: bad graph launch %#x on %#x", e, s)
	}
	f.graphLaunches++
	for _, n := range nodes {
		f.push(st, emuOp{run: n.run})
	}
	return nil
}

// graphExecDestroy is graphDestroy: an instantiated graph lives in the
// same table as the graph it came from.
func (f *emuBackend) graphExecDestroy(e uintptr) error { return f.graphDestroy(e) }

func (f *emuBackend) blasSetStream(h, s uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.blas[h]; !ok || f.streams[s] == nil {
		return fmt.Errorf("emu: bad cuBLAS handle or stream")
	}
	f.blas[h] = s
	return nil
}

func (f *emuBackend) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.streams) != 0 {
		return fmt.Errorf("emu: %d streams left open", len(f.streams))
	}
	f.loaded = false // cuModuleUnload
	return nil
}

// pending is the number of ops not yet run on any stream.
func (f *emuBackend) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.streams {
		n += len(s.ops)
	}
	return n
}

// errors returns what the device saw go wrong.
func (f *emuBackend) errors() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// liveMem lists the allocations, for leak checks.
func (f *emuBackend) liveMem() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []uint64
	for p := range f.mem {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// openEmulated returns one emulated CUDA device (an H100's compute
// capability, 9.0), configured by configFor(0), in place of the driver's.
func openEmulated(configFor func(index int) driver.DeviceConfig) ([]driver.Device, error) {
	d, err := newDevice(newEmu(), configFor(0), 0, "emulated GPU", 9, 0)
	if err != nil {
		return nil, err
	}
	return []driver.Device{d}, nil
}

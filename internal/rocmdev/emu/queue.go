package emu

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// queue is an emulated HSA queue: a ring of AQL packets in host memory and
// a packet-processor goroutine.
type queue struct {
	m     *Machine
	dev   int
	agent int // clock index
	name  string
	ring  []byte
	hq    *hsa.Queue
	write atomic.Uint64
	rung  atomic.Int64 // newest doorbell value
	// The packet processor's read index sits on a cache line of its own,
	// as in ROCr's amd_queue_t: the host adds to the write index and the
	// processor stores the read index for every packet, and on one line
	// the two would bounce it between cores.
	_    [64]byte
	read atomic.Uint64
	// idle is set while the packet processor has nothing to do, so that
	// only a doorbell that finds it idle pays for the channel send that
	// wakes it (a GPU's doorbell, likewise, costs the host one store).
	idle    atomic.Bool
	_       [64]byte
	kick    chan struct{}
	done    chan struct{}
	exited  chan struct{}
	onError hsa.QueueErrorFunc
	delay   *delayer

	clockMu sync.Mutex
	vc      vclock // joined completions: where a packet with the barrier bit starts
	startVC vclock // where the newest packet started: all a packet without it follows
	seq     uint32
	rings   []rung // host clocks at doorbell rings, when hazards are on

	inflight  sync.WaitGroup // dispatches running without the barrier bit
	broken    atomic.Bool
	cause     atomic.Pointer[error] // why the queue first failed (QueueErrorCause)
	stopping  atomic.Bool
	waitingOn atomic.Pointer[signal] // the signal a barrier is blocked on
	profiling atomic.Bool            // hsa_amd_profiling_set_profiler_enabled
}

type rung struct {
	index int64
	vc    vclock
}

func (m *Machine) newQueue(dev int, id uint64, size uint32, onError hsa.QueueErrorFunc) *queue {
	q := &queue{m: m, dev: dev, agent: m.newAgent(), name: fmt.Sprintf("hsa-queue gpu%d/q%d", dev, id),
		kick: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{}), onError: onError}
	q.delay = m.newDelayer(q.agent)
	buf := make([]byte, int(size)*hsa.PacketSize+hsa.PacketSize)
	off := (hsa.PacketSize - uintptr(unsafe.Pointer(&buf[0]))%hsa.PacketSize) % hsa.PacketSize
	q.ring = buf[off : off+uintptr(size)*hsa.PacketSize]
	for i := 0; i < int(size); i++ {
		// The runtime initialises every slot to INVALID.
		q.ring[i*hsa.PacketSize] = byte(hsa.PacketTypeInvalid)
	}
	db := m.newSignal(0, false)
	m.signal(db).doorbell = q
	q.rung.Store(-1)
	q.hq = &hsa.Queue{Handle: unsafe.Pointer(q), Base: unsafe.Pointer(&q.ring[0]), Doorbell: db, Size: size, ID: id}
	go q.process()
	return q
}

// ringDoorbell is the doorbell store: it records the host clock for the packets up
// to index and wakes the packet processor.
func (q *queue) ringDoorbell(index int64) {
	q.m.doorbells.Add(1)
	if vc := q.m.hostSnapshot(); vc != nil {
		q.clockMu.Lock()
		q.rings = append(q.rings, rung{index: index, vc: vc})
		q.clockMu.Unlock()
	}
	if index > q.rung.Load() {
		q.rung.Store(index)
	}
	// The processor sets idle before it looks at rung a last time, and
	// this reads idle after storing rung: one of the two sees the other.
	if !q.idle.Load() {
		return
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// hostClockFor returns the host clock of the doorbell ring that published
// packet index.
func (q *queue) hostClockFor(index uint64) vclock {
	q.clockMu.Lock()
	defer q.clockMu.Unlock()
	for len(q.rings) > 0 && q.rings[0].index < int64(index) {
		q.rings = q.rings[1:]
	}
	if len(q.rings) == 0 {
		return nil
	}
	return q.rings[0].vc
}

func (q *queue) stop() {
	q.stopping.Store(true)
	close(q.done)
	if s := q.waitingOn.Load(); s != nil {
		s.notify()
	}
	<-q.exited
}

func (q *queue) process() {
	defer close(q.exited)
	// stalledAt is the doorbell value when the last pass stopped at a
	// header not yet published (-1: it did not); only a later ring
	// brings that header.
	stalledAt := int64(-1)
	for {
		q.idle.Store(true)
		if q.broken.Load() || int64(q.read.Load()) > q.rung.Load() || (stalledAt >= 0 && q.rung.Load() == stalledAt) {
			select {
			case <-q.kick:
			case <-q.done:
				q.inflight.Wait()
				return
			}
		}
		q.idle.Store(false)
		stalledAt = -1
		for !q.broken.Load() {
			idx := q.read.Load()
			if int64(idx) > q.rung.Load() {
				break
			}
			slot := hsa.Slot(q.hq, idx)
			first := hsa.LoadHeader(slot)
			if hsa.HeaderType(uint16(first)) == hsa.PacketTypeInvalid {
				stalledAt = q.rung.Load()
				break // rung before the header was published; a later ring follows
			}
			if !q.execute(idx, slot, uint16(first)) {
				return
			}
			hsa.PublishHeader(slot, hsa.InvalidFirstWord)
			q.read.Store(idx + 1)
		}
	}
}

// fail breaks the queue the way a hardware fault does: the error callback
// runs, the failing packet's signal is never decremented, and nothing after
// it is processed.
func (q *queue) fail(status hsa.Status, why string) {
	q.failErr(status, errors.New(why))
}

// failErr is fail with the reason as an error, which the queue's
// QueueErrorCause reports beside the status.
func (q *queue) failErr(status hsa.Status, cause error) {
	q.cause.CompareAndSwap(nil, &cause)
	q.broken.Store(true)
	if status == hsa.StatusErrorMemoryApertureViolation && q.m.hsa.events.noQueueError.Load() {
		return // evicted without a queue error: only the system event reports it
	}
	if q.onError != nil {
		go func() {
			q.onError(status)
			if status == hsa.StatusErrorMemoryApertureViolation {
				q.m.hsa.events.queueErrorReported(q.dev)
			}
		}()
	}
}

// execute runs one packet; it returns false when the queue was destroyed
// while the packet waited.
func (q *queue) execute(idx uint64, slot *[hsa.PacketSize]byte, header uint16) bool {
	barrier := hsa.HeaderBarrier(header)
	if barrier {
		q.inflight.Wait()
	}
	q.m.hsa.countFences(header)
	switch hsa.HeaderType(header) {
	case hsa.PacketTypeKernelDispatch:
		act := q.actor(idx, barrier, "dispatch", header)
		if !barrier {
			q.launchConcurrent(hsa.DecodeDispatch(slot[:]), act)
			return true
		}
		p := hsa.DecodeDispatch(slot[:])
		q.dispatch(&p, act)
	case hsa.PacketTypeBarrierAnd, hsa.PacketTypeBarrierOr:
		p := hsa.DecodeBarrierAnd(slot[:])
		act := q.actor(idx, barrier, "barrier", header)
		if !q.barrier(&p, hsa.HeaderType(header) == hsa.PacketTypeBarrierAnd, act) {
			return false
		}
	default:
		q.fail(hsa.StatusErrorInvalidPacket, fmt.Sprintf("packet type %d", hsa.HeaderType(header)))
	}
	return true
}

// launchConcurrent runs a dispatch without the barrier bit alongside the
// packets still running.
func (q *queue) launchConcurrent(p hsa.DispatchPacket, act *actor) {
	q.inflight.Add(1)
	go func() {
		defer q.inflight.Done()
		q.dispatch(&p, act)
	}()
}

// actor builds the clock of the op in packet idx. A packet with the barrier
// bit follows every earlier packet of the queue; one without it may run
// alongside the ones still running, so it gets a fresh clock index.
func (q *queue) actor(idx uint64, barrier bool, kind string, header uint16) *actor {
	if !q.m.opts.Hazards {
		return nil
	}
	host := q.hostClockFor(idx)
	q.clockMu.Lock()
	defer q.clockMu.Unlock()
	a := &actor{where: q.name, what: fmt.Sprintf("%s packet #%d", kind, idx), scoped: true, release: hsa.HeaderReleaseScope(header)}
	// Packets launch in order, but only the barrier bit waits for the
	// earlier ones to complete.
	if barrier {
		a.vc = q.vc.clone()
	} else {
		a.vc = q.startVC.clone()
	}
	a.vc.join(host)
	q.startVC = a.vc.clone()
	if barrier {
		q.seq++
		a.agent, a.seq = q.agent, q.seq
	} else {
		a.agent, a.seq = q.m.newAgent(), 1
	}
	a.vc.set(a.agent, a.seq)
	if hsa.HeaderAcquireScope(header) == hsa.FenceScopeSystem {
		// At launch, before a barrier-AND waits for its signals: the
		// acquire is part of a packet's launch in HSA's packet
		// processing, and this is the strict reading, under which a
		// barrier's acquire does not cover what the producers it waits
		// for wrote. rocsync's barriers acquire nothing with agent-scope
		// fences; its kernels acquire for themselves.
		q.m.systemAcquire(q.dev, a)
	}
	return a
}

// complete publishes an op's completion: later barrier packets of the queue
// follow it, and so does whoever observes its signal.
func (q *queue) complete(sig hsa.Signal, a *actor) {
	var vc vclock
	if a != nil {
		q.clockMu.Lock()
		q.vc.join(a.vc)
		q.clockMu.Unlock()
		vc = a.vc
		if a.release == hsa.FenceScopeSystem {
			// Before the signal: whoever observes it sees the write-back.
			q.m.systemRelease(q.dev, a.vc)
		}
	}
	if sig != 0 {
		if s := q.m.signal(sig); s != nil {
			if s.interrupt {
				// The packet processor writes an interrupt signal's event
				// mailbox and raises an end-of-pipe interrupt.
				q.m.hsa.interrupts.Add(1)
			}
			s.addFrom(-1, vc)
		}
	}
}

func (q *queue) dispatch(p *hsa.DispatchPacket, a *actor) {
	q.m.waitGate()
	q.profileStart(p.CompletionSignal)
	q.delay.sleep()
	dims := p.Setup & 3
	if dims == 0 || p.WorkgroupSize[0] == 0 {
		q.fail(hsa.StatusErrorInvalidPacket, "bad dispatch geometry")
		return
	}
	k := q.m.hsa.kernel(p.KernelObject)
	if k == nil || (!k.implemented && k.user == nil) {
		q.fail(hsa.StatusErrorMemoryFault, fmt.Sprintf("kernel object %#x", p.KernelObject))
		return
	}
	if a != nil {
		a.what = fmt.Sprintf("%s (%s)", k.symbol, a.what)
	}
	// The packet's group segment size is the whole LDS allocation: the
	// kernel's static LDS plus any dynamic part.
	if p.GroupSegmentSize < k.groupSize || p.GroupSegmentSize > LDSPerWorkgroup {
		q.fail(hsa.StatusErrorInvalidAllocation, fmt.Sprintf("group segment %d bytes (kernel needs %d, limit %d)", p.GroupSegmentSize, k.groupSize, LDSPerWorkgroup))
		return
	}
	if q.m.injectFault(k.symbol) {
		q.fail(hsa.StatusErrorMemoryFault, injectedFault+" in "+k.symbol)
		return
	}
	args, err := q.m.gpuSpan(q.dev, p.KernargAddress, uint64(k.kernargSize), false, nil)
	if err != nil {
		q.fail(faultStatus(err), err.Error())
		return
	}
	grid := uint64(p.GridSize[0]) * uint64(max(p.GridSize[1], 1)) * uint64(max(p.GridSize[2], 1))
	if err := k.checkGeometry(p.GridSize, p.WorkgroupSize); err != nil {
		q.m.kernelFault(err)
		q.fail(hsa.StatusErrorInvalidPacket, err.Error())
		return
	}
	if k.user != nil {
		g := userkernel.Geometry{Dims: int(dims)}
		for i := range g.Grid {
			g.Grid[i], g.Workgroup[i] = p.GridSize[i], uint32(p.WorkgroupSize[i])
		}
		err = q.m.runUserKernel(q.dev, k, args, g, a)
	} else {
		err = q.m.runKernel(q.dev, k, args, grid, a)
	}
	if err != nil {
		// The dispatch stops here and touches nothing more: the host,
		// which learns of it only through the queue's error, is ordered
		// after what it did (a recovery that rewrites its output is not
		// a race with it).
		q.m.hostAcquire(a.clock())
		q.failErr(faultStatus(err), err)
		return
	}
	q.profileEnd(p.CompletionSignal)
	q.complete(p.CompletionSignal, a)
}

// faultStatus is the queue error a failed access raises. A GPU touching
// memory not mapped to it is a VM fault, which KFD reports to the queue as
// EC_DEVICE_MEMORY_VIOLATION and ROCr 5.2 (amd_aql_queue.cpp) hands to the
// queue's callback as HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION. (ROCr
// also aborts the process from its VM-fault handler unless a system event
// handler is registered; the emulator reports the queue error only.)
func faultStatus(err error) hsa.Status {
	if errors.Is(err, ErrNoAccess) {
		return hsa.StatusErrorMemoryApertureViolation
	}
	return hsa.StatusErrorMemoryFault
}

// runKernel executes an elementwise kernel over its whole range on GPU
// dev; the real kernels use a grid-stride loop, so any grid of at least
// one work-item covers every element.
func (m *Machine) runKernel(dev int, k *kernelImpl, kernarg []byte, grid uint64, a *actor) error {
	if k.isReduction {
		return m.runReduction(dev, k, kernarg, grid, a)
	}
	args := kernels.DecodeArgs(kernarg, k.dt)
	if grid == 0 || args.N == 0 {
		return nil
	}
	n := args.N * uint64(k.dt.Size())
	readA, readB := k.op.Reads()
	var in1, in2 []byte
	var err error
	if readA {
		if in1, err = m.gpuSpan(dev, args.A, n, false, a); err != nil {
			return err
		}
	}
	if readB {
		if in2, err = m.gpuSpan(dev, args.B, n, false, a); err != nil {
			return err
		}
	}
	out, err := m.gpuSpan(dev, args.Out, n, true, a)
	if err != nil {
		return err
	}
	kernels.RefBytes(k.op, k.dt, out, in1, in2, args.Alpha)
	return nil
}

// runUserKernel runs a kernel that is not rocsync's through its registered
// reference, whose memory accesses go through the GPU's mappings and the
// hazard checker like a kernel's.
func (m *Machine) runUserKernel(dev int, k *kernelImpl, kernarg []byte, g userkernel.Geometry, a *actor) error {
	if m.opts.References == nil {
		return fmt.Errorf("%w: %s (no references registered)", userkernel.ErrNoReference, k.symbol)
	}
	mem := &gpuMemory{m: m, dev: dev, a: a}
	err := m.opts.References.Run(k.user, g, kernarg, mem)
	mem.recordWrites()
	return err
}

// gpuMemory is a GPU's view of memory, for user kernels' references.
//
// A reference asks for writable memory wherever the kernel's metadata
// says a buffer may be written (a pointer not declared const), whether or
// not the kernel writes it: OpenCL code leaves read-only inputs non-const
// often. So, with the hazard checker on, such a span is recorded as read
// when handed out and as written only if its bytes changed by the time
// the reference returns: two kernels that only read a shared input are
// not a race. (A write of the bytes already there goes unrecorded; it
// changes nothing another access could see.)
type gpuMemory struct {
	m       *Machine
	dev     int
	a       *actor
	written []heldSpan
}

// heldSpan is a writable span handed to a reference and its bytes then.
type heldSpan struct {
	ptr    uint64
	now    []byte
	before []byte
}

func (g *gpuMemory) Bytes(ptr, size uint64, write bool) ([]byte, error) {
	if !write || g.a == nil || !g.m.opts.Hazards {
		return g.m.gpuSpan(g.dev, ptr, size, write, g.a)
	}
	b, err := g.m.gpuSpan(g.dev, ptr, size, false, g.a)
	if err == nil && len(b) > 0 {
		g.written = append(g.written, heldSpan{ptr: ptr, now: b, before: bytes.Clone(b)})
	}
	return b, err
}

// recordWrites records the writes of the spans whose bytes changed.
func (g *gpuMemory) recordWrites() {
	for _, h := range g.written {
		if !bytes.Equal(h.now, h.before) {
			_, _ = g.m.gpuSpan(g.dev, h.ptr, uint64(len(h.now)), true, g.a)
		}
	}
}

// barrier waits for the dependency signals (AND: all reach 0; OR: any
// does) and then completes.
func (q *queue) barrier(p *hsa.BarrierAndPacket, and bool, a *actor) bool {
	q.m.waitGate()
	q.delay.sleep()
	var depBuf [hsa.BarrierAndMaxDependencies]*signal
	deps := depBuf[:0]
	for _, h := range p.DepSignals {
		if h == 0 {
			continue
		}
		s := q.m.signal(h)
		if s == nil {
			q.fail(hsa.StatusErrorInvalidSignal, "barrier dependency")
			return true
		}
		deps = append(deps, s)
	}
	for {
		met := 0
		var unmet *signal
		for _, s := range deps {
			if s.v.Load() == 0 {
				met++
			} else if unmet == nil {
				unmet = s
			}
		}
		if (and && met == len(deps)) || (!and && (met > 0 || len(deps) == 0)) {
			break
		}
		if q.stopping.Load() {
			return false
		}
		// Wait for one unmet signal to change; stop() wakes it too.
		q.waitingOn.Store(unmet)
		unmet.waitDevice(func(v int64) bool { return v == 0 }, q.stopping.Load)
		q.waitingOn.Store(nil)
	}
	if a != nil {
		q.clockMu.Lock()
		for _, s := range deps {
			if s.v.Load() == 0 {
				a.vc.join(s.clock())
			}
		}
		q.clockMu.Unlock()
	}
	q.complete(p.CompletionSignal, a)
	return true
}

// checkGeometry refuses a launch whose workgroup is not the kernel's
// .reqd_workgroup_size, or whose grid is not a whole number of
// workgroups when it requires one: the reductions assume exactly 256
// work-items in every workgroup, and on hardware another shape gives wrong
// sums (or reads LDS no work-item wrote) without any error. grid and wg are
// work-items per dimension (AQL's grid_size; HIP's grid*block).
func (k *kernelImpl) checkGeometry(grid [3]uint32, wg [3]uint16) error {
	if k.reqdWorkgroup == ([3]uint32{}) {
		return nil
	}
	for d := range 3 {
		want := max(k.reqdWorkgroup[d], 1)
		if uint32(max(wg[d], 1)) != want {
			return fmt.Errorf("%w: %s dispatched with workgroup %v, its metadata requires %v",
				ErrKernelLaunch, k.symbol, wg, k.reqdWorkgroup)
		}
		if g := max(grid[d], 1); g%want != 0 {
			return fmt.Errorf("%w: %s dispatched with grid %v, not a whole number of %v workgroups",
				ErrKernelLaunch, k.symbol, grid, k.reqdWorkgroup)
		}
	}
	return nil
}

// ErrKernelLaunch is matched (errors.Is) by the errors of a kernel launch
// the emulator refuses where the hardware would compute garbage: a
// workgroup shape the kernel does not allow, or a reduction whose
// workspace is not zero (kernels.ErrWorkspaceNotZero matches too).
var ErrKernelLaunch = errors.New("emu: kernel launch refused")

// runReduction runs a rocsync_sum_* kernel: it reads the input, writes the
// outputs, and reads and writes the workspace, each through the hazard
// checker, then computes with kernels.ReduceBytes, which checks that the
// workspace is zero on entry (nvFuser's checkZeroed) and leaves it zero. A
// dirty workspace is a kernel fault: on a GPU the semaphores would count
// wrong and the sums would be missing or wrong, silently.
func (m *Machine) runReduction(dev int, k *kernelImpl, kernarg []byte, grid uint64, a *actor) error {
	args := kernels.DecodeReduceArgs(kernarg)
	if grid == 0 {
		return nil
	}
	shape, err := k.reduction.Shape(args.Rows, args.Cols)
	if err != nil {
		return m.kernelFault(fmt.Errorf("%w: %s: %v", ErrKernelLaunch, k.symbol, err))
	}
	size := uint64(k.dt.Size())
	in, err := m.gpuSpan(dev, args.In, args.Rows*args.Cols*size, false, a)
	if err != nil {
		return err
	}
	wsSize := shape.WorkspaceSize(k.dt)
	var ws []byte
	if wsSize > 0 {
		// Read (the semaphores and partials, checked zero) and written
		// (partials, counts, the reset): both accesses are recorded.
		if _, err = m.gpuSpan(dev, args.Workspace, wsSize, false, a); err != nil {
			return err
		}
		if ws, err = m.gpuSpan(dev, args.Workspace, wsSize, true, a); err != nil {
			return err
		}
	}
	out, err := m.gpuSpan(dev, args.Out, shape.Outputs*size, true, a)
	if err != nil {
		return err
	}
	if err := kernels.ReduceBytes(k.reduction, k.dt, out, in, ws, args.Rows, args.Cols); err != nil {
		return m.kernelFault(fmt.Errorf("%w: %s: %w", ErrKernelLaunch, k.symbol, err))
	}
	return nil
}

// kernelFault records err for KernelFaults and returns it.
func (m *Machine) kernelFault(err error) error {
	m.kfMu.Lock()
	m.kernelFaults = append(m.kernelFaults, err)
	m.kfMu.Unlock()
	return err
}

// KernelFaults returns the kernel launches the emulator refused (see
// ErrKernelLaunch), in the order they ran: the queue error or sticky
// stream error they cause carries only a status code, these say why.
func (m *Machine) KernelFaults() []error {
	m.kfMu.Lock()
	defer m.kfMu.Unlock()
	return append([]error(nil), m.kernelFaults...)
}

// Package queue submits AQL packets to HSA queues: kernel dispatches and
// barrier-AND packets, with the real publishing protocol (reserve a write
// index, write the body, publish the header with one atomic release store,
// ring the doorbell). The same code drives the real runtime and the
// emulated device.
//
// A Queue is also a syncstate.Timeline: packet i carries ticket i+1 and a
// pooled completion signal, and every packet sets the barrier bit, so
// completion is in order and one watermark says what is done.
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/internal/traceopt"
	"github.com/rocsync/rocsync/syncstate"
)

// KernargSlot is the kernarg bytes reserved per ring slot. Kernel argument
// blocks must be 16-byte aligned and may not change until their dispatch
// completes; one slot per packet index gives both for free. 512 bytes hold
// 256 bytes of explicit arguments and the implicit-argument area after
// them: from code object v5 a kernel that uses any hidden argument (HIP's
// blockDim is one) reserves the whole 256-byte area (LLVM AMDGPUUsage,
// "Code Object V5 Metadata": the hidden arguments lie within 256 bytes
// after the explicit ones), so clang-22's gfx90a build of
// k(float*, int) reading blockDim has a 272-byte kernarg segment in v5 and
// v6 against 12 in v4. A ring of 1024 slots costs 512 KiB of kernarg
// memory; a larger block is refused with ErrKernargTooLarge.
const KernargSlot = 512

// ErrQueueBroken wraps the asynchronous error that stopped a queue.
var ErrQueueBroken = errors.New("queue: HSA queue error")

// ErrKernargTooLarge is returned for argument blocks over KernargSlot bytes.
var ErrKernargTooLarge = errors.New("queue: kernel arguments exceed the kernarg slot")

// Dispatch describes one kernel launch.
type Dispatch struct {
	KernelObject uint64
	Grid         uint32 // work-items (AQL counts work-items, not workgroups)
	Workgroup    uint16
	// Dims is the number of dimensions (0 means 1); GridYZ and
	// WorkgroupYZ are the second and third (0 means 1).
	Dims               uint16
	GridYZ             [2]uint32
	WorkgroupYZ        [2]uint16
	PrivateSegmentSize uint32
	GroupSegmentSize   uint32
	Kernarg            []byte // copied into the queue's kernarg slot
}

type entry struct {
	sig  *Signal
	deps [hsa.BarrierAndMaxDependencies]*Signal
	// system says the packet releases at system scope: once it completes,
	// what every packet up to it wrote is visible outside its GPU.
	system bool
}

// Queue is one HSA queue with its completion tracking.
type Queue struct {
	rt    hsa.Runtime
	agent hsa.Agent
	hq    *hsa.Queue
	// created is hq as QueueCreate returned it, for the error callback,
	// which the runtime calls from its own thread while Close may clear hq.
	created atomic.Pointer[hsa.Queue]
	name    string
	signals *SignalPool
	// wake, when set, holds the interrupt signals of the markers a host
	// waiter blocks on (Config.WakeSignals); wakeTicket, under mu, is the
	// newest such marker's ticket (0: none).
	wake        *SignalPool
	wakeTicket  uint64
	kernargPool hsa.MemoryPool
	kernarg     unsafe.Pointer
	sinks       syncstate.Sinks
	mask        uint64
	timeout     time.Duration
	maxInFlight uint64
	// retireBatch is how many packets may be in flight before a
	// submission retires the completed ones: retiring each time costs a
	// signal load that finds the newest packet still running.
	retireBatch uint64
	sinceRetire uint64 // submissions since the last retire, under mu
	onThrottle  func(syncstate.Fence) error
	place       uint64

	mu         sync.Mutex
	lastTicket atomic.Uint64
	completed  atomic.Uint64
	// inflight holds the packets not yet retired: ticket t (packet index
	// t-1) sits in slot (t-1)&mask, and the tickets from completed+1 to
	// lastTicket are the ones in flight.
	inflight  []entry
	readIndex uint64 // the packet processor's read index as last loaded, under mu
	// spare holds retired completion signals of the queue's own pool that
	// nothing else referenced, for the next packets, under mu: reusing
	// them skips the pool's lock twice per packet.
	spare     []*Signal
	brokenErr atomic.Pointer[error]
	// health says which tickets failed: from the queue's own fault on, or
	// behind a barrier that waited for a fence that failed.
	health syncstate.Health
	// hostDeps are the host functions the queue waits for on the device.
	hostDeps syncstate.HostDeps
	// brokenMu guards the two reports brokenErr is made of: the queue's
	// own error callback and a cause reported outside it (Break).
	brokenMu    sync.Mutex
	queueErr    error
	externalErr error
	// published, under brokenMu, says brokenErr is set: a queue error
	// held for its outside cause (OnMemoryViolation) is recorded but not
	// yet published.
	published bool
	// onMemoryViolation is Config.OnMemoryViolation.
	onMemoryViolation func(q *Queue)
	// brokenFrom is the first ticket the break failed (0: not broken).
	brokenFrom atomic.Uint64
	// release completes a broken queue's failed packets' signals (see
	// releaseBroken); stopped, it gives up waiting and completes the rest
	// at once (Close).
	release syncstate.Settler

	// bridge, when set, turns a fence of another domain into a signal
	// that reaches 0 once the fence completes (the DeviceBridge policy).
	bridge func(syncstate.Fence) (*Signal, error)
	// hostBridge, when set, does the same for fences of host lanes: the
	// lane completes the signal after the function.
	hostBridge func(syncstate.Fence) (*Signal, error)

	// timing, under mu, is the dispatch profiling EnableTiming turned on.
	timing     *timing
	timingLost atomic.Uint64
	// replaySigs, under mu, holds a timed replay's per-packet signals
	// while it is submitted (reused: no allocation per replay).
	replaySigs []*Signal

	// agentScope is Config.AgentScope; flush is Config.Flush.
	agentScope bool
	flush      func() error
	// visible is the newest ticket whose writes are known visible outside
	// the GPU: a packet at or after it that releases at system scope has
	// completed (or a flush has followed it). sysLast, under mu, is the
	// newest ticket whose packet releases at system scope.
	visible atomic.Uint64
	sysLast uint64
	// breakMu serializes releaseBeforeBreak and acquireAfterBreak;
	// flushedAfterBreak says a flush has begun since the break (flushGPU).
	breakMu           sync.Mutex
	flushedAfterBreak atomic.Bool
	// acquireNext says the next dispatch acquires at system scope (see
	// AcquireSystem); a dispatch clears it under mu as it takes it.
	acquireNext atomic.Bool
}

// SetBridge lets the queue wait on the device for fences of other domains:
// bridge returns a retained signal that completes with the fence, or nil
// when it is already complete.
func (q *Queue) SetBridge(bridge func(syncstate.Fence) (*Signal, error)) { q.bridge = bridge }

// SetHostBridge lets the queue wait on the device for fences of host lanes
// (syncstate.DomainHost), with a signal the lane completes, as SetBridge.
func (q *Queue) SetHostBridge(bridge func(syncstate.Fence) (*Signal, error)) { q.hostBridge = bridge }

// SignalFor returns a retained completion signal for ticket t (release it),
// or nil when t is already complete.
func (q *Queue) SignalFor(t uint64) *Signal { return q.signalFor(t) }

// Config says where a Queue gets its resources.
type Config struct {
	Name        string
	Agent       hsa.Agent
	Size        uint32 // ring size in packets, a power of two
	KernargPool hsa.MemoryPool
	Signals     *SignalPool
	// WakeSignals, when set, are interrupt signals (hsa_amd_signal_create
	// with no GPU-only attribute), and Signals are GPU-only ones: then no
	// packet raises an end-of-pipe interrupt except a marker submitted
	// for a host that blocks (WaitHost). Unset, every packet's completion
	// signal comes from Signals and a host blocks on it directly.
	//
	// Why: the packet processor raises an interrupt for a completion
	// signal that has an event mailbox, and ROCr gives one to every
	// interrupt signal (InterruptSignal; a GPU-only signal is a
	// BusyWaitSignal without one, core/runtime/default_signal.cpp), so a
	// dispatch per interrupt signal costs an interrupt and the driver's
	// event work. A host waiting on a GPU-only signal makes ROCr poll
	// (BusyWaitSignal::WaitRelaxed), so rocsync never does: it blocks on
	// a marker's interrupt signal, or polls the value itself where it
	// cannot submit one (the ring is full).
	WakeSignals *SignalPool
	Sinks       syncstate.Sinks
	// WaitTimeout bounds every host wait (0: none); past it the wait
	// returns a *syncstate.TimeoutError naming the fence.
	WaitTimeout time.Duration
	// MaxInFlight caps the packets in flight (0: the ring size - 1):
	// past it, submitting waits on the host for the oldest (a throttle
	// wait).
	MaxInFlight int
	// OnThrottle, if set, is told of every throttle wait before it is
	// made; an error refuses it and the submission fails with it.
	OnThrottle func(f syncstate.Fence) error
	// Place identifies the device the queue runs on (syncstate.Placed;
	// 0: unknown).
	Place uint64
	// OnMemoryViolation, when set, is told of a queue error with
	// HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION that arrives before any
	// outside cause, and the queue holds that error back until Break
	// brings the cause: the same VM fault also arrives as a system event,
	// which names the address, and on ROCr 6.x either report may come
	// first (both are async signal handlers of ROCr's event thread). The
	// callee must make sure Break follows; it runs on a runtime thread
	// and must not block.
	OnMemoryViolation func(q *Queue)
	// AgentScope makes kernel dispatches and barrier-AND packets release
	// at agent scope: what they write is visible to later packets of the
	// GPU's queues (which share its L2), and reaches anything outside it
	// (the host, a copy engine, another GPU, a HIP stream, whose copies
	// bypass the L2) only through a packet that releases at system scope.
	// On gfx90a and gfx942 a system-scope release writes back the whole
	// L2 (LLVM AMDGPUUsage, "Memory Model GFX90A"/"GFX942": buffer_wbl2),
	// which an agent-scope one does not: HIP releases kernels at agent
	// scope too (clr rocvirtual.cpp, VirtualGPU::create with
	// AMD_OPT_FLUSH=1, the default, as of rocm-6.2.0) and puts a
	// system-scope barrier where the host or a copy takes over
	// (VirtualGPU::releaseGpuMemoryFence, kBarrierPacketHeader; event
	// markers, submitMarker). The queue makes every hand-off outside the
	// GPU follow such a release: a host wait waits for a marker that
	// releases at system scope, Marker's packets release at system scope,
	// a barrier-AND on another GPU waits for one, and Completed counts a
	// ticket complete only once one has followed it.
	//
	// With AgentScope, kernel dispatches also acquire at agent scope,
	// which invalidates the GPU's L1 and scalar caches but not its L2:
	// what the host, a copy engine or another GPU wrote into memory the
	// L2 still holds an older copy of is seen only after a system-scope
	// acquire, which invalidates the L2 too (LLVM AMDGPUUsage, "Memory
	// Model GFX90A": buffer_invl2; "GFX942": buffer_inv at system scope). HIP
	// acquires its kernels at agent scope too (the same VirtualGPU::create)
	// and at system scope where outside data enters (addSystemScope_, and
	// kBarrierPacketAcquireHeader). Here an op that may read such data
	// asks for a system-scope acquire (AcquireSystem, which
	// syncstate.Acquirer says when), and a recording's replay acquires at
	// system scope on its first packet.
	//
	// Unset, every packet acquires and releases at system scope.
	AgentScope bool
	// Flush, required with AgentScope, makes every write the GPU's
	// queues completed before the call visible outside the GPU, without
	// waiting for anything else: a packet that releases at system scope on
	// another queue of the same GPU, which waits for nothing (the L2
	// write-back is of the whole L2). A host wait uses it for a ticket
	// that no such release follows and after which no marker can go (a
	// packet behind it may wait for that very host).
	Flush func() error
}

// New creates the HSA queue and its kernarg ring.
func New(rt hsa.Runtime, c Config) (*Queue, error) {
	if c.Size == 0 || c.Size&(c.Size-1) != 0 {
		return nil, fmt.Errorf("queue: size %d is not a power of two", c.Size)
	}
	if c.AgentScope && c.Flush == nil {
		return nil, fmt.Errorf("queue: %s: AgentScope without Flush", c.Name)
	}
	q := &Queue{rt: rt, agent: c.Agent, name: c.Name, signals: c.Signals, wake: c.WakeSignals, sinks: c.Sinks, kernargPool: c.KernargPool, timeout: c.WaitTimeout,
		onThrottle: c.OnThrottle, place: c.Place, onMemoryViolation: c.OnMemoryViolation, agentScope: c.AgentScope, flush: c.Flush}
	hq, err := rt.QueueCreate(c.Agent, c.Size, hsa.QueueTypeSingle, q.onError)
	if err != nil {
		return nil, err
	}
	q.hq = hq
	q.created.Store(hq)
	q.mask = uint64(hq.Size - 1)
	q.inflight = make([]entry, hq.Size)
	q.maxInFlight = uint64(hq.Size - 1)
	if c.MaxInFlight > 0 && uint64(c.MaxInFlight) < q.maxInFlight {
		q.maxInFlight = uint64(c.MaxInFlight)
	}
	q.retireBatch = min(32, max(q.maxInFlight/2, 1))
	q.spare = make([]*Signal, 0, q.maxInFlight+1)
	q.kernarg, err = rt.MemoryPoolAllocate(c.KernargPool, uint64(hq.Size)*KernargSlot)
	if err != nil {
		_ = rt.QueueDestroy(hq)
		return nil, err
	}
	// ROCr maps CPU-pool memory to no GPU until it is allowed access: the
	// packet processor reads the kernargs from it, so without this the
	// first dispatch faults on a discrete GPU.
	if !testhooks.SkipKernargAllowAccess.Load() {
		if err := rt.AgentsAllowAccess([]hsa.Agent{c.Agent}, q.kernarg); err != nil {
			_ = rt.MemoryPoolFree(q.kernarg)
			_ = rt.QueueDestroy(hq)
			return nil, err
		}
	}
	return q, nil
}

func (q *Queue) onError(s hsa.Status) {
	var err error = &hsa.Error{Func: "queue", Status: s, Text: q.rt.StatusString(s)}
	if c, ok := q.rt.(hsa.QueueErrorCauser); ok {
		if hq := q.created.Load(); hq != nil {
			if cause := c.QueueErrorCause(hq); cause != nil {
				err = fmt.Errorf("%w: %w", err, cause)
			}
		}
	}
	if s == hsa.StatusErrorMemoryApertureViolation && q.onMemoryViolation != nil && q.holdQueueError(err) {
		q.onMemoryViolation(q)
		return
	}
	q.setBroken(err, nil)
}

// holdQueueError records the queue's own error without publishing it,
// unless the queue is broken already (then the caller publishes it).
func (q *Queue) holdQueueError(err error) bool {
	q.brokenMu.Lock()
	defer q.brokenMu.Unlock()
	if q.published || q.queueErr != nil {
		return false
	}
	q.queueErr = err
	return true
}

// Break marks the queue broken by a failure reported outside it: a GPU
// memory fault arrives as a system event, and real KFD without the
// debugger interface evicts the faulting queues without a queue error.
// From then on every submission and every wait returns ErrQueueBroken
// wrapping cause; a waiter already blocked on a signal notices within one
// bounded wait (waitTimeoutHint). The first cause is kept.
func (q *Queue) Break(cause error) { q.setBroken(nil, cause) }

// setBroken records the queue's own error and an outside cause (either may
// be nil; the first of each kind is kept) and publishes the error waiters
// return, which names both once both have arrived, whatever their order.
// The first report, whichever kind, also fails the packets in flight.
func (q *Queue) setBroken(queueErr, external error) {
	q.brokenMu.Lock()
	first := !q.published
	q.published = true
	if q.queueErr == nil {
		q.queueErr = queueErr
	}
	if q.externalErr == nil {
		q.externalErr = external
	}
	var err error
	switch {
	case q.externalErr != nil && q.queueErr != nil:
		err = fmt.Errorf("%w on %s: %w (queue error: %w)", ErrQueueBroken, q.name, q.externalErr, q.queueErr)
	case q.externalErr != nil:
		err = fmt.Errorf("%w on %s: %w", ErrQueueBroken, q.name, q.externalErr)
	default:
		err = fmt.Errorf("%w on %s: %w", ErrQueueBroken, q.name, q.queueErr)
	}
	if first {
		// The packets in flight fail (brokenFrom, the health record)
		// before the break is published: whoever sees the break then
		// learns from Failed which tickets it failed.
		q.failInFlight(err)
	}
	q.brokenErr.Store(&err)
	q.brokenMu.Unlock()
}

// failInFlight fails the packets not yet complete when the queue broke.
func (q *Queue) failInFlight(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.hq == nil {
		return
	}
	// The packet that faulted is the oldest one not complete; it and every
	// packet after it fail.
	q.retireLocked()
	from := q.completed.Load() + 1
	q.brokenFrom.Store(from)
	q.health.Fail(from, err)
	// A broken queue never completes its packets' signals, and barrier
	// packets on other queues, HIP streams (DeviceBridge) and host
	// waiters wait for them. rocsync completes them instead, releasing
	// every such waiter; each of them learns from Failed that the work
	// failed, and a queue or stream that waited on the device breaks in
	// turn. It does so in order, each only once the work its packet was
	// to wait for on the device has completed: a waiter relies on that
	// order, and releasing it earlier lets it run beside that work (the
	// fault fuzzer found a reader on a third queue reading what a
	// producer the broken queue waited for was still writing).
	last := q.lastTicket.Load()
	q.release.Start(func() { q.releaseBroken(from, last) })
}

// releaseBroken completes the signals of a broken queue's tickets from
// from to last, in order, each once the signals its packet was to wait for
// (a barrier-AND's dependencies) have completed, as the packet processor
// would have. It watches the signals themselves: whether a stream has
// passed the point a bridge signal marks can be unknowable to the host
// without waiting for the whole stream, which may in turn wait for this
// queue. It asks the producers up the chain (Probe) while it waits, so
// that a broken stream's bridge signals are released.
//
// With AgentScope it first makes what the tickets before the break wrote
// visible outside the GPU (afterBreak): among the failed packets may be
// system-scope markers that a HIP stream, another GPU or another process
// waits for to read those writes, and completing their signals stands in
// for their release too.
func (q *Queue) releaseBroken(from, last uint64) {
	q.afterBreak()
	if q.agentScope {
		// A failed kernel stands in for its system-scope acquire too:
		// whoever waits for it reads what was there before it, which the
		// host or a copy may have written outside the GPU, and the failed
		// kernel may have been the one to acquire for it (the fault
		// fuzzer's seed 85 under DeviceSide: a kernel on another queue
		// that waited for it read an upload with no acquire between). A
		// flush's packet acquires at system scope, GPU-wide, after
		// everything the failed tickets without waits could stand for;
		// the flush below does the same for those that wait.
		q.acquireAfterBreak()
	}
	var pause syncstate.Backoff
	for t := from; t <= last; t++ {
		done, waits := q.depsDone(t)
		for !q.release.Stopped() && !done {
			q.health.Probe()
			pause.Sleep()
			done, _ = q.depsDone(t)
		}
		if q.agentScope && waits {
			// The failed barrier stands between the work it waited for
			// (kernels of other queues, released at agent scope) and
			// whoever waits for it, who may then use that work's output
			// from outside the GPU; the packet processor would have run
			// its release. Without it, a free saw the failed writer
			// done, and an upload overwrote the block before the L2
			// wrote the kernel's output back (the fault fuzzer's seed
			// 305 under DeviceBridge, agent scope on).
			_ = q.flushGPU()
		}
		q.mu.Lock()
		if e := q.slot(t); e.sig != nil {
			q.rt.SignalStoreScrelease(e.sig.H, 0)
		}
		q.mu.Unlock()
	}
}

// depsDone reports whether every dependency signal of ticket t's packet
// has completed (true for a packet without any), and whether it has any.
func (q *Queue) depsDone(t uint64) (done, waits bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	done = true
	for _, d := range q.slot(t).deps {
		if d != nil {
			waits = true
			if q.rt.SignalLoadScacquire(d.H) >= 1 {
				done = false
			}
		}
	}
	return done, waits
}

// Err returns the error that broke the queue, if any: its own
// asynchronous error, or the failure of a fence it waited for on the
// device.
func (q *Queue) Err() error {
	if p := q.brokenErr.Load(); p != nil {
		return *p
	}
	return q.health.Err()
}

// Health implements syncstate.HealthReporter.
func (q *Queue) Health() *syncstate.Health { return &q.health }

// Failed implements syncstate.Timeline.
func (q *Queue) Failed(t uint64) error {
	// A ticket the queue's own break failed reports the break as it stands
	// now: a queue error and a system event's cause may arrive in either
	// order, and the waiter should learn both.
	if p := q.brokenErr.Load(); p != nil {
		// Past the newest ticket nothing can succeed once the break is
		// published, even before it has failed the packets in flight
		// (setBroken publishes first): a submission the broken queue
		// refuses is the device's fault.
		if from := q.brokenFrom.Load(); (from != 0 && t >= from) || t > q.lastTicket.Load() {
			return *p
		}
	}
	return q.health.Failed(t)
}

// Domain implements syncstate.Timeline.
func (q *Queue) Domain() syncstate.Domain { return syncstate.DomainKernel }

// Name implements syncstate.Timeline.
func (q *Queue) Name() string { return q.name }

// HSAQueue returns the underlying queue.
func (q *Queue) HSAQueue() *hsa.Queue { return q.hq }

// LastTicket is the ticket of the newest packet submitted.
func (q *Queue) LastTicket() uint64 { return q.lastTicket.Load() }

// Completed implements syncstate.Timeline: it polls the oldest packets'
// signals when the queue lock is free, and never blocks.
//
// With AgentScope it is the newest ticket whose writes are visible outside
// the GPU (see Config.AgentScope): whoever learns from it that a ticket is
// complete may read what it wrote from anywhere. A later packet of the
// GPU's queues, which may read it sooner, waits for the packet's own
// signal (WaitDevice), which reaches 0 at its end.
func (q *Queue) Completed() uint64 {
	c := q.completed.Load()
	if c != q.lastTicket.Load() && q.mu.TryLock() {
		q.retireLocked()
		q.mu.Unlock()
	}
	return q.visibleTicket()
}

// visibleTicket is the newest ticket whose writes are visible outside the
// GPU. On a broken queue whose tickets that succeeded are all visible it
// is the newest complete one: a failed ticket counts as complete, and
// whoever waits for it learns the failure.
func (q *Queue) visibleTicket() uint64 {
	if !q.agentScope {
		return q.completed.Load()
	}
	v := q.visible.Load()
	if from := q.brokenFrom.Load(); from != 0 && v+1 >= from {
		return q.completed.Load()
	}
	return v
}

// afterBreak makes what the tickets before a break wrote visible outside
// the GPU, once a wait has learned of the break: they succeeded, and
// their results stay readable.
func (q *Queue) afterBreak() { _ = q.releaseBeforeBreak() }

// releaseBeforeBreak is afterBreak's flush, reporting its failure. The
// waits that learn of the break and releaseBroken may all ask at once;
// breakMu makes the later ones find the first one's flush done instead
// of flushing again.
func (q *Queue) releaseBeforeBreak() error {
	from := q.brokenFrom.Load()
	if !q.agentScope || from <= 1 {
		return nil
	}
	q.breakMu.Lock()
	defer q.breakMu.Unlock()
	if q.visible.Load() >= from-1 || q.completed.Load() < from-1 {
		return nil
	}
	return q.makeVisible(from - 1)
}

// flushGPU is Config.Flush, noting a flush that began after the break
// (flushedAfterBreak): its packet also acquires at system scope,
// GPU-wide, which acquireAfterBreak needs once.
func (q *Queue) flushGPU() error {
	broken := q.brokenFrom.Load() != 0
	err := q.flush()
	if err == nil && broken {
		q.flushedAfterBreak.Store(true)
	}
	return err
}

// acquireAfterBreak makes sure a flush, whose packet acquires at system
// scope GPU-wide, has followed the break before releaseBroken completes
// the failed packets' signals (see there): one a waiter made on learning
// of the break, or one of its own, which also makes what completed before
// it visible, so that a waiter learning of the break later need not flush
// again.
func (q *Queue) acquireAfterBreak() {
	q.breakMu.Lock()
	defer q.breakMu.Unlock()
	if q.flushedAfterBreak.Load() {
		return
	}
	q.mu.Lock()
	q.retireLocked()
	c := q.completed.Load()
	q.mu.Unlock()
	if q.flushGPU() == nil {
		q.seeVisible(c)
	}
}

// seeVisible records that every ticket up to t is visible outside the GPU.
func (q *Queue) seeVisible(t uint64) {
	for v := q.visible.Load(); v < t && !q.visible.CompareAndSwap(v, t); v = q.visible.Load() {
	}
}

// slot returns the in-flight entry of ticket t.
func (q *Queue) slot(t uint64) *entry { return &q.inflight[(t-1)&q.mask] }

// retireLocked pops every packet that has completed, in order.
func (q *Queue) retireLocked() {
	for c := q.completed.Load(); c < q.lastTicket.Load(); c++ {
		e := q.slot(c + 1)
		if q.rt.SignalLoadScacquire(e.sig.H) >= 1 {
			break
		}
		q.completed.Store(c + 1)
		// A packet that releases at system scope makes everything
		// before it visible outside the GPU, but only if it ran: a
		// broken queue's failed packets complete because rocsync
		// completes their signals (releaseBroken), not because the
		// packet processor executed them and their release.
		if from := q.brokenFrom.Load(); e.system && (from == 0 || c+1 < from) {
			q.seeVisible(c + 1)
		}
		if traceopt.Enabled && q.timing != nil {
			q.reportTimeLocked(c+1, e.sig)
		}
		if e.sig.pool == q.signals && len(q.spare) < cap(q.spare) && e.sig.refs.CompareAndSwap(1, 0) {
			q.spare = append(q.spare, e.sig)
		} else {
			e.sig.Release()
		}
		for i, d := range e.deps {
			if d != nil {
				d.Release()
				e.deps[i] = nil
			}
		}
		e.sig = nil
		e.system = false
	}
	q.health.Prune(q.completed.Load())
}

// signalFor returns a retained completion signal for ticket t, or nil when
// t is already complete.
func (q *Queue) signalFor(t uint64) *Signal {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.pendingLocked(t) {
		return nil
	}
	e := q.slot(t)
	e.sig.Retain()
	return e.sig
}

// pendingLocked says whether ticket t is still in flight; a ticket never
// submitted is the caller's bug.
func (q *Queue) pendingLocked(t uint64) bool {
	if t <= q.completed.Load() {
		return false
	}
	if t > q.lastTicket.Load() {
		panic(fmt.Sprintf("queue: %s: ticket %d not submitted (last %d)", q.name, t, q.lastTicket.Load()))
	}
	return true
}

// wakeSignalFor returns a retained signal that completes once ticket t
// has, for a host to block on, or nil when t is already complete. Without
// WakeSignals it is t's own signal. With them it is the interrupt signal
// of the marker right after t (armWakeLocked), or t's own GPU-only signal,
// which waitSignal then polls.
//
// With AgentScope the marker releases at system scope, so that the host
// may read what t wrote once it completes; where no marker fits, the
// caller makes t visible once it has completed (makeVisible).
func (q *Queue) wakeSignalFor(t uint64) *Signal {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.pendingLocked(t) {
		return nil
	}
	e := q.slot(t)
	if (q.wake != nil || q.agentScope) && q.armWakeLocked(t) {
		e = q.slot(t + 1)
	}
	e.sig.Retain()
	return e.sig
}

// ArmWake prepares a blocking host wait for ticket t that comes later
// (a host lane's dependency, known when its function is submitted): where
// t is still the newest packet, the marker goes in now, while it waits
// for nothing else.
func (q *Queue) ArmWake(t uint64) {
	if (q.wake == nil && !q.agentScope) || t <= q.completed.Load() {
		return
	}
	q.mu.Lock()
	if t <= q.lastTicket.Load() {
		q.armWakeLocked(t)
	}
	q.mu.Unlock()
}

// armWakeLocked makes sure ticket t+1 is a marker with an interrupt
// signal, if it can be, and says whether it is. Only right after t: a
// marker completes after every packet before it, and a packet after t may
// wait for the very host that waits for t (a barrier-AND on a host lane's
// signal, or a user's signal); a marker behind it would never complete.
// Only where the ring has room (a marker must not cost a throttle wait)
// and the queue takes work.
func (q *Queue) armWakeLocked(t uint64) bool {
	if q.wakeTicket == t+1 && t+1 > q.completed.Load() {
		return true
	}
	if t != q.lastTicket.Load() || t-q.completed.Load() >= q.maxInFlight || q.Err() != nil {
		return false
	}
	pool := q.wake
	if pool == nil {
		pool = q.signals // AgentScope without WakeSignals: the marker is for its release
	}
	sig, err := pool.Get()
	if err != nil {
		return false
	}
	mt, err := q.markerLocked(sig)
	if err != nil {
		return false
	}
	q.wakeTicket = mt
	return true
}

// WaitHost implements syncstate.Timeline.
func (q *Queue) WaitHost(t uint64) error { return q.WaitHostContext(context.Background(), t) }

// WaitHostContext implements syncstate.ContextWaiter: WaitHost that also
// ends when ctx is done (nil: never).
func (q *Queue) WaitHostContext(ctx context.Context, t uint64) error {
	if t <= q.visibleTicket() {
		return q.Failed(t)
	}
	if s := q.wakeSignalFor(t); s != nil {
		err := q.waitSignal(ctx, s, t)
		s.Release()
		q.mu.Lock()
		q.retireLocked()
		q.mu.Unlock()
		if err != nil {
			q.afterBreak()
			return err
		}
	}
	if err := q.Failed(t); err != nil {
		q.afterBreak()
		return err
	}
	if !q.agentScope || t <= q.visibleTicket() {
		return nil
	}
	return q.makeVisible(t)
}

// makeVisible makes complete ticket t's writes visible outside the GPU
// where no packet that releases at system scope has followed it yet: with
// a marker that does, where the queue has nothing else in flight (it then
// waits for nothing), else with Config.Flush.
func (q *Queue) makeVisible(t uint64) error {
	q.mu.Lock()
	q.retireLocked()
	c := q.completed.Load()
	if c == q.lastTicket.Load() && q.Err() == nil && t > q.visible.Load() {
		if mt, err := q.hostMarkerLocked(); err == nil {
			s := q.slot(mt).sig
			s.Retain()
			q.mu.Unlock()
			err := q.waitSignal(context.Background(), s, mt)
			s.Release()
			q.mu.Lock()
			q.retireLocked()
			q.mu.Unlock()
			return err
		}
	}
	q.mu.Unlock()
	if t <= q.visible.Load() {
		return nil
	}
	if testhooks.SkipSystemRelease.Load() {
		q.seeVisible(c) // as if flushed
		return nil
	}
	if err := q.flushGPU(); err != nil {
		return fmt.Errorf("queue: %s: making ticket %d visible outside the GPU: %w", q.name, t, err)
	}
	// Everything complete before the flush is visible after it.
	q.seeVisible(c)
	return nil
}

// retireEvery is how many submissions may pass between two retires.
const retireEvery = 16

// pollSpin is how long a wait on a GPU-only signal spins before it sleeps
// between loads.
const pollSpin = 50 * time.Microsecond

// waitTimeoutHint bounds each blocking wait so a broken queue, whose
// signals never complete, is noticed instead of hanging forever.
const waitTimeoutHint = 10_000_000

// waitSignal waits for ticket t's signal s. It returns t's failure, if it
// failed: its own, or that of a producer the queue waited for on the
// device, which is checked while waiting so that a wait behind a producer
// that will never signal ends.
func (q *Queue) waitSignal(ctx context.Context, s *Signal, t uint64) error {
	b := syncstate.Bound{Ctx: ctx, Timeout: q.timeout}
	poll := !s.interrupt()
	var pause syncstate.Backoff
	// A poll spins for its first pollSpin (most waits end within it: a
	// sleep lasts far longer than asked on some VMs), then sleeps between
	// loads.
	var spinUntil time.Time
	if poll {
		spinUntil = time.Now().Add(pollSpin)
	}
	for {
		if poll {
			if q.rt.SignalLoadScacquire(s.H) < 1 {
				return q.Failed(t)
			}
			if time.Now().Before(spinUntil) {
				continue
			}
			pause.Sleep()
		} else if q.rt.SignalWaitScacquire(s.H, hsa.ConditionLt, 1, waitTimeoutHint, hsa.WaitStateBlocked) < 1 {
			return q.Failed(t)
		}
		if q.timeout > 0 && b.Start.IsZero() {
			// The clock is read only once a wait outlasts its first
			// slice (most end within it); the bound then counts from
			// here, so it ends at most one slice late, never early.
			b.Start = time.Now()
		}
		q.health.Probe()
		if err := q.Failed(t); err != nil {
			return err
		}
		if p := q.brokenErr.Load(); p != nil {
			// The break failed the tickets from brokenFrom on, which
			// failInFlight set before publishing it. An older ticket
			// completed before the fault (every packet has the barrier
			// bit), though this wait may not have seen its signal yet: it
			// slept across the completion and the next packet's fault,
			// or it waits on a marker after the ticket that never ran.
			if from := q.brokenFrom.Load(); from != 0 && t < from {
				return nil
			}
			return *p
		}
		if err := b.Check(syncstate.Fence{TL: q, Ticket: t}); err != nil {
			return err
		}
	}
}

// CanWaitDevice implements syncstate.Timeline: barrier-AND packets wait for
// other HSA queues' signals, and for the signals a bridge completes.
func (q *Queue) CanWaitDevice(d syncstate.Domain) bool {
	switch d {
	case syncstate.DomainKernel:
		return true
	case syncstate.DomainHost:
		return q.hostBridge != nil
	}
	return q.bridge != nil
}

// Place implements syncstate.Placed.
func (q *Queue) Place() uint64 { return q.place }

// HostDeps implements syncstate.HostDepender: the host functions the queue
// waits for on the device, directly or through what it waits for.
func (q *Queue) HostDeps() *syncstate.HostDeps { return &q.hostDeps }

// CanWaitPeer implements syncstate.Placed: HSA signals are system-wide, so
// a barrier-AND packet waits for another GPU's queue's completion signal
// as for its own; the bridges' signals are system-wide too.
func (q *Queue) CanWaitPeer(d syncstate.Domain) bool { return q.CanWaitDevice(d) }

// WaitDevice implements syncstate.Timeline with barrier-AND packets, at
// most five signals each.
//
// Each fence is recorded in the queue's health (AddUpstream) with the
// first ticket behind its wait: the barrier's own, taken under the lock
// that publishes the barrier. The ticket the queue would give next is not
// it: another goroutine may put a packet on the queue meanwhile (a marker
// for a HIP stream or another GPU that waits for earlier work). The
// record would then name that packet, which does not wait, and be
// pruned once it completed, while the barrier still waited; a host
// waiting behind the barrier then no longer asked the producer whether
// it had failed, and a stream whose failure only a query reveals left the
// barrier waiting for ever (the fault fuzzer's seed 224 under
// DeviceBridge).
func (q *Queue) WaitDevice(fences []syncstate.Fence) error {
	var sigs [16]*Signal
	var waited [16]syncstate.Fence
	n := 0
	for _, f := range fences {
		q.hostDeps.Note(f)
		var s *Signal
		if p, ok := f.TL.(*Queue); ok {
			if p.agent == q.agent {
				s = p.signalFor(f.Ticket)
			} else {
				s = p.systemSignalFor(f.Ticket)
			}
		} else if bridge := q.bridgeFor(f.TL.Domain()); bridge != nil {
			var err error
			if s, err = bridge(f); err != nil {
				releaseAll(sigs[:n])
				return err
			}
		} else {
			releaseAll(sigs[:n])
			return fmt.Errorf("queue: %s cannot wait on the device for %s (%s)", q.name, f.TL.Name(), f.TL.Domain())
		}
		if s == nil {
			// Recorded though no packet waits: a fence that has
			// completed since the consumer looked at it may have
			// failed, and the work behind the wait then runs on what it
			// left.
			q.health.AddUpstream(q.name, f, q.lastTicket.Load()+1)
			continue
		}
		if n == len(sigs) {
			releaseAll(sigs[:n])
			return fmt.Errorf("queue: too many fences (%d) for one device wait", len(fences))
		}
		sigs[n], waited[n] = s, f
		n++
	}
	for i := 0; i < n; i += hsa.BarrierAndMaxDependencies {
		j := min(n, i+hsa.BarrierAndMaxDependencies)
		var deps [hsa.BarrierAndMaxDependencies]*Signal
		copy(deps[:], sigs[i:j])
		if _, err := q.barrierAnd(deps, waited[i:j]); err != nil {
			// The rest were not handed to a packet.
			releaseAll(sigs[j:n])
			return err
		}
	}
	return nil
}

func (q *Queue) bridgeFor(d syncstate.Domain) func(syncstate.Fence) (*Signal, error) {
	if d == syncstate.DomainHost {
		return q.hostBridge
	}
	return q.bridge
}

func releaseAll(s []*Signal) {
	for _, x := range s {
		if x != nil {
			x.Release()
		}
	}
}

// Packet headers. Every packet rocsync writes sets the barrier bit.
// Without AgentScope every packet acquires and releases at system scope:
// what it reads may come from the host, a copy or another GPU, and what it
// writes may leave the GPU. With AgentScope (see Config.AgentScope):
//
//   - a kernel dispatch acquires and releases at agent scope, and acquires
//     at system scope where an op asked (AcquireSystem);
//   - a barrier-AND that waits for other work releases at agent scope and
//     acquires nothing: it reads no memory, and a kernel after it that
//     reads what the work it waited for wrote outside the GPU acquires for
//     itself (HIP's barrier that only releases has no acquire either: clr
//     rocvirtual.cpp, kBarrierPacketReleaseHeader);
//   - a marker, whose completion hands the queue's work to the host or
//     anything else outside the GPU, releases at system scope and
//     acquires nothing (systemHeader).

// header is the header of a packet of type t that, with AgentScope,
// acquires and releases at the given scopes; without it, every packet
// acquires and releases at system scope.
func (q *Queue) header(t hsa.PacketType, acquire, release uint16) uint16 {
	if !q.agentScope {
		acquire, release = hsa.FenceScopeSystem, hsa.FenceScopeSystem
	}
	return hsa.Header(t, true, acquire, release)
}

// barrierHeader is the header of a barrier-AND packet that waits for other
// work.
func (q *Queue) barrierHeader() uint16 {
	return q.header(hsa.PacketTypeBarrierAnd, hsa.FenceScopeNone, hsa.FenceScopeAgent)
}

// systemHeader is the header of a marker: a barrier-AND packet that
// releases at system scope, which hands the queue's work to the host or to
// anything else outside the GPU.
func (q *Queue) systemHeader() uint16 {
	release := uint16(hsa.FenceScopeSystem)
	if testhooks.SkipSystemRelease.Load() {
		release = hsa.FenceScopeAgent
	}
	return q.header(hsa.PacketTypeBarrierAnd, hsa.FenceScopeNone, release)
}

// dispatchHeader is the header of a kernel dispatch; system says it
// acquires at system scope (with AgentScope, otherwise at agent scope).
func (q *Queue) dispatchHeader(system bool) uint16 {
	acquire := uint16(hsa.FenceScopeAgent)
	if system && !testhooks.SkipSystemAcquire.Load() {
		acquire = hsa.FenceScopeSystem
	}
	return q.header(hsa.PacketTypeKernelDispatch, acquire, hsa.FenceScopeAgent)
}

// takeAcquireLocked takes a pending AcquireSystem, for the dispatch about
// to be written.
func (q *Queue) takeAcquireLocked() bool {
	if !q.acquireNext.Load() {
		return false
	}
	q.acquireNext.Store(false)
	return true
}

// AcquireSystem implements syncstate.Acquirer: the queue's next kernel
// dispatch (or replay) acquires at system scope. An op calls it once its
// waits are on the queue or done, so the packet that takes it launches
// after what the op waits for, whichever op's it is: the packets behind it
// on the queue then read what that work wrote, not older copies in the L2.
func (q *Queue) AcquireSystem() {
	if q.agentScope {
		q.acquireNext.Store(true)
	}
}

// SharesWritesOf implements syncstate.Acquirer: the queues of one GPU
// read through the L2 their kernels write through. A HIP stream's work is
// treated as outside, though its kernels share the L2 too: its copies go
// around it.
func (q *Queue) SharesWritesOf(producer syncstate.Timeline) bool {
	p, ok := producer.(*Queue)
	return ok && p.agent == q.agent
}

// systemSignalFor returns a retained signal that completes once ticket t
// has and its writes are visible outside the GPU, for a packet on another
// GPU to wait for, or nil when they already are. Where no packet at or
// after t releases at system scope, a marker that does goes at the end:
// the packets before it were all submitted before the waiter, so none of
// them waits for it. Where no marker can go in, the host makes t visible
// (VisibleBeforeBreak, or a host wait).
func (q *Queue) systemSignalFor(t uint64) *Signal {
	if !q.agentScope {
		return q.signalFor(t)
	}
	q.mu.Lock()
	if t <= q.visible.Load() {
		q.mu.Unlock()
		return nil
	}
	if q.sysLast >= t && q.sysLast > q.completed.Load() {
		// If the queue breaks before that packet runs, releaseBroken
		// flushes before it completes the packet's signal.
		s := q.slot(q.sysLast).sig
		s.Retain()
		q.mu.Unlock()
		return s
	}
	if q.Err() == nil {
		if mt, err := q.systemMarkerLocked(); err == nil {
			s := q.slot(mt).sig
			s.Retain()
			q.mu.Unlock()
			return s
		}
	}
	q.mu.Unlock()
	if q.brokenFrom.Load() == 0 {
		// The queue could not take a marker without breaking: it had no
		// signal for one, or it waited for failed work and takes no more
		// packets. t's packet runs all the same; wait for it on the host,
		// which makes it visible. A failure reaches the waiter through
		// the fence's health, as on the device.
		_ = q.WaitHost(t)
		return nil
	}
	if before, _ := q.VisibleBeforeBreak(t); before {
		return nil
	}
	return q.signalFor(t)
}

// VisibleBeforeBreak is for a waiter on ticket t that could not put a
// packet on the queue because the queue had broken. It says whether t
// completed before the break; if so, with AgentScope it makes what t wrote
// visible outside the GPU, as the waiter's system-scope marker would have,
// and returns what Failed(t) says (t may have waited for failed work), or
// the flush's failure. A ticket before the break completed and succeeded
// on the queue; failing its waiter with the break failed work that did not
// depend on the fault (the fault fuzzer's seed 133 under DeviceBridge,
// with agent-scope fences on: the HIP bridge's marker was refused and the
// gemm behind it failed).
func (q *Queue) VisibleBeforeBreak(t uint64) (bool, error) {
	from := q.brokenFrom.Load()
	if from == 0 || t >= from {
		return false, nil
	}
	// Every ticket before the break completed first (every packet
	// carries the barrier bit), and failInFlight retired them.
	if err := q.releaseBeforeBreak(); err != nil {
		return true, err
	}
	return true, q.Failed(t)
}

// BarrierAnd submits a barrier-AND packet that waits for deps (nil entries
// are satisfied). It takes over the references to deps, which are dropped
// once the packet completes.
func (q *Queue) BarrierAnd(deps [hsa.BarrierAndMaxDependencies]*Signal) (uint64, error) {
	return q.barrierAnd(deps, nil)
}

// barrierAnd is BarrierAnd that also records, before the packet is
// published, that it waits for the fences waited (see WaitDevice).
func (q *Queue) barrierAnd(deps [hsa.BarrierAndMaxDependencies]*Signal, waited []syncstate.Fence) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	idx, sig, err := q.reserveLocked()
	if err != nil {
		releaseAll(deps[:])
		return 0, err
	}
	for _, f := range waited {
		q.health.AddUpstream(q.name, f, idx+1)
	}
	p := hsa.BarrierAndPacket{Header: q.barrierHeader(), CompletionSignal: sig.H}
	for i, d := range deps {
		if d != nil {
			p.DepSignals[i] = d.H
		}
	}
	slot := hsa.Slot(q.hq, idx)
	p.EncodeBody(slot)
	e := q.slot(idx + 1)
	e.deps = deps
	if traceopt.Enabled && q.timing != nil {
		q.timing.untimed[idx&q.mask] = true
	}
	return q.publishLocked(idx, sig, slot, p.FirstWord(), releasesSystem(p.Header)), nil
}

// releasesSystem says whether a packet with header h releases at system
// scope.
func releasesSystem(h uint16) bool { return hsa.HeaderReleaseScope(h) == hsa.FenceScopeSystem }

// Marker submits a barrier-AND packet with no dependencies whose
// completion signal is sig: packets complete in order, so sig reaches 0
// once everything submitted before it has completed. It takes over one
// reference to sig, dropped once the packet retires (or on error). It lets
// a signal of another kind than the queue's own (one with a value address,
// for HIP) follow the queue. The marker releases at system scope: whoever
// waits for sig (a HIP stream, the host, another process) may read what
// the queue wrote before it from anywhere.
func (q *Queue) Marker(sig *Signal) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.markerLocked(sig)
}

func (q *Queue) markerLocked(sig *Signal) (uint64, error) {
	idx, sig, err := q.reserveWithLocked(sig)
	if err != nil {
		return 0, err
	}
	p := hsa.BarrierAndPacket{Header: q.systemHeader(), CompletionSignal: sig.H}
	slot := hsa.Slot(q.hq, idx)
	p.EncodeBody(slot)
	if traceopt.Enabled && q.timing != nil {
		q.timing.untimed[idx&q.mask] = true
	}
	return q.publishLocked(idx, sig, slot, p.FirstWord(), true), nil
}

// hostMarkerLocked submits a marker that releases at system scope for a
// host to block on: its completion signal is an interrupt signal where
// the queue has WakeSignals.
func (q *Queue) hostMarkerLocked() (uint64, error) {
	if q.wake == nil {
		return q.systemMarkerLocked()
	}
	sig, err := q.wake.Get()
	if err != nil {
		return 0, err
	}
	return q.markerLocked(sig)
}

// systemMarkerLocked submits a barrier-AND packet with no dependencies
// that releases at system scope, with a completion signal of the queue's
// own, and returns its ticket.
func (q *Queue) systemMarkerLocked() (uint64, error) { return q.markerLocked(nil) }

// Dispatch submits a kernel dispatch packet and returns its ticket.
func (q *Queue) Dispatch(d *Dispatch) (uint64, error) {
	if len(d.Kernarg) > KernargSlot {
		return 0, fmt.Errorf("%w: %d > %d bytes", ErrKernargTooLarge, len(d.Kernarg), KernargSlot)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	idx, sig, err := q.reserveLocked()
	if err != nil {
		return 0, err
	}
	ka := unsafe.Add(q.kernarg, uintptr(idx&q.mask)*KernargSlot)
	copy(unsafe.Slice((*byte)(ka), KernargSlot), d.Kernarg)
	p := d.packet(q.dispatchHeader(q.takeAcquireLocked()), uint64(uintptr(ka)), sig.H)
	slot := hsa.Slot(q.hq, idx)
	p.EncodeBody(slot)
	return q.publishLocked(idx, sig, slot, p.FirstWord(), releasesSystem(p.Header)), nil
}

// throttleLocked waits on the host for the oldest packet in flight
// (back-pressure, counted as a throttle wait) and retires what has
// completed. refused is onThrottle's refusal of the wait, made before it;
// err is the wait's own failure.
func (q *Queue) throttleLocked() (refused, err error) {
	t := q.completed.Load() + 1
	if q.onThrottle != nil {
		if err := q.onThrottle(syncstate.Fence{TL: q, Ticket: t}); err != nil {
			return err, nil
		}
	}
	q.sinks.HostWait(syncstate.ReasonThrottle)
	oldest := q.slot(t).sig
	oldest.Retain()
	err = q.waitSignal(context.Background(), oldest, t)
	oldest.Release()
	if err != nil {
		return nil, err
	}
	q.retireLocked()
	return nil, nil
}

// reserveLocked makes room in the ring (waiting on the host for the oldest
// packet when it is full: back-pressure, counted as a throttle wait),
// reserves a write index and takes a completion signal.
func (q *Queue) reserveLocked() (uint64, *Signal, error) { return q.reserveWithLocked(nil) }

// reserveWithLocked is reserveLocked with the completion signal given (nil:
// one from the queue's pool); a given signal is released on error.
func (q *Queue) reserveWithLocked(sig *Signal) (uint64, *Signal, error) {
	fail := func(err error) (uint64, *Signal, error) {
		if sig != nil {
			sig.Release()
		}
		return 0, nil, err
	}
	if err := q.Err(); err != nil {
		return fail(err)
	}
	// Retire once retireBatch packets are in flight, at most every
	// retireEvery submissions (each retire ends at a packet still running:
	// a signal load), and always before the cap would make a throttle wait.
	q.sinceRetire++
	if inFlight := q.lastTicket.Load() - q.completed.Load(); inFlight >= q.maxInFlight ||
		inFlight >= q.retireBatch && q.sinceRetire >= retireEvery {
		q.sinceRetire = 0
		q.retireLocked()
	}
	for q.lastTicket.Load()-q.completed.Load() >= q.maxInFlight {
		if refused, err := q.throttleLocked(); refused != nil {
			return 0, nil, refused
		} else if err != nil {
			return fail(err)
		}
	}
	if sig == nil {
		if n := len(q.spare); n > 0 {
			sig = q.spare[n-1]
			q.spare[n-1] = nil
			q.spare = q.spare[:n-1]
			q.rt.SignalStoreRelaxed(sig.H, 1)
			sig.refs.Store(1)
		} else {
			var err error
			if sig, err = q.signals.Get(); err != nil {
				return 0, nil, err
			}
		}
	}
	idx := q.rt.QueueAddWriteIndexScacqScrel(q.hq, 1)
	// The slot is free only once the packet processor has read past the
	// packet that used it before: a retired packet has completed, but the
	// processor may not yet have marked its slot INVALID, and would then
	// overwrite the new header. The read index last seen usually proves it
	// already, which saves a runtime call per dispatch.
	for idx-q.readIndex >= uint64(q.hq.Size) {
		q.readIndex = q.rt.QueueLoadReadIndexScacquire(q.hq)
		if idx-q.readIndex < uint64(q.hq.Size) {
			break
		}
		if err := q.Err(); err != nil {
			sig.Release()
			return 0, nil, err
		}
	}
	return idx, sig, nil
}

// system says the packet releases at system scope (or was meant to, where
// a test switch narrows it: SkipSystemRelease).
func (q *Queue) publishLocked(idx uint64, sig *Signal, slot *[hsa.PacketSize]byte, first uint32, system bool) uint64 {
	t := idx + 1
	e := q.slot(t)
	e.sig = sig
	q.noteReleaseLocked(e, t, system)
	q.lastTicket.Store(t)
	hsa.PublishHeader(slot, first)
	q.rt.SignalStoreScrelease(q.hq.Doorbell, int64(idx))
	return t
}

// noteReleaseLocked records whether ticket t's packet releases at system
// scope.
func (q *Queue) noteReleaseLocked(e *entry, t uint64, system bool) {
	e.system = system
	if system {
		q.sysLast = t
	}
}

// Drain waits on the host for everything submitted so far.
func (q *Queue) Drain() error { return q.WaitHost(q.lastTicket.Load()) }

// Close drains the queue and destroys it. A broken queue first completes
// its failed packets' signals (see failInFlight), waiting for the work
// they were to wait for up to the wait timeout, and past it at once.
func (q *Queue) Close() error {
	err := q.Drain()
	q.release.Finish(q.timeout)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.hq == nil {
		return err
	}
	err = errors.Join(err, q.rt.QueueDestroy(q.hq), q.rt.MemoryPoolFree(q.kernarg))
	q.hq = nil
	for _, s := range q.spare {
		q.signals.put(s)
	}
	q.spare = nil
	return err
}

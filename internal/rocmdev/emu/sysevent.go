package emu

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocsync/rocsync/hsa"
)

// System events: a GPU touching memory not mapped to it is a VM fault,
// which KFD reports through its memory event and ROCr 5.2 hands to every
// handler of hsa_amd_register_system_event_handler (Runtime::VMFaultHandler)
// on its event thread. Unless one of them returns HSA_STATUS_SUCCESS, ROCr
// prints "Memory access fault by GPU node-N ..." and aborts the process.
// The emulator does the same, so code that does not handle VM faults dies
// here as it does on a GPU (shown by TestUnhandledVMFaultAborts).

// sysEvents holds the registered handlers of one emulated runtime.
type sysEvents struct {
	mu       sync.Mutex
	next     int
	handlers map[int]hsa.SystemEventFunc
	order    []int // registration order, the order ROCr calls them in
	// noQueueError models real KFD without the debugger interface: a VM
	// fault evicts the faulting queue without a queue error, so the
	// system event is the only report (see SetVMFaultQueueErrors).
	noQueueError atomic.Bool
	// queueErrorFirst reports the faulting queue's error before the
	// system event (see SetVMFaultQueueErrorFirst); pending holds each
	// GPU's undelivered event until then.
	queueErrorFirst atomic.Bool
	pendingMu       sync.Mutex
	pending         map[int]func()
}

// SetVMFaultQueueErrorFirst says whether the faulting HSA queue's error
// callback runs before the system event handlers. ROCr 6.x handles the
// queue's exception and KFD's memory event as two async signals of its
// event thread (runtime.cpp's async event loop), so either may come
// first; on sid's ROCr 6.4.3 over the simulated driver the queue error
// came first in 2 of 6 runs. Off (the default), the event comes first,
// as ROCr 5.2 always does. On, the event waits until the queue's
// callback has returned, or a second where no queue reports the fault.
func (m *Machine) SetVMFaultQueueErrorFirst(on bool) { m.hsa.events.queueErrorFirst.Store(on) }

// deferUntilQueueError holds GPU dev's fault event until its faulting
// queue has reported (queueErrorReported) or a second has passed.
func (e *sysEvents) deferUntilQueueError(dev int, deliver func()) {
	var once sync.Once
	run := func() { once.Do(deliver) }
	e.pendingMu.Lock()
	if e.pending == nil {
		e.pending = map[int]func(){}
	}
	e.pending[dev] = run
	e.pendingMu.Unlock()
	time.AfterFunc(time.Second, run)
}

// queueErrorReported delivers GPU dev's held fault event, if any.
func (e *sysEvents) queueErrorReported(dev int) {
	e.pendingMu.Lock()
	run := e.pending[dev]
	delete(e.pending, dev)
	e.pendingMu.Unlock()
	if run != nil {
		run()
	}
}

// SetVMFaultEviction says whether a VM fault evicts every user queue of
// the process on the faulting GPU, as KFD does (the default): amdgpu
// kfd_int_process_v9.c, event_interrupt_wq_v9, calls kfd_dqm_evict_pasid
// before kfd_signal_vm_fault_event, and nothing restores the queues. HSA
// queues then stop without a queue error (only the faulting one reports
// its own), and HIP's streams, whose hardware queues are evicted too, stop
// where they are without HIP being told: their pending commands never
// complete, so hipStreamSynchronize, hipEventSynchronize on a later record
// and hipStreamDestroy (clr rocclr/platform/commandqueue.cpp,
// HostQueue::terminate, awaits the last command) block for ever, and
// queries answer hipErrorNotReady for ever. Off, a fault stops only the
// faulting queue or stream, and the rest of the GPU runs on (tests show
// with it which behaviour depends on eviction).
func (m *Machine) SetVMFaultEviction(on bool) { m.noEviction.Store(!on) }

// evict stops every queue and stream of GPU dev, as KFD's eviction does.
func (m *Machine) evict(dev int) {
	if m.noEviction.Load() || m.devices[dev].evicted.Swap(true) {
		return
	}
	m.hsa.mu.Lock()
	for _, q := range m.hsa.queues {
		if q.dev == dev {
			q.broken.Store(true)
		}
	}
	m.hsa.mu.Unlock()
	m.hip.mu.Lock()
	var ss []*hstream
	for _, s := range m.hip.streams {
		if s.dev == dev {
			ss = append(ss, s)
		}
	}
	m.hip.mu.Unlock()
	for _, s := range ss {
		s.mu.Lock()
		s.evicted = true
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// Evicted reports whether GPU dev's queues were evicted by a VM fault.
func (m *Machine) Evicted(dev int) bool { return m.devices[dev].evicted.Load() }

// SetVMFaultQueueErrors says whether a VM fault also reaches the faulting
// HSA queue's error callback (HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION),
// as on the simulated driver and with KFD's debugger interface (the
// default), or only the system event, as on KFD without it: the queue then
// stops silently and its packets never complete.
func (m *Machine) SetVMFaultQueueErrors(report bool) { m.hsa.events.noQueueError.Store(!report) }

// RegisterSystemEventHandler implements hsa.Runtime. ROCr keeps handlers
// until hsa_shut_down releases the runtime; the emulator drops them then
// too, and cancel removes one at once.
func (h *HSA) RegisterSystemEventHandler(fn hsa.SystemEventFunc) (func(), error) {
	if !h.initialized() {
		return nil, h.err("hsa_amd_register_system_event_handler", hsa.StatusErrorNotInitialized)
	}
	if fn == nil {
		return nil, h.err("hsa_amd_register_system_event_handler", hsa.StatusErrorInvalidArgument)
	}
	e := &h.events
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.handlers == nil {
		e.handlers = map[int]hsa.SystemEventFunc{}
	}
	e.next++
	id := e.next
	e.handlers[id] = fn
	e.order = append(e.order, id)
	var once sync.Once
	return func() { once.Do(func() { e.remove(id) }) }, nil
}

func (e *sysEvents) remove(id int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.handlers, id)
	for i, x := range e.order {
		if x == id {
			e.order = append(e.order[:i], e.order[i+1:]...)
			break
		}
	}
}

// clear drops every handler: the runtime was released.
func (e *sysEvents) clear() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handlers, e.order = nil, nil
}

// SystemEventHandlers is how many system event handlers are registered.
func (h *HSA) SystemEventHandlers() int {
	h.events.mu.Lock()
	defer h.events.mu.Unlock()
	return len(h.events.order)
}

// accessFault is a GPU access to memory not mapped to it: ErrNoAccess with
// where it happened, for the memory fault event.
type accessFault struct {
	dev  int
	addr uint64
	msg  string
}

func (f *accessFault) Error() string { return f.msg }
func (f *accessFault) Unwrap() error { return ErrNoAccess }

// vmFault reports an access fault of GPU dev the way KFD and ROCr do: the
// handlers run on another goroutine (ROCr's event thread), in order; if
// none handled it, the process aborts with ROCr's message. It returns once
// the handlers have run, so the faulting queue reports its own error after
// the system event, unless SetVMFaultQueueErrorFirst reverses that order. The GPU's queues are evicted first, as KFD does (see
// SetVMFaultEviction).
func (m *Machine) vmFault(f *accessFault) {
	m.evict(f.dev)
	ev := hsa.SystemEvent{Type: hsa.EventGPUMemoryFault, MemoryFault: hsa.MemoryFault{
		Agent: gpuAgent(f.dev), Address: f.addr, Reason: hsa.MemoryFaultPageNotPresent}}
	e := &m.hsa.events
	e.mu.Lock()
	fns := make([]hsa.SystemEventFunc, 0, len(e.order))
	for _, id := range e.order {
		fns = append(fns, e.handlers[id])
	}
	e.mu.Unlock()
	deliver := func() {
		handled := false
		for _, fn := range fns {
			if fn(ev) {
				handled = true
			}
		}
		if !handled {
			abortUnhandledFault(f)
		}
	}
	if e.queueErrorFirst.Load() && !e.noQueueError.Load() {
		e.deferUntilQueueError(f.dev, func() { go deliver() })
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		deliver()
	}()
	<-done
}

// abortUnhandledFault ends the process as ROCr's VMFaultHandler does
// (print, then abort: exit status 134, SIGABRT's).
var abortUnhandledFault = func(f *accessFault) {
	fmt.Fprintf(os.Stderr, "Memory access fault by GPU node-%d (Agent handle: %#x) on address %#x. Reason: Page not present or supervisor privilege.\n"+
		"emu: aborting like ROCr: no hsa_amd_register_system_event_handler handler returned HSA_STATUS_SUCCESS (%v)\n",
		f.dev+1, uint64(gpuAgent(f.dev)), f.addr, f.msg)
	os.Exit(134)
}

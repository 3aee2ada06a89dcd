package rocmdev

import (
	"fmt"
	"sync"
	"time"

	"github.com/rocsync/rocsync/hostlane"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/stream"
)

// GPU memory faults.
//
// KFD evicts every user queue of the process on the faulting GPU (amdgpu
// kfd_int_process_v9.c, event_interrupt_wq_v9: kfd_dqm_evict_pasid), HIP's
// streams included, and nothing restores them: a HIP stream of that GPU
// never completes its pending work, and hipStreamDestroy on it never
// returns (clr HostQueue::terminate awaits the last command), nor does
// hipFree of that GPU's memory (clr hipamd/src/hip_memory.cpp, ihipFree,
// calls SyncAllStreams first) or rocblas_destroy_handle of a handle with a
// workspace (which it hipFrees). So the fault also evicts every stream and
// host lane of the device's tasks (stream.Evict, hostlane.Lane.Break):
// their work fails at once with the fault; rocsync never host-waits on
// them, and leaks, with a logged reason, the HIP streams, rocBLAS handles
// and device memory it would otherwise destroy or free.
//
// A kernel that touches memory not mapped to its GPU is a VM fault. KFD
// reports it through its memory event, which ROCr hands to the handlers of
// hsa_amd_register_system_event_handler with the faulting agent and
// address, and aborts the process when none handles it. The queue that
// faulted stops; on real KFD without the debugger interface the process's
// queues on that GPU are evicted and may report no queue error at all, so
// the packets in flight never complete. rocmdev therefore registers one
// handler per Open, and a fault on one of its GPUs breaks every HSA queue
// of that device (queue.Break) with an error naming the fault: every wait
// on the device returns it within one bounded signal wait, and the device
// accepts no more work. Other devices are unaffected.

// The same fault also reaches the faulting queue's error callback as
// HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION where the queue reports one,
// and ROCr 6.x handles the queue's exception and KFD's memory event as two
// async signals of its event thread, in no set order (seen on sid's ROCr
// 6.4.3 over the simulated driver: the queue error came first in 2 runs
// of 6). A queue error first would break the queue with an error that
// names neither the fault nor the address, and leave the device's other
// timelines running until the event. So a queue holds such an error back
// (queue.Config.OnMemoryViolation) and the device waits for the event:
// memoryFault then breaks every timeline with the fault and the queue's
// error together. If no event comes within memoryViolationGrace, the
// device breaks with a fault of unknown address, as the event would have.

// memoryViolationGrace bounds how long a memory violation reported by a
// queue waits for the system event that names its address. ROCr raises
// the event from the same interrupt as the queue's exception (amdgpu
// kfd_int_process_v9.c, event_interrupt_wq_v9), so it arrives within
// milliseconds; the bound only matters for a runtime that never
// raises it.
var memoryViolationGrace = 2 * time.Second

// memoryViolation is queue.Config.OnMemoryViolation: q holds a memory
// violation back until the device's fault breaks it.
func (d *Device) memoryViolation(q *queue.Queue) {
	if p := d.faultErr.Load(); p != nil {
		q.Break(*p)
		return
	}
	d.violationOnce.Do(func() {
		time.AfterFunc(memoryViolationGrace, func() {
			d.memoryFaultFrom(hsa.MemoryFault{Agent: d.agent}, true)
		})
	})
}

// faultRouter is the system event handler of one Open: it finds the
// device of the faulting agent.
type faultRouter struct {
	mu   sync.Mutex
	devs map[hsa.Agent]*Device
}

func (r *faultRouter) add(d *Device) {
	r.mu.Lock()
	r.devs[d.agent] = d
	r.mu.Unlock()
}

func (r *faultRouter) remove(d *Device) {
	r.mu.Lock()
	if r.devs[d.agent] == d {
		delete(r.devs, d.agent)
	}
	r.mu.Unlock()
}

// handle runs on ROCr's event thread. It claims only memory faults of the
// GPUs this Open drives (and has not closed): a fault elsewhere is not
// rocsync's to swallow, and ROCr reports it as it would without rocsync.
func (r *faultRouter) handle(ev hsa.SystemEvent) bool {
	if ev.Type != hsa.EventGPUMemoryFault {
		return false
	}
	r.mu.Lock()
	d := r.devs[ev.MemoryFault.Agent]
	r.mu.Unlock()
	if d == nil {
		return false
	}
	d.memoryFault(ev.MemoryFault)
	return true
}

// memoryFault breaks the device: the first fault is kept (later ones are
// usually its consequences), and every queue, stream and host lane fails
// with it.
func (d *Device) memoryFault(f hsa.MemoryFault) { d.memoryFaultFrom(f, false) }

// memoryFaultFrom is memoryFault; fromQueue says only a queue reported
// the fault (memoryViolation's grace ran out), so its address is unknown.
func (d *Device) memoryFaultFrom(f hsa.MemoryFault, fromQueue bool) {
	err := fmt.Errorf("rocmdev: gpu%d: %w", d.index, &hsa.MemoryFaultError{Fault: f, OnlyQueueError: fromQueue})
	// Not d.queues' lock: Close holds it while draining the queues, which
	// only this Break can end when the queue reports nothing itself.
	d.madeMu.Lock()
	if d.faultErr.Load() != nil {
		d.madeMu.Unlock()
		return
	}
	// Streams and lanes first, and the device's fault last: whoever
	// learns of the fault, from a broken queue or from a refused
	// submission, finds every timeline of the device failed.
	for _, tl := range d.live {
		tl.evict(err)
	}
	for _, q := range d.made {
		q.Break(err)
	}
	d.faultErr.Store(&err)
	d.madeMu.Unlock()
	if d.rt.Log != nil {
		d.rt.Log.Error().Int("gpu", d.index).Str("address", fmt.Sprintf("%#x", f.Address)).
			Str("reason", f.Reason.String()).
			Msg("rocsync: GPU memory access fault; the device's work fails from here on, reopen it to continue")
	}
}

// taskTimelines are a task's stream and host lane, which a fault evicts.
type taskTimelines struct {
	stream *stream.Stream
	host   *hostlane.Lane
}

func (tl taskTimelines) evict(err error) {
	tl.stream.Evict(err)
	tl.host.Break(err)
}

// trackTask records a new task's stream and lane for memoryFault, or
// evicts them at once when the fault came first.
func (d *Device) trackTask(t *Task) {
	tl := taskTimelines{stream: t.st.Stream, host: t.host}
	d.madeMu.Lock()
	defer d.madeMu.Unlock()
	if p := d.faultErr.Load(); p != nil {
		tl.evict(*p)
	}
	if d.live == nil {
		d.live = map[*Task]taskTimelines{}
	}
	d.live[t] = tl
}

// untrackTask forgets a closed task.
func (d *Device) untrackTask(t *Task) {
	d.madeMu.Lock()
	delete(d.live, t)
	d.madeMu.Unlock()
}

// leak logs what rocsync leaves undestroyed on a faulted GPU, and why.
func (d *Device) leak(what string) {
	if d.rt.Log != nil {
		d.rt.Log.Warn().Int("gpu", d.index).Str("leaked", what).
			Msg("rocsync: leaking a resource of a GPU whose queues a VM fault evicted: destroying or freeing it would wait for ever")
	}
}

// trackQueue records a new queue for memoryFault, or breaks it at once
// when the fault came first: whichever of the two takes madeMu second
// sees the other's work.
func (d *Device) trackQueue(q *queue.Queue) {
	d.madeMu.Lock()
	defer d.madeMu.Unlock()
	if p := d.faultErr.Load(); p != nil {
		q.Break(*p)
	}
	d.made = append(d.made, q)
}

// Fault returns the GPU memory fault that broke the device, or nil. The
// error matches hsa.ErrMemoryFault and *hsa.MemoryFaultError.
func (d *Device) Fault() error {
	if p := d.faultErr.Load(); p != nil {
		return *p
	}
	return nil
}

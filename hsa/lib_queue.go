//go:build linux && (amd64 || arm64)

package hsa

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// Queues and signals. The index, store and load calls here are the
// submission hot path; they use the pooled call helpers, which take no Go
// pointers (queue handles and signal handles are C memory or integers).

// QueueCreate is hsa_queue_create with no segment-size hints (UINT32_MAX,
// per hsa.h). onError, when non-nil, receives the queue's asynchronous
// errors on a runtime thread until QueueDestroy.
func (l *Lib) QueueCreate(a Agent, size uint32, typ QueueType, onError QueueErrorFunc) (*Queue, error) {
	var cb, id uintptr
	if onError != nil {
		initCallbacks()
		cb = queueCallback
		id = queueErrors.add(onError)
	}
	var qp uintptr
	r, _, _ := purego.SyscallN(l.fn[symQueueCreate], uintptr(a), uintptr(size), uintptr(typ), cb, id,
		uintptr(segmentSizeUnspecified), uintptr(segmentSizeUnspecified), uintptr(unsafe.Pointer(&qp)))
	if err := l.check("hsa_queue_create", r); err != nil {
		if id != 0 {
			queueErrors.remove(id)
		}
		return nil, err
	}
	if id != 0 {
		queueIDsMu.Lock()
		queueIDs[qp] = id
		queueIDsMu.Unlock()
	}
	return queueFromC(qp), nil
}

// queueFromC copies the fields the submitter reads out of a C hsa_queue_t.
// None of them change after creation.
func queueFromC(qp uintptr) *Queue {
	q := cmem.Ptr(qp)
	return &Queue{
		Handle:   q,
		Base:     *(*unsafe.Pointer)(unsafe.Add(q, queueOffBaseAddress)),
		Doorbell: Signal(*(*uint64)(unsafe.Add(q, queueOffDoorbell))),
		Size:     *(*uint32)(unsafe.Add(q, queueOffSize)),
		ID:       *(*uint64)(unsafe.Add(q, queueOffID)),
	}
}

// QueueDestroy is hsa_queue_destroy; it also drops the error callback.
// A queue that has raised an error is destroyed only after ROCr's error
// handler for it has finished (waitErrorHandler).
func (l *Lib) QueueDestroy(q *Queue) error {
	qp := uintptr(q.Handle)
	l.waitErrorHandler(q)
	if err := l.check("hsa_queue_destroy", cmem.Call(l.fn[symQueueDestroy], qp)); err != nil {
		return err
	}
	queueIDsMu.Lock()
	id, ok := queueIDs[qp]
	delete(queueIDs, qp)
	queueIDsMu.Unlock()
	if ok {
		queueErrors.remove(id)
		queueReported.Delete(id)
	}
	return nil
}

// queueInactiveSignalOffset is the offset of queue_inactive_signal in
// amd_queue_t (hsa/amd_hsa_queue.h), whose first member is the hsa_queue_t
// that hsa_queue_create returns.
const queueInactiveSignalOffset = 192

// errorHandlerDone is the value ROCr's queue error handler stores into
// queue_inactive_signal as its last act.
const errorHandlerDone = -1

// errorHandlerWaitLimit bounds waitErrorHandler: ROCr's handler normally
// finishes in microseconds, after the queue's error callback returns.
const errorHandlerWaitLimit = 30 * time.Second

// scratchErrorBits are the queue error codes of insufficient scratch
// (wave64 and wave32) that ROCr's handler may retry rather than report.
const scratchErrorBits = 0x401

var errorHandlerWaits atomic.Uint64

// ErrorHandlerWaits is how many QueueDestroy calls have found a queue's
// error handler still running and waited for it to finish.
func ErrorHandlerWaits() uint64 { return errorHandlerWaits.Load() }

// waitErrorHandler waits until ROCr's error handler of q, if one is
// running, has finished. The CP reports a queue error by storing its code
// into amd_queue_t.queue_inactive_signal; ROCr's async handler
// (AqlQueue::DynamicScratchHandler, amd_aql_queue.cpp, ROCr 5.2.3 and
// 6.x) calls the error callback, then sets ERROR_HANDLER_DONE, stores -1
// into the signal and unregisters itself. ~AqlQueue reads that state
// before it stores 0x8000000000000000 into the same signal and waits,
// without a timeout, for the handler to change it: a handler that finishes
// between the read and the store leaves the destructor waiting forever
// (no handler is left to answer). Waiting here for the -1 first makes the
// destructor find ERROR_HANDLER_DONE. A signal still 0 has raised no error
// (the destructor's own store then wakes the registered handler). An
// insufficient-scratch code (0x401 bits) the handler may keep, waiting for
// scratch to retry with, and end without -1: it is waited for only once
// the callback has been called (the handler then always ends with -1).
func (l *Lib) waitErrorHandler(q *Queue) {
	if !l.rocr || q.Handle == nil {
		return
	}
	sig := Signal(*(*uint64)(unsafe.Add(q.Handle, queueInactiveSignalOffset)))
	if sig == 0 {
		return
	}
	v := l.SignalLoadScacquire(sig)
	if v == 0 || v == errorHandlerDone {
		return
	}
	if v&scratchErrorBits != 0 {
		queueIDsMu.Lock()
		id := queueIDs[uintptr(q.Handle)]
		queueIDsMu.Unlock()
		if _, reported := queueReported.Load(id); id == 0 || !reported {
			return
		}
	}
	errorHandlerWaits.Add(1)
	deadline := time.Now().Add(errorHandlerWaitLimit)
	for nap := 10 * time.Microsecond; time.Now().Before(deadline); nap = min(2*nap, time.Millisecond) {
		if l.SignalLoadScacquire(sig) == errorHandlerDone {
			return
		}
		time.Sleep(nap)
	}
}

// QueueLoadReadIndexScacquire is hsa_queue_load_read_index_scacquire.
func (l *Lib) QueueLoadReadIndexScacquire(q *Queue) uint64 {
	return uint64(cmem.Call(l.fn[symQueueLoadReadIndexScacquire], uintptr(q.Handle)))
}

// QueueLoadWriteIndexRelaxed is hsa_queue_load_write_index_relaxed.
func (l *Lib) QueueLoadWriteIndexRelaxed(q *Queue) uint64 {
	return uint64(cmem.Call(l.fn[symQueueLoadWriteIndexRelaxed], uintptr(q.Handle)))
}

// QueueLoadWriteIndexScacquire is hsa_queue_load_write_index_scacquire,
// the load to pair with QueueCASWriteIndexScacqScrel in a reservation loop.
func (l *Lib) QueueLoadWriteIndexScacquire(q *Queue) uint64 {
	return uint64(cmem.Call(l.fn[symQueueLoadWriteIndexScacquire], uintptr(q.Handle)))
}

// QueueAddWriteIndexScacqScrel is hsa_queue_add_write_index_scacq_screl; it
// returns the previous write index (the first reserved slot).
func (l *Lib) QueueAddWriteIndexScacqScrel(q *Queue, n uint64) uint64 {
	return uint64(cmem.Call(l.fn[symQueueAddWriteIndexScacqScrel], uintptr(q.Handle), uintptr(n)))
}

// QueueCASWriteIndexScacqScrel is hsa_queue_cas_write_index_scacq_screl; it
// returns the value observed, which equals expected on success.
func (l *Lib) QueueCASWriteIndexScacqScrel(q *Queue, expected, value uint64) uint64 {
	return uint64(cmem.Call(l.fn[symQueueCASWriteIndexScacqScrel], uintptr(q.Handle), uintptr(expected), uintptr(value)))
}

// QueueStoreWriteIndexScrelease is hsa_queue_store_write_index_screlease.
func (l *Lib) QueueStoreWriteIndexScrelease(q *Queue, value uint64) {
	cmem.Call(l.fn[symQueueStoreWriteIndexScrelease], uintptr(q.Handle), uintptr(value))
}

// SignalCreate is hsa_signal_create. An empty consumers list means any agent
// may wait on the signal.
func (l *Lib) SignalCreate(initial int64, consumers []Agent) (Signal, error) {
	var s Signal
	r, _, _ := purego.SyscallN(l.fn[symSignalCreate], uintptr(initial), uintptr(len(consumers)),
		uintptr(unsafe.Pointer(unsafe.SliceData(consumers))), uintptr(unsafe.Pointer(&s)))
	return s, l.check("hsa_signal_create", r)
}

// AMDSignalCreate is hsa_amd_signal_create with SignalAttr* attributes.
func (l *Lib) AMDSignalCreate(initial int64, consumers []Agent, attributes uint64) (Signal, error) {
	var s Signal
	r, _, _ := purego.SyscallN(l.fn[symAMDSignalCreate], uintptr(initial), uintptr(len(consumers)),
		uintptr(unsafe.Pointer(unsafe.SliceData(consumers))), uintptr(attributes), uintptr(unsafe.Pointer(&s)))
	return s, l.check("hsa_amd_signal_create", r)
}

// SignalDestroy is hsa_signal_destroy.
func (l *Lib) SignalDestroy(s Signal) error {
	return l.check("hsa_signal_destroy", cmem.Call(l.fn[symSignalDestroy], uintptr(s)))
}

// SignalStoreScrelease is hsa_signal_store_screlease: the doorbell write.
func (l *Lib) SignalStoreScrelease(s Signal, v int64) {
	cmem.Call(l.fn[symSignalStoreScrelease], uintptr(s), uintptr(v))
}

// SignalStoreRelaxed is hsa_signal_store_relaxed.
func (l *Lib) SignalStoreRelaxed(s Signal, v int64) {
	cmem.Call(l.fn[symSignalStoreRelaxed], uintptr(s), uintptr(v))
}

// SignalSilentStoreRelaxed is hsa_signal_silent_store_relaxed: sets the
// value without waking waiters, for re-arming a completion signal nobody
// waits on yet.
func (l *Lib) SignalSilentStoreRelaxed(s Signal, v int64) {
	cmem.Call(l.fn[symSignalSilentStoreRelaxed], uintptr(s), uintptr(v))
}

// SignalLoadScacquire is hsa_signal_load_scacquire.
func (l *Lib) SignalLoadScacquire(s Signal) int64 {
	return int64(cmem.Call(l.fn[symSignalLoadScacquire], uintptr(s)))
}

// SignalLoadRelaxed is hsa_signal_load_relaxed.
func (l *Lib) SignalLoadRelaxed(s Signal) int64 {
	return int64(cmem.Call(l.fn[symSignalLoadRelaxed], uintptr(s)))
}

// SignalWaitScacquire is hsa_signal_wait_scacquire. It returns the observed
// value, which may not satisfy the condition (timeouts, spurious wakeups).
// A blocked wait holds its OS thread for the whole wait.
func (l *Lib) SignalWaitScacquire(s Signal, cond SignalCondition, compare int64, timeoutHint uint64, state WaitState) int64 {
	return int64(cmem.Call(l.fn[symSignalWaitScacquire], uintptr(s), uintptr(cond), uintptr(compare), uintptr(timeoutHint), uintptr(state)))
}

// SignalValuePointer is hsa_amd_signal_value_pointer.
func (l *Lib) SignalValuePointer(s Signal) (unsafe.Pointer, error) {
	var p uintptr
	r, _, _ := purego.SyscallN(l.fn[symAMDSignalValuePointer], uintptr(s), uintptr(unsafe.Pointer(&p)))
	if err := l.check("hsa_amd_signal_value_pointer", r); err != nil {
		return nil, err
	}
	return cmem.Ptr(p), nil
}

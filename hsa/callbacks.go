//go:build linux && (amd64 || arm64)

package hsa

import (
	"sync"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// C-to-Go callbacks.
//
// purego can make at most 2000 callbacks per process and never frees them,
// so the binding makes exactly three, once, and multiplexes: the C "void*
// data" argument carries an integer id that selects the Go function in a
// registry. The id is a plain number, never a Go pointer, so C holds nothing
// the garbage collector needs to know about.

var (
	callbacksOnce sync.Once
	iterCallback  uintptr // hsa_status_t (*)(uint64 handle, void* data)
	queueCallback uintptr // void (*)(hsa_status_t, hsa_queue_t*, void* data)
	eventCallback uintptr // hsa_status_t (*)(const hsa_amd_event_t*, void* data)
)

func initCallbacks() {
	callbacksOnce.Do(func() {
		iterCallback = purego.NewCallback(iterTrampoline)
		queueCallback = purego.NewCallback(queueErrorTrampoline)
		eventCallback = purego.NewCallback(systemEventTrampoline)
	})
}

// registry maps callback ids to Go values. Ids start at 1 so that a NULL
// data pointer never names an entry.
type registry[T any] struct {
	mu   sync.Mutex
	next uintptr
	m    map[uintptr]T
}

func (r *registry[T]) add(v T) uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[uintptr]T)
	}
	r.next++
	r.m[r.next] = v
	return r.next
}

func (r *registry[T]) get(id uintptr) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[id]
	return v, ok
}

func (r *registry[T]) remove(id uintptr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, id)
}

func (r *registry[T]) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// iterations holds the visitor of each hsa_iterate_agents-style call in
// flight. All three iterators pass a single 8-byte handle, so one trampoline
// serves agents, ISAs and memory pools.
var iterations registry[func(handle uint64)]

func iterTrampoline(handle uint64, data uintptr) uintptr {
	visit, ok := iterations.get(data)
	if !ok {
		return uintptr(StatusError) // stops the iteration; the caller reports it
	}
	visit(handle)
	return uintptr(StatusSuccess)
}

// iterate runs one iteration call with the shared trampoline; call receives
// the callback address and the data value to pass to C.
func (l *Lib) iterate(name string, call func(cb, data uintptr) uintptr, visit func(handle uint64)) error {
	initCallbacks()
	id := iterations.add(visit)
	r := call(iterCallback, id)
	iterations.remove(id)
	if status(r) == StatusInfoBreak {
		return nil
	}
	return l.check(name, r)
}

// queueErrors maps ids to the QueueErrorFunc of each live queue, and
// queueIDs maps hsa_queue_t* to the id so QueueDestroy can unregister.
var (
	queueErrors registry[QueueErrorFunc]
	queueIDsMu  sync.Mutex
	queueIDs    = map[uintptr]uintptr{}
	// queueReported holds the ids whose callback ROCr has called (the
	// queue's error handler is then in its last steps: see
	// waitErrorHandler).
	queueReported sync.Map
)

// queueErrorTrampoline runs on a runtime thread, not a Go-created one.
// status is hsa_status_t: only the low 32 bits of the register are defined.
func queueErrorTrampoline(st, queue, data uintptr) {
	if fn, ok := queueErrors.get(data); ok {
		queueReported.Store(data, struct{}{})
		fn(Status(uint32(st)))
	}
}

// systemEvents maps ids to the SystemEventFunc of each live registration.
var systemEvents registry[SystemEventFunc]

// systemEventTrampoline runs on ROCr's event thread. A registration that
// was cancelled (or an event type the binding cannot decode) answers
// HSA_STATUS_ERROR, "not handled": the binding never claims a fault that
// no Go code looked at, so ROCr's own report and abort still happen.
func systemEventTrampoline(event, data uintptr) uintptr {
	fn, ok := systemEvents.get(data)
	if !ok || event == 0 {
		return uintptr(StatusError)
	}
	if fn(decodeSystemEvent(cmem.Ptr(event))) {
		return uintptr(StatusSuccess)
	}
	return uintptr(StatusError)
}

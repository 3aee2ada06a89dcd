package cudadev

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/syncstate"
)

// eventPool recycles events created with CU_EVENT_DISABLE_TIMING.
type eventPool struct {
	b       backend
	mu      sync.Mutex
	free    []uintptr
	all     []uintptr
	created atomic.Uint64
}

func (p *eventPool) get() (uintptr, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	e, err := p.b.eventCreate()
	if err != nil {
		return 0, err
	}
	p.created.Add(1)
	p.mu.Lock()
	p.all = append(p.all, e)
	p.mu.Unlock()
	return e, nil
}

func (p *eventPool) put(e uintptr) {
	p.mu.Lock()
	p.free = append(p.free, e)
	p.mu.Unlock()
}

// destroy destroys every event the pool created.
func (p *eventPool) destroy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for _, e := range p.all {
		if err := p.b.eventDestroy(e); err != nil && first == nil {
			first = err
		}
	}
	p.all, p.free = nil, nil
	return first
}

// maxMarks is how many recorded events a timeline keeps before eventFor
// polls them.
const maxMarks = 16

// mark is an event recorded after the op with ticket.
type mark struct {
	ticket uint64
	ev     uintptr
	refs   int // users of the event; it is recycled only at 0 and when done
}

// Timeline is one CUDA stream as a syncstate.Timeline: every op submitted
// on it gets the next ticket. Events are recorded only when a consumer on
// another stream, or the host, needs to know when a ticket is done, and come
// from the device's pool, so a run of ops on one stream records none (the
// design of the HIP timeline in stream/).
type Timeline struct {
	b      backend
	s      uintptr
	name   string
	domain syncstate.Domain
	// bridge lets the stream wait on the device for the other domain
	// (DeviceBridge): on CUDA both domains are streams, so the same
	// cuStreamWaitEvent serves.
	bridge bool
	events *eventPool
	sinks  syncstate.Sinks

	mu         sync.Mutex
	lastTicket atomic.Uint64
	completed  atomic.Uint64
	marks      []mark // events in ticket order, oldest first

	// Used under mu by the ops submitted here.
	params *cuda.ParamBlock // kernel arguments, reused by every launch
	blas   uintptr          // the cuBLAS handle bound to the stream, or 0
}

var _ syncstate.Timeline = (*Timeline)(nil)

// Domain implements syncstate.Timeline.
func (t *Timeline) Domain() syncstate.Domain { return t.domain }

// Name implements syncstate.Timeline.
func (t *Timeline) Name() string { return t.name }

// LastTicket is the ticket of the newest op.
func (t *Timeline) LastTicket() uint64 { return t.lastTicket.Load() }

// Stream is the CUstream.
func (t *Timeline) Stream() cuda.Stream { return cuda.Stream(t.s) }

// commitLocked gives the op just enqueued its ticket.
func (t *Timeline) commitLocked() uint64 {
	n := t.lastTicket.Load() + 1
	t.lastTicket.Store(n)
	return n
}

// Completed implements syncstate.Timeline. It never blocks (on contention
// it returns what it knows) and asks the driver at most one question: when
// an event is recorded after the newest op, whether that event is reached,
// which proves the whole stream complete. When the newest event is older
// than the newest op it asks nothing: syncstate asks about the fences it is
// about to order after, which are usually the producer's newest ops, and a
// query that cannot prove those complete would cost as much as the device
// wait it might save (a cuEventQuery and a cuStreamWaitEvent cost about the
// same), and a host wait for an op that is already complete returns at
// once.
func (t *Timeline) Completed() uint64 {
	c := t.completed.Load()
	last := t.lastTicket.Load()
	if c == last || !t.mu.TryLock() {
		return c
	}
	if n := len(t.marks); n > 0 {
		if m := t.marks[n-1]; m.ticket == last && m.ticket > t.completed.Load() {
			if ok, err := t.b.eventQuery(m.ev); err == nil && ok {
				t.completed.Store(m.ticket)
				t.recycleLocked(false)
			}
		}
	}
	t.mu.Unlock()
	return t.completed.Load()
}

func (t *Timeline) pollLocked() { t.recycleLocked(true) }

// recycleLocked learns which marks are complete, oldest first, and returns
// the events nobody holds to the pool. With query unset it asks the driver
// nothing and only recycles marks already known complete.
func (t *Timeline) recycleLocked(query bool) {
	k := 0
	for ; k < len(t.marks); k++ {
		m := &t.marks[k]
		if m.ticket > t.completed.Load() {
			if !query {
				break
			}
			ok, err := t.b.eventQuery(m.ev)
			if err != nil || !ok {
				break
			}
			t.completed.Store(m.ticket)
		}
		if m.refs > 0 {
			break
		}
		t.events.put(m.ev)
	}
	if k > 0 {
		n := copy(t.marks, t.marks[k:])
		clear(t.marks[n:])
		t.marks = t.marks[:n]
	}
}

// Poll asks the stream itself whether all its work is done (cuStreamQuery).
// It costs a driver call, so the ordering hot path does not use it; freeing
// does.
func (t *Timeline) Poll() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.lastTicket.Load()
	if t.completed.Load() < last {
		if ok, err := t.b.streamQuery(t.s); err == nil && ok {
			t.completed.Store(last)
		}
	}
	t.pollLocked()
	return t.completed.Load()
}

// eventFor returns an event that completes no earlier than ticket tk, with
// a reference taken, or ok=false when tk is already complete. It reuses a
// recorded event at or after tk, and otherwise records one now, which
// covers every op submitted so far, tk included.
func (t *Timeline) eventFor(tk uint64) (ev uintptr, ok bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk <= t.completed.Load() {
		return 0, false, nil
	}
	for i := range t.marks {
		if t.marks[i].ticket >= tk {
			t.marks[i].refs++
			return t.marks[i].ev, true, nil
		}
	}
	if n := len(t.marks); n > 0 && t.marks[n-1].refs == 0 {
		// Nobody holds the newest event between eventFor and its wait,
		// so record it again, after tk: the waits already enqueued on it
		// captured its earlier record, and no query is needed to recycle
		// it. What it said about its old ticket is given up.
		m := &t.marks[n-1]
		if err := t.b.eventRecord(m.ev, t.s); err != nil {
			return 0, false, err
		}
		t.sinks.EventRecorded()
		m.ticket, m.refs = t.lastTicket.Load(), 1
		return m.ev, true, nil
	}
	if len(t.marks) >= maxMarks {
		// Many waits in flight at once: learn what is done so the marks
		// (and the pool) stay small.
		t.pollLocked()
	}
	ev, err = t.events.get()
	if err != nil {
		return 0, false, err
	}
	if err := t.b.eventRecord(ev, t.s); err != nil {
		t.events.put(ev)
		return 0, false, err
	}
	t.sinks.EventRecorded()
	t.marks = append(t.marks, mark{ticket: t.lastTicket.Load(), ev: ev, refs: 1})
	return ev, true, nil
}

// releaseEvent drops a reference taken by eventFor. It asks the driver
// nothing (a cuEventQuery per crossing would cost as much as the crossing
// itself): marks already known complete are recycled now, the others at
// the next Completed, Poll or host wait.
func (t *Timeline) releaseEvent(ev uintptr) {
	t.mu.Lock()
	for i := range t.marks {
		if t.marks[i].ev == ev {
			t.marks[i].refs--
			break
		}
	}
	t.recycleLocked(false)
	t.mu.Unlock()
}

// WaitHost implements syncstate.Timeline. Waiting for the newest op when
// no recorded event covers it, the usual case (a read-back, a boundary
// crossing, WaitAlways, Drain), is one cuStreamSynchronize; otherwise it is
// cuEventSynchronize on an event recorded (or reused) for ticket tk, which
// does not also wait for the ops submitted after tk.
func (t *Timeline) WaitHost(tk uint64) error {
	if last, ok := t.wholeStream(tk); ok {
		// Ops another goroutine submits meanwhile may be waited for too,
		// which is harmless; only tickets up to last are claimed done.
		if err := t.b.streamSynchronize(t.s); err != nil {
			return err
		}
		t.mu.Lock()
		if last > t.completed.Load() {
			t.completed.Store(last)
		}
		t.recycleLocked(false)
		t.mu.Unlock()
		return nil
	}
	ev, ok, err := t.eventFor(tk)
	if err != nil || !ok {
		return err
	}
	err = t.b.eventSynchronize(ev)
	if err == nil {
		t.mu.Lock()
		for _, m := range t.marks {
			if m.ev == ev && m.ticket > t.completed.Load() {
				t.completed.Store(m.ticket)
			}
		}
		t.mu.Unlock()
	}
	t.releaseEvent(ev)
	return err
}

// wholeStream reports whether waiting for tk means waiting for the whole
// stream: tk is not known complete, it is the newest ticket, and no
// recorded event covers it (one would be recorded only to be waited for).
func (t *Timeline) wholeStream(tk uint64) (last uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last = t.lastTicket.Load()
	if tk <= t.completed.Load() || tk != last {
		return 0, false
	}
	for _, m := range t.marks {
		if m.ticket >= tk {
			return 0, false
		}
	}
	return last, true
}

// CanWaitDevice implements syncstate.Timeline: cuStreamWaitEvent orders a
// stream after any other stream. Within a domain that is always used; across
// the kernel/library boundary only under DeviceBridge, so that the other
// policies keep the boundary host wait they are defined by.
func (t *Timeline) CanWaitDevice(d syncstate.Domain) bool { return d == t.domain || t.bridge }

// WaitDevice implements syncstate.Timeline with cuStreamWaitEvent. The
// wait captures the event's newest record when it is enqueued, so the event
// may be recycled as soon as the call returns and the producer has passed
// it.
func (t *Timeline) WaitDevice(fences []syncstate.Fence) error {
	for _, f := range fences {
		p, ok := f.TL.(*Timeline)
		if !ok {
			return fmt.Errorf("cudadev: %s cannot wait on the device for %s (%s): not a CUDA stream", t.name, f.TL.Name(), f.TL.Domain())
		}
		if p.domain != t.domain && !t.bridge {
			return fmt.Errorf("cudadev: %s (%s) cannot wait on the device for %s (%s) under this policy", t.name, t.domain, p.name, p.domain)
		}
		ev, ok, err := p.eventFor(f.Ticket)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		t.mu.Lock()
		err = t.b.streamWaitEvent(t.s, ev)
		t.mu.Unlock()
		p.releaseEvent(ev)
		if err != nil {
			return err
		}
	}
	return nil
}

// Drain waits on the host for everything submitted so far.
func (t *Timeline) Drain() error { return t.WaitHost(t.lastTicket.Load()) }

// close drains the stream and destroys it; the events go back to the pool.
func (t *Timeline) close() error {
	err := t.Drain()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		t.completed.Store(t.lastTicket.Load())
	}
	for _, m := range t.marks {
		t.events.put(m.ev)
	}
	t.marks = nil
	if t.s != 0 {
		if e := t.b.streamDestroy(t.s); e != nil && err == nil {
			err = e
		}
		t.s = 0
	}
	t.params.Free()
	t.params = nil
	return err
}

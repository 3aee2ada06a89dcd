package syncstate

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Failure is what broke a timeline: the error, and the first ticket it
// covers. Every ticket from From on fails with Err.
type Failure struct {
	From uint64
	Err  error
}

// UpstreamError is the failure of a timeline that waited on the device for
// a fence that failed: the work behind that wait ran, if at all, on inputs
// that were never produced. errors.Is and errors.As see the producer's
// error through it.
type UpstreamError struct {
	Consumer string // the timeline that waited
	Producer Fence  // the fence it waited for
	Err      error  // the producer's failure
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("%s waited on the device for %v, which failed: %v", e.Consumer, e.Producer, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// Health tracks whether a timeline is broken: by a fault of its own
// (Fail), or because it waited on the device for a fence that failed
// (AddUpstream records each such wait until it is known to have passed on
// good data). Queues and streams embed one; Failed is their
// Timeline.Failed.
//
// Failed never blocks and never calls the runtime: it reads an atomic,
// and only when device waits are in flight asks their producers, with
// TryLock so that timelines waiting on each other cannot deadlock.
type Health struct {
	failure atomic.Pointer[Failure]
	mu      sync.Mutex
	ups     []upstream
	n       atomic.Int32
	name    string        // the timeline's, for errors; under mu
	checked atomic.Uint64 // failures+1 when the producers were last found healthy
}

type upstream struct {
	f  Fence  // what the timeline waited for
	at uint64 // the first ticket behind the wait
}

// failures counts the failures of every timeline in the process. A Health
// whose producers were all found healthy at the current count need not
// ask them again: nothing can have failed since. This keeps Failed O(1)
// while nothing fails, on the hot path of every op.
var failures atomic.Uint64

// Fail breaks the timeline from ticket from on. The earliest failure wins,
// whatever the order of the reports: a timeline may learn first that a
// producer it waited for failed (from the ticket behind that wait), and
// only then of its own, earlier fault, which must not be shadowed.
func (h *Health) Fail(from uint64, err error) {
	nf := &Failure{From: from, Err: err}
	for {
		old := h.failure.Load()
		if old != nil && old.From <= from {
			return
		}
		if h.failure.CompareAndSwap(old, nf) {
			failures.Add(1)
			return
		}
	}
}

// Failure returns what broke the timeline, or nil.
func (h *Health) Failure() *Failure {
	if p := h.failure.Load(); p != nil {
		return p
	}
	if h.n.Load() != 0 {
		h.check()
	}
	return h.failure.Load()
}

// Err is the timeline's error, nil while it is healthy.
func (h *Health) Err() error {
	if p := h.Failure(); p != nil {
		return p.Err
	}
	return nil
}

// Failed returns the error of ticket t, nil if t is not known to fail.
func (h *Health) Failed(t uint64) error {
	p := h.Failure()
	if p == nil || t < p.From {
		return nil
	}
	return p.Err
}

// AddUpstream records that the timeline's tickets from at on wait on the
// device for f.
func (h *Health) AddUpstream(name string, f Fence, at uint64) {
	h.mu.Lock()
	h.ups = append(h.ups, upstream{f: f, at: at})
	h.n.Store(int32(len(h.ups)))
	h.name = name
	h.mu.Unlock()
}

// check breaks the timeline if a producer it waited for failed: from the
// first ticket behind a wait for a failed fence.
func (h *Health) check() {
	epoch := failures.Load()
	if h.checked.Load() == epoch+1 || !h.mu.TryLock() {
		return
	}
	defer h.mu.Unlock()
	for _, u := range h.ups {
		if err := u.f.TL.Failed(u.f.Ticket); err != nil {
			h.Fail(u.at, &UpstreamError{Consumer: h.name, Producer: u.f, Err: err})
			return
		}
	}
	// Stored +1 so that the zero value means never checked.
	h.checked.Store(epoch + 1)
}

// Prune forgets the device waits behind which the timeline completed up to
// ticket completed on good data, oldest first, and breaks it if a
// producer failed.
func (h *Health) Prune(completed uint64) {
	if h.n.Load() == 0 {
		return
	}
	h.check()
	if h.failure.Load() != nil || !h.mu.TryLock() {
		return
	}
	defer h.mu.Unlock()
	k := 0
	for ; k < len(h.ups); k++ {
		u := h.ups[k]
		if u.at > completed || !u.f.Done() || u.f.TL.Failed(u.f.Ticket) != nil {
			break
		}
	}
	if k > 0 {
		n := copy(h.ups, h.ups[k:])
		clear(h.ups[n:])
		h.ups = h.ups[:n]
		h.n.Store(int32(n))
	}
}

// poller is a timeline that can ask its runtime whether its work is done,
// learning of a failure as it does (streams: hipStreamQuery).
type poller interface{ Poll() uint64 }

// Settled returns the largest ticket t ≤ limit such that every device
// wait the timeline's tickets up to t sit behind has its producer known
// complete. A broken timeline must not count its failed tickets complete,
// nor release their waiters, past it: whoever waits for ticket t relies
// on everything t was ordered after having completed, and a broken queue
// or stream skips its device waits (or never reaches them).
func (h *Health) Settled(limit uint64) uint64 {
	if h.n.Load() == 0 {
		return limit
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, u := range h.ups {
		if u.at <= limit && !u.f.Done() {
			limit = u.at - 1
		}
	}
	return limit
}

// HealthReporter is a timeline whose Health can be read: Probe walks
// from a timeline to the producers its producers waited for.
type HealthReporter interface{ Health() *Health }

// maxProbe bounds the timelines one Probe visits.
const maxProbe = 32

// Probe asks the producers of the device waits in flight whether they
// failed, at a runtime call each, and their producers in turn, up the
// chain of device waits: a stream's failure is learned only by asking, and
// until it is, a consumer waiting behind it would wait forever. Waiters
// call it between bounded waits. The chain matters where it crosses
// domains (DeviceBridge): a stream that waits on the device for an HSA
// queue, which waits for a broken stream, is blocked but not failed, so
// asking it says nothing; only asking the broken stream, two waits away,
// releases the signals the others wait for.
func (h *Health) Probe() {
	if h.n.Load() == 0 {
		return
	}
	var hs [maxProbe]*Health
	var seen [maxProbe]Timeline
	var polls [maxProbe]poller
	hs[0] = h
	nh, ns, np := 1, 0, 0
	for i := 0; i < nh; i++ {
		x := hs[i]
		if x.n.Load() == 0 || !x.mu.TryLock() {
			continue
		}
		for _, u := range x.ups {
			if ns == len(seen) || seenIn(seen[:ns], u.f.TL) || u.f.TL.Failed(u.f.Ticket) != nil {
				continue
			}
			seen[ns] = u.f.TL
			ns++
			if p, ok := u.f.TL.(poller); ok {
				polls[np] = p
				np++
			}
			if r, ok := u.f.TL.(HealthReporter); ok && nh < len(hs) {
				hs[nh] = r.Health()
				nh++
			}
		}
		x.mu.Unlock()
	}
	for _, p := range polls[:np] {
		p.Poll()
	}
}

func seenIn(s []Timeline, tl Timeline) bool {
	for _, x := range s {
		if x == tl {
			return true
		}
	}
	return false
}

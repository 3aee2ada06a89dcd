package syncstate

import (
	"fmt"
	"slices"
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
// Failed never blocks on the device and never calls the runtime, and its
// answer is exact: a failed ticket is never reported healthy, for that
// answer lets a read-back copy data that was never produced. While nothing
// has failed it reads two atomics. Otherwise it walks the chain of device
// waits in flight, asking each producer (see check).
//
// mu guards the record of device waits only, and nothing is called while
// it is held: a walk takes one timeline's record at a time, so timelines
// that wait on each other cannot deadlock, and no caller is ever turned
// away because another goroutine is looking at the same record.
type Health struct {
	failure atomic.Pointer[Failure]
	mu      sync.Mutex
	ups     []upstream
	base    uint64 // under mu: waits pruned so far (ups[i] is the base+i-th recorded)
	gen     uint64 // under mu: waits recorded so far
	n       atomic.Int32
	name    string        // the timeline's, for errors; under mu
	checked atomic.Uint64 // failures+1 when the producers were last asked
}

type upstream struct {
	f  Fence  // what the timeline waited for
	at uint64 // the first ticket behind the wait
}

// failures counts the failures of every timeline in the process. A Health
// whose producers were asked at the current count, with no device wait
// recorded since, need not ask them again: nothing can have failed since. This keeps Failed O(1) while nothing fails, on the hot
// path of every op.
var failures atomic.Uint64

// Fail breaks the timeline from ticket from on. The earliest failure wins,
// whatever the order of the reports: a timeline may learn first that a
// producer it waited for failed (from the ticket behind that wait), and
// only then of its own, earlier fault, which must not be shadowed; or the
// other way round.
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

// Failure returns what broke the timeline, or nil. A timeline already
// broken from some ticket on still asks the producers it waited for: one
// of them may have failed earlier tickets.
func (h *Health) Failure() *Failure {
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
// device for f. f may have failed already (its timeline broke after the
// consumer looked at its inputs): the next check asks.
func (h *Health) AddUpstream(name string, f Fence, at uint64) {
	h.mu.Lock()
	h.ups = append(h.ups, upstream{f: f, at: at})
	h.n.Store(int32(len(h.ups)))
	h.name = name
	h.gen++
	h.checked.Store(0)
	h.mu.Unlock()
}

// upChunk is how many device waits a walk copies out of a record at a time.
const upChunk = 8

// snapshot copies the record's device waits from the from-th recorded on
// (those pruned since are skipped) into buf. It returns how many it
// copied, the index to continue from, and the timeline's name.
func (h *Health) snapshot(from uint64, buf *[upChunk]upstream) (k int, next uint64, name string) {
	h.mu.Lock()
	from = max(from, h.base)
	if i := from - h.base; i < uint64(len(h.ups)) {
		k = copy(buf[:], h.ups[i:])
	}
	name = h.name
	h.mu.Unlock()
	return k, from + uint64(k), name
}

// check breaks the timeline if a producer it waited for failed: from the
// first ticket behind a wait for a failed fence. The producers are asked
// up the chain of device waits (walk); the answer is remembered until
// something fails anywhere or a new wait is recorded, which is all that
// can change it.
func (h *Health) check() {
	epoch := failures.Load()
	if h.checked.Load() == epoch+1 {
		return
	}
	h.mu.Lock()
	gen := h.gen
	h.mu.Unlock()
	walk(h)
	h.mu.Lock()
	if h.gen == gen {
		// Stored +1 so that the zero value means never checked.
		h.checked.Store(epoch + 1)
	}
	h.mu.Unlock()
}

// walk visits h and, breadth first, the timelines its device waits wait
// for (HealthReporters), and breaks each one whose wait's producer failed,
// from the first ticket behind that wait; it repeats until nothing new
// breaks, for a timeline found broken may be the producer of one visited
// before it. Producers that are not HealthReporters answer through their
// own Failed.
func walk(h *Health) {
	var arr [maxProbe]*Health
	nodes := append(arr[:0], h)
	for {
		changed := false
		for i := 0; i < len(nodes); i++ {
			x := nodes[i]
			var buf [upChunk]upstream
			for next := uint64(0); ; {
				k, nx, name := x.snapshot(next, &buf)
				if k == 0 {
					break
				}
				next = nx
				for _, u := range buf[:k] {
					if p := x.failure.Load(); p != nil && p.From <= u.at {
						continue // broken already from this wait on
					}
					ph, err := producerFailed(u.f)
					switch {
					case err != nil:
						x.Fail(u.at, &UpstreamError{Consumer: name, Producer: u.f, Err: err})
						changed = true
					case ph != nil && ph.n.Load() != 0 && !slices.Contains(nodes, ph):
						nodes = append(nodes, ph)
					}
				}
				clear(buf[:k])
			}
		}
		if !changed {
			return
		}
	}
}

// producerFailed returns f's failure as f's timeline records it; for a
// HealthReporter not (yet) broken at f, the Health to walk on to. A
// HealthReporter is never asked through its Failed, which would start a
// walk of its own: timelines wait for each other both ways, and such walks
// would ask each other for ever.
func producerFailed(f Fence) (*Health, error) {
	r, ok := f.TL.(HealthReporter)
	if !ok {
		return nil, f.TL.Failed(f.Ticket)
	}
	ph := r.Health()
	if p := ph.failure.Load(); p != nil && f.Ticket >= p.From {
		return nil, p.Err
	}
	return ph, nil
}

// Prune forgets the device waits behind which the timeline completed up to
// ticket completed on good data, oldest first, and breaks it if a
// producer failed.
func (h *Health) Prune(completed uint64) {
	if h.n.Load() == 0 {
		return
	}
	h.check()
	for h.failure.Load() == nil {
		var buf [upChunk]upstream
		h.mu.Lock()
		base := h.base
		k := copy(buf[:], h.ups)
		h.mu.Unlock()
		m := 0
		for ; m < k; m++ {
			u := buf[m]
			if u.at > completed || !u.f.Done() || u.f.TL.Failed(u.f.Ticket) != nil {
				break
			}
		}
		clear(buf[:k])
		if m == 0 {
			return
		}
		h.mu.Lock()
		if h.base != base {
			h.mu.Unlock()
			return // pruned meanwhile by another goroutine
		}
		n := copy(h.ups, h.ups[m:])
		clear(h.ups[n:])
		h.ups = h.ups[:n]
		h.base += uint64(m)
		h.n.Store(int32(n))
		h.mu.Unlock()
		if m < upChunk {
			return
		}
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
	var buf [upChunk]upstream
	for next := uint64(0); ; {
		k, nx, _ := h.snapshot(next, &buf)
		if k == 0 {
			return limit
		}
		next = nx
		for _, u := range buf[:k] {
			if u.at <= limit && !u.f.Done() {
				limit = u.at - 1
			}
		}
		clear(buf[:k])
	}
}

// HealthReporter is a timeline whose Health can be read: check and Probe
// walk from a timeline to the producers its producers waited for.
type HealthReporter interface{ Health() *Health }

// maxProbe bounds the timelines one Probe visits (a check's walk has room
// for as many without allocating, and visits every one it reaches).
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
		if x.n.Load() == 0 {
			continue
		}
		var buf [upChunk]upstream
		for next := uint64(0); ; {
			k, nx, _ := x.snapshot(next, &buf)
			if k == 0 {
				break
			}
			next = nx
			for _, u := range buf[:k] {
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
			clear(buf[:k])
		}
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

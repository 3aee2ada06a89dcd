package stream

// Bounded host waits that block.
//
// Neither HIP nor CUDA has a synchronize call with a deadline. Polling
// the event or stream and sleeping between queries wakes late and doubles
// the cost of short waits on a GPU, so a bounded wait (Config.WaitTimeout,
// or a cancellable context) hands
// the blocking call (hipEventSynchronize / cuEventSynchronize on the event
// for its ticket, or the stream synchronize when it waits for the whole
// stream) to a helper goroutine from a process-wide pool and selects on
// three things: the helper's answer, ctx.Done(), and a timer of its own
// (reused: Reset, no allocation). The timer fires at the deadline and, in
// between, at growing pauses (probeFirst doubling to probeMax), when the
// waiter asks the producers its stream waited for on the device whether
// they failed (Health.Probe): a stream behind a failed producer may never
// reach its ticket, and only asking releases it.
//
// A wait that ends early (timeout, ctx, a failure seen by probing) leaves
// its helper blocked in the runtime until the work completes or fails; the
// helper then does the wait's bookkeeping (what is complete, the event's
// reference) and goes back to the pool, so the GPU work is never
// cancelled and nothing is lost. Later waits take other helpers: a helper
// serves one call at a time and the pool grows when all are busy, so a
// wait is never queued behind another's call. A stream keeps at most
// maxAbandoned abandoned calls in flight; past that (work stuck while the
// caller retries) its waits poll as before, so stuck work cannot pile up
// goroutines. A stream's own runtime error ends the blocking call, which
// returns it. Close never waits for a helper: when a helper is still in a
// stream synchronize, the stream handle is destroyed when that call
// returns.
//
// Before the handoff a bounded wait queries for a while (spinFor): the
// handoff's two goroutine wake-ups cost about 20 µs per wait on an H100
// host's VM (bench -paired-raw -wait-timeout, docs/benchmarks.md), so a
// wait should reach it only once that is a small part of the wait. At
// 100 µs, a replay of 99 chained kernels (131 µs on an H200) took
// 1.15-1.31x the raw graph and 1.01-1.03x at 1 ms (bench -paired-raw
// -replay, docs/benchmarks.md). The spin costs no processor time the
// blocking call would not: on a context with the default scheduling
// (CU_CTX_SCHED_AUTO, cuCtxCreate in the CUDA driver API), a synchronize
// spins too while the host has more cores than active contexts.
//
// In steady state a wait allocates nothing: the request (with its result
// channel and timer) comes from a free list, and an idle helper takes it
// through a buffered channel after a reservation of the idle count, so
// the handoff never spawns a goroutine while one is idle.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocsync/rocsync/syncstate"
)

// spinFor is how long a bounded wait queries its event or stream before
// it hands the blocking call to a helper: a wait that outlasts it pays
// the handoff's ~20 µs, under 2% of it.
const spinFor = time.Millisecond

// spin queries ev (or, when ev is 0, the stream h) until it is done, a
// query fails, or spinFor has passed since b began: done reports whether
// the wait is over (err then says how it ended).
func (s *Stream) spin(b *syncstate.Bound, h, ev uintptr) (done bool, err error) {
	start := b.Start
	if start.IsZero() {
		start = time.Now()
	}
	for i := 0; ; i++ {
		var ok bool
		if ev != 0 {
			ok, err = s.api.EventQuery(ev)
		} else {
			ok, err = s.api.StreamQuery(h)
		}
		if err != nil || ok {
			return true, err
		}
		if i%4 == 3 && spinEnded(b, start) {
			return false, nil
		}
	}
}

// spinEnded reports whether a bounded wait that began spinning at start
// (b.Start, when set) is to stop: spinFor has passed, or its bound
// already ends the wait (its timeout, its context), which the blocking
// path then reports at once instead of after the rest of the spin.
func spinEnded(b *syncstate.Bound, start time.Time) bool {
	el := time.Since(start)
	return el >= spinFor || b.Ended(el)
}

// The spin never yields the processor: a query is a foreign call, during
// which other goroutines run anyway, and a runtime.Gosched costs ~15 µs
// on an H100 host (the goroutine goes through the global run queue),
// which makes every wait longer than ~16 queries 15 µs late (a replayed
// 128x128 matmul takes 1.85x the raw graph with it, bench -paired-raw
// -replay). The emulator, whose GPU is goroutines of this
// process, yields in its own not-ready answers instead.

const (
	// probeFirst and probeMax pace the checks for failed producers
	// during a blocking wait.
	probeFirst, probeMax = 100 * time.Microsecond, 2 * time.Millisecond
	// maxIdleHelpers is how many idle helpers the pool keeps.
	maxIdleHelpers = 8
	// maxAbandoned is how many abandoned blocking calls a stream may
	// have in flight before its bounded waits fall back to polling.
	maxAbandoned = 4
)

const (
	reqPending int32 = iota
	reqDone
	reqAbandoned
)

// blockReq is one blocking call handed to a helper.
type blockReq struct {
	s     *Stream
	ev    uintptr // the event to synchronize; 0: the whole stream
	h     uintptr // the stream handle, for a whole-stream wait
	last  uint64  // a whole-stream wait completes the tickets up to last
	state atomic.Int32
	done  chan error // buffered: the helper never blocks on it
	timer *time.Timer
}

var blockReqs struct {
	mu   sync.Mutex
	free []*blockReq
}

func getBlockReq() *blockReq {
	blockReqs.mu.Lock()
	if n := len(blockReqs.free); n > 0 {
		r := blockReqs.free[n-1]
		blockReqs.free = blockReqs.free[:n-1]
		blockReqs.mu.Unlock()
		return r
	}
	blockReqs.mu.Unlock()
	r := &blockReq{done: make(chan error, 1), timer: time.NewTimer(time.Hour)}
	r.timer.Stop()
	return r
}

func putBlockReq(r *blockReq) {
	r.s = nil
	blockReqs.mu.Lock()
	blockReqs.free = append(blockReqs.free, r)
	blockReqs.mu.Unlock()
}

// helpers is the pool of goroutines that make blocking calls. idle counts
// the helpers committed to receiving from work; a sender that reserves
// one (decrements idle) can send without blocking, since work holds as
// many requests as there can be idle helpers.
var helpers struct {
	idle atomic.Int32
	work chan *blockReq
}

func init() { helpers.work = make(chan *blockReq, maxIdleHelpers) }

// handOff gives r to an idle helper, or to a new one when none is idle.
func handOff(r *blockReq) {
	for {
		n := helpers.idle.Load()
		if n == 0 {
			go helper(r)
			return
		}
		if helpers.idle.CompareAndSwap(n, n-1) {
			helpers.work <- r
			return
		}
	}
}

func helper(r *blockReq) {
	for r.run() {
		r = <-helpers.work
	}
}

// becomeIdle counts the helper idle, committing it to take the next
// request, unless the pool has enough idle helpers (then it exits).
func becomeIdle() bool {
	for {
		n := helpers.idle.Load()
		if n >= maxIdleHelpers {
			return false
		}
		if helpers.idle.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// run makes the blocking call, records what it proved on the stream, and
// answers the waiter, or, when the waiter gave up, recycles the request.
// It reports whether the helper stays in the pool, counted idle before
// the answer so that the waiter's next wait finds it.
func (r *blockReq) run() (stay bool) {
	s := r.s
	var err error
	if r.ev != 0 {
		err = s.api.EventSynchronize(r.ev)
	} else {
		err = s.api.StreamSynchronize(r.h)
	}
	s.finishBlocking(r, err)
	stay = becomeIdle()
	if r.state.CompareAndSwap(reqPending, reqDone) {
		r.done <- err
		return stay
	}
	s.mu.Lock()
	s.abandoned--
	s.mu.Unlock()
	putBlockReq(r)
	return stay
}

// finishBlocking is the bookkeeping after a blocking call, as the waiter
// itself would do it after a synchronize: the tickets it proved complete
// (or failed), the event's reference, and a destroy that Close left to
// the last call on the stream handle.
func (s *Stream) finishBlocking(r *blockReq, err error) {
	s.mu.Lock()
	closed := s.s == 0
	if r.ev == 0 {
		s.handleCalls--
		if closed && s.handleCalls == 0 && s.destroyPending {
			s.destroyPending = false
			_ = s.api.StreamDestroy(r.h) // Close has returned; nobody to tell
		}
		if !closed {
			if err != nil {
				s.failLocked(err, r.last)
			} else if r.last > s.completed.Load() {
				s.completed.Store(r.last)
			}
			s.recycleLocked(false)
		}
		s.mu.Unlock()
		return
	}
	if !closed {
		for _, m := range s.marks {
			if m.ev == r.ev && m.ticket > s.completed.Load() {
				if err != nil {
					s.failLocked(err, m.ticket)
					break
				}
				s.completed.Store(m.ticket)
			}
		}
	}
	s.releaseEventLocked(r.ev)
	s.mu.Unlock()
}

// waitBlocking waits for t under b with the blocking call r describes,
// made by a helper. The caller has taken the event's reference (or
// counted the call on the handle); the helper gives it back.
func (s *Stream) waitBlocking(b *syncstate.Bound, t uint64, r *blockReq) error {
	r.state.Store(reqPending)
	handOff(r)
	pause := probeFirst
	var deadline time.Time
	if b.Timeout > 0 {
		deadline = b.Start.Add(b.Timeout)
	}
	arm := func() {
		d := pause
		if !deadline.IsZero() {
			d = min(d, time.Until(deadline))
		}
		r.timer.Reset(max(d, 0))
	}
	arm()
	var cancelled <-chan struct{}
	if syncstate.Cancellable(b.Ctx) {
		cancelled = b.Ctx.Done()
	}
	for {
		var stop error
		select {
		case err := <-r.done:
			r.timer.Stop()
			putBlockReq(r)
			return err
		case <-cancelled:
			stop = b.Check(syncstate.Fence{TL: s, Ticket: t})
		case <-r.timer.C:
			stop = b.Check(syncstate.Fence{TL: s, Ticket: t})
			if stop == nil {
				s.health.Probe()
				stop = s.health.Failed(t)
			}
		}
		if stop == nil {
			pause = min(2*pause, probeMax)
			arm()
			continue
		}
		r.timer.Stop()
		s.mu.Lock()
		if !r.state.CompareAndSwap(reqPending, reqAbandoned) {
			// The call returned meanwhile: its answer stands.
			s.mu.Unlock()
			err := <-r.done
			putBlockReq(r)
			return err
		}
		s.abandoned++
		s.mu.Unlock()
		return &boundErr{stop}
	}
}

// Package stream makes an in-order GPU stream, a HIP stream or a CUDA
// stream, a syncstate.Timeline. Every op on the stream gets the next
// ticket; events are recorded only when a consumer on another stream, or
// the host, needs to know when a ticket is done, and come from a pool, so a
// run of ops on one stream records none. The runtime calls go through API,
// which the HIP and CUDA families each provide.
package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocsync/rocsync/internal/traceopt"
	"github.com/rocsync/rocsync/syncstate"
)

// API is the stream and event calls a Stream needs, for one device.
// Handles are the runtime's own (hipStream_t/CUstream, hipEvent_t/CUevent).
type API interface {
	EventCreate() (uintptr, error) // with timing disabled
	EventDestroy(ev uintptr) error
	EventRecord(ev, s uintptr) error
	// EventQuery reports whether the work before the event's newest
	// record is done.
	EventQuery(ev uintptr) (bool, error)
	EventSynchronize(ev uintptr) error
	StreamWaitEvent(s, ev uintptr) error
	// StreamQuery reports whether all work on s is done.
	StreamQuery(s uintptr) (bool, error)
	StreamSynchronize(s uintptr) error
	StreamDestroy(s uintptr) error
}

// EventPool recycles events.
type EventPool struct {
	api     API
	mu      sync.Mutex
	free    []uintptr
	all     []uintptr
	created atomic.Uint64
}

// NewEventPool makes a pool for one device.
func NewEventPool(api API) *EventPool { return &EventPool{api: api} }

// Created is how many events the pool has ever created.
func (p *EventPool) Created() uint64 { return p.created.Load() }

func (p *EventPool) get() (uintptr, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	e, err := p.api.EventCreate()
	if err != nil {
		return 0, err
	}
	p.created.Add(1)
	p.mu.Lock()
	p.all = append(p.all, e)
	p.mu.Unlock()
	return e, nil
}

func (p *EventPool) put(e uintptr) {
	p.mu.Lock()
	p.free = append(p.free, e)
	p.mu.Unlock()
}

// Destroy destroys every event the pool created.
func (p *EventPool) Destroy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for _, e := range p.all {
		if err := p.api.EventDestroy(e); err != nil && first == nil {
			first = err
		}
	}
	p.all, p.free = nil, nil
	return first
}

// maxMarks is how many recorded events a stream keeps before eventFor
// polls them.
const maxMarks = 16

// mark is an event recorded after the op with ticket.
type mark struct {
	ticket uint64
	ev     uintptr
	refs   int // users of the event; it is recycled only at 0 and when done
}

type deferred struct {
	ticket uint64
	fn     func()
	hook   Hook // run instead of fn when set
}

// Hook is work to run at a ticket, handed over as an interface so that a
// pooled object (a bridge signal) needs no closure, which would allocate
// on every crossing.
type Hook interface{ Run() }

func (d *deferred) run() {
	if d.hook != nil {
		d.hook.Run()
		return
	}
	d.fn()
}

// Stream is one stream with its ticket timeline.
type Stream struct {
	api    API
	s      uintptr
	name   string
	domain syncstate.Domain
	events *EventPool
	sinks  syncstate.Sinks
	// crossDomain lets the stream wait with events for streams of the
	// other domain too (DeviceBridge on CUDA, where both are streams).
	crossDomain bool
	timeout     time.Duration
	maxInFlight uint64
	// watch is Config.Watch; watchQueued (guarded by mu) is the newest
	// ticket a write to it was enqueued for.
	watch       *Watch
	watchQueued uint64
	onThrottle  func(syncstate.Fence) error
	place       uint64

	mu         sync.Mutex
	lastTicket atomic.Uint64
	completed  atomic.Uint64
	marks      []mark     // events in ticket order, oldest first
	after      []deferred // work to run once a ticket completes
	onFailure  []deferred // work to run if the stream fails before a ticket completes
	// health says which tickets failed: from the stream's own error on
	// (learned from the runtime at a query or wait), or behind a device
	// wait for a fence that failed.
	health syncstate.Health
	// hostDeps are the host functions the stream waits for on the device.
	hostDeps syncstate.HostDeps
	// reached is, once the stream's own error is known, the newest ticket
	// the runtime reported reached. A broken stream skips its commands,
	// its device waits included, so reaching a ticket says nothing about
	// the work that ticket was ordered after on other timelines: failed
	// tickets count as complete (and release the waiters of OnFailure)
	// only as far as health.Settled allows, which settle keeps checking.
	reached atomic.Uint64
	settler syncstate.Settler // runs settle; started under mu

	// Blocking calls handed to helpers (blockwait.go), under mu:
	// handleCalls are in a stream synchronize on the handle, which Close
	// then leaves to the last of them to destroy (destroyPending);
	// abandoned are calls whose waiter gave up.
	handleCalls    int
	destroyPending bool
	abandoned      int

	// bridge, when set, makes this stream wait on the device for a fence
	// of a timeline that is not a Stream (HSA→HIP under DeviceBridge).
	bridge Bridge
	// hostBridge, when set, makes this stream wait on the device for a
	// fence of a host lane (syncstate.DomainHost).
	hostBridge Bridge

	// timing, set once by EnableTiming, times every op (tracing).
	timing atomic.Pointer[timing]

	// evicted, once set, is why the runtime stream will never run again
	// (see Evict).
	evicted atomic.Pointer[error]
}

var _ syncstate.Timeline = (*Stream)(nil)

// ErrClosed is returned by Submit on a closed stream. Close drained it, so
// every fence of the stream is complete (or failed: see Failed).
var ErrClosed = errors.New("stream: closed")

// Config describes a Stream.
type Config struct {
	Name   string
	Events *EventPool
	Sinks  syncstate.Sinks
	// Domain is DomainLibrary for the stream vendor libraries run on
	// (the Unified policy runs kernels on it too); DomainKernel for a
	// stream that runs rocsync's kernels (CUDA).
	Domain syncstate.Domain
	// CrossDomain: waits for streams of the other domain use events too.
	CrossDomain bool
	// WaitTimeout bounds every host wait (0: none, and waits are the
	// runtime's blocking synchronize calls); with it, host waits poll.
	WaitTimeout time.Duration
	// MaxInFlight caps the ops in flight (0: no cap): past it, Submit
	// first waits on the host for older ops (a throttle wait).
	MaxInFlight int
	// OnThrottle, if set, is told of every throttle wait before it is
	// made; an error refuses it and Submit fails with it.
	OnThrottle func(f syncstate.Fence) error
	// Place identifies the device the stream runs on (syncstate.Placed;
	// 0: unknown).
	Place uint64
	// Watch, when set, is the stream's progress word: a whole-stream host
	// wait asks the device to write the stream's newest ticket to it
	// after the work before, then reads it, instead of querying the
	// runtime (see Watch).
	Watch *Watch
}

// New makes a Stream of the runtime stream s, which it then owns.
func New(api API, s uintptr, c Config) *Stream {
	return &Stream{api: api, s: s, name: c.Name, domain: c.Domain, events: c.Events, sinks: c.Sinks, crossDomain: c.CrossDomain,
		timeout: c.WaitTimeout, maxInFlight: uint64(max(c.MaxInFlight, 0)), onThrottle: c.OnThrottle, place: c.Place,
		watch: c.Watch}
}

// A Watch is a 64-bit word of host memory the device can write (mapped
// host memory) that tells the host how far a stream got: Write enqueues
// on the stream a device write of a ticket to the word, after the work
// before it and with a memory barrier, so once the host reads a value v
// from Word, every ticket up to v is complete and its results visible.
// Reading it costs nothing, where a query is a runtime call (about 2 µs
// for cuStreamQuery on an H100 host), and a spinning reader learns of
// completion as soon as the device writes: on an H100 a whole-stream
// wait through a watch returns 0.7 µs sooner than cuStreamSynchronize
// (cudadev's BenchmarkGPUWaitDetection). A word serves one stream for the
// stream's life.
type Watch struct {
	Word  *atomic.Uint64
	Write func(stream uintptr, ticket uint64) error
}

// Handle returns the runtime stream.
func (s *Stream) Handle() uintptr { return s.s }

// Domain implements syncstate.Timeline.
func (s *Stream) Domain() syncstate.Domain { return s.domain }

// Name implements syncstate.Timeline.
func (s *Stream) Name() string { return s.name }

// LastTicket is the ticket of the newest op.
func (s *Stream) LastTicket() uint64 { return s.lastTicket.Load() }

// A Bridge makes stream s wait on the device for fence f of a timeline
// the stream cannot wait for with an event. It puts its wait on s with
// SubmitWait and returns that op's ticket, or 0 when f needs no wait.
type Bridge func(s *Stream, f syncstate.Fence) (uint64, error)

// SetBridge lets the stream wait on the device for fences of timelines
// that are not streams.
func (s *Stream) SetBridge(bridge Bridge) { s.bridge = bridge }

// SetHostBridge lets the stream wait on the device for fences of host
// lanes (a memory word the lane writes after the function).
func (s *Stream) SetHostBridge(bridge Bridge) { s.hostBridge = bridge }

// SubmitWait is Submit for an op that waits on the device for fence f (a
// Bridge's wait). f goes on the stream's health record with the op's own
// ticket, under the lock that gives it: another goroutine may submit to
// the stream meanwhile (a bridge's write for an HSA queue), and a record
// naming that op, which is before the wait, would be pruned once it
// completed, while the wait still waited (see WaitDevice).
func (s *Stream) SubmitWait(f syncstate.Fence, enqueue func(stream uintptr) error) (uint64, error) {
	return s.Submit(func(h uintptr) error {
		if err := enqueue(h); err != nil {
			return err
		}
		s.health.AddUpstream(s.name, f, s.lastTicket.Load()+1)
		return nil
	})
}

// Submit runs enqueue (which must put exactly one op on the stream) under
// the stream's lock, and returns the op's ticket.
func (s *Stream) Submit(enqueue func(stream uintptr) error) (uint64, error) {
	if err := s.Throttle(); err != nil {
		return 0, err
	}
	h, err := s.Hold()
	if err != nil {
		return 0, err
	}
	released := false
	defer func() {
		if !released { // enqueue panicked: the stream must not stay held
			s.Release(h, false)
		}
	}()
	err = enqueue(h.s)
	released = true
	if err != nil {
		s.Release(h, false)
		return 0, err
	}
	return s.Release(h, true), nil
}

// Held is a stream taken by Hold for one op; Release ends the hold.
type Held struct {
	s     uintptr // the runtime stream
	tm    *timing
	start uintptr
}

// Handle is the runtime stream the held op goes on.
func (h Held) Handle() uintptr { return h.s }

// Holding keeps a driver's hold of a stream between its Hold and its
// Release, which come in separate calls (driver.LibraryHolder).
type Holding struct{ held Held }

// Hold is s.Hold, kept, returning the runtime stream.
func (h *Holding) Hold(s *Stream) (uintptr, error) {
	x, err := s.Hold()
	if err != nil {
		return 0, err
	}
	h.held = x
	return x.Handle(), nil
}

// Release is s.Release of the kept hold.
func (h *Holding) Release(s *Stream, enqueued bool) uint64 {
	x := h.held
	h.held = Held{}
	return s.Release(x, enqueued)
}

// Hold takes the stream for one op whose enqueue the caller makes, and
// which may reach the runtime stream only after the enqueuing call
// returned: a collective inside an NCCL group is launched at
// ncclGroupEnd ("stream operations like ncclAllReduce can return without
// having enqueued the operation on the stream", NCCL's Group Calls). Until
// Release, the stream takes no other work and records no event (marks
// for consumers, the throttle's, a watch's write), so no fence of the
// stream can be recorded ahead of the held op: every other caller waits
// for the stream's lock. Hold makes the checks of Submit and waits for
// nothing (a caller holding several streams must not wait while it holds
// them): Throttle first; on error nothing is held.
func (s *Stream) Hold() (Held, error) {
	s.mu.Lock()
	if err := s.health.Err(); err != nil {
		s.mu.Unlock()
		// Like a broken HSA queue, a failed stream takes no more work:
		// it would run behind work that never completed.
		return Held{}, err
	}
	if s.s == 0 {
		s.mu.Unlock()
		return Held{}, fmt.Errorf("%w: %s", ErrClosed, s.name)
	}
	h := Held{s: s.s}
	if traceopt.Enabled {
		h.tm = s.timing.Load()
	}
	if h.tm != nil {
		h.start = s.startTimingLocked(h.tm)
	}
	return h, nil
}

// Throttle is the back-pressure of MaxInFlight that precedes an op: past
// the cap, a host wait for the older half of what is in flight (a
// periodic mark covers it), counted as a throttle wait.
func (s *Stream) Throttle() error {
	// What is known complete only grows, so the cap can bite only when the
	// last count says so: only then ask Completed, which may query the
	// runtime (an event query costs about as much as a launch).
	if s.maxInFlight > 0 && s.lastTicket.Load()-s.completed.Load() >= s.maxInFlight &&
		s.lastTicket.Load()-s.Completed() >= s.maxInFlight {
		// Back-pressure: wait for the older half of what is in flight
		// (a periodic mark covers it), counted as a throttle wait.
		t := s.lastTicket.Load() - s.maxInFlight/2
		if s.onThrottle != nil {
			if err := s.onThrottle(syncstate.Fence{TL: s, Ticket: t}); err != nil {
				return err
			}
		}
		s.sinks.HostWait(syncstate.ReasonThrottle)
		return s.WaitHost(t)
	}
	return nil
}

// Release ends the hold h. enqueued says the op is on the stream (or may
// be: its work may still reach the stream, as after a failed
// ncclGroupEnd): it then gets the next ticket, returned, and everything
// recorded on the stream from now on follows it. Otherwise the stream is
// as before the hold and the ticket is 0.
func (s *Stream) Release(h Held, enqueued bool) uint64 {
	defer s.mu.Unlock()
	if !enqueued {
		if h.tm != nil {
			s.stopTimingLocked(h.tm, h.start, 0, false)
		}
		return 0
	}
	t := s.lastTicket.Load() + 1
	s.lastTicket.Store(t)
	if h.tm != nil {
		s.stopTimingLocked(h.tm, h.start, t, true)
	}
	if s.maxInFlight >= 4 && t%(s.maxInFlight/4) == 0 {
		s.markLocked(t)
	}
	return t
}

// markLocked records an event after ticket t (the newest), which nobody
// holds yet, so that the throttle can wait for part of what is in flight
// and Completed can learn progress without a host wait.
func (s *Stream) markLocked(t uint64) {
	if len(s.marks) >= maxMarks {
		s.recycleLocked(true)
		if len(s.marks) >= maxMarks {
			return
		}
	}
	ev, err := s.events.get()
	if err != nil {
		return
	}
	if err := s.api.EventRecord(ev, s.s); err != nil {
		s.events.put(ev)
		return
	}
	s.sinks.EventRecorded()
	s.marks = append(s.marks, mark{ticket: t, ev: ev})
}

// AfterComplete runs fn once ticket t is known complete (at a later poll,
// wait or Close), for resources the device may still read until then.
func (s *Stream) AfterComplete(t uint64, fn func()) {
	s.mu.Lock()
	s.after = append(s.after, deferred{ticket: t, fn: fn})
	s.mu.Unlock()
}

// AfterCompleteHook is AfterComplete with a Hook.
func (s *Stream) AfterCompleteHook(t uint64, h Hook) {
	s.mu.Lock()
	s.after = append(s.after, deferred{ticket: t, hook: h})
	s.mu.Unlock()
}

// OnFailure runs fn if the stream is found to fail before ticket t is
// known complete: once the failed ticket t counts as complete (see
// reached). It is dropped once t completes normally. The bridge uses it to
// complete the signals that waiters on other queues would otherwise wait
// for forever.
func (s *Stream) OnFailure(t uint64, fn func()) { s.onFailure1(deferred{ticket: t, fn: fn}) }

// OnFailureHook is OnFailure with a Hook.
func (s *Stream) OnFailureHook(t uint64, h Hook) { s.onFailure1(deferred{ticket: t, hook: h}) }

func (s *Stream) onFailure1(d deferred) {
	s.mu.Lock()
	s.onFailure = append(s.onFailure, d)
	if s.health.Failure() != nil {
		s.recycleLocked(false)
	}
	s.mu.Unlock()
}

// Evict records that the runtime stream will never run again: after a GPU
// VM fault KFD evicts every user queue of the process on that GPU, HIP's
// included (amdgpu kfd_int_process_v9.c, event_interrupt_wq_v9 calls
// kfd_dqm_evict_pasid), nothing restores them, and HIP is not told. Its
// pending commands never complete, so a synchronize on the stream or an
// event recorded on it never returns, and neither does hipStreamDestroy
// (clr rocclr/platform/commandqueue.cpp, HostQueue::terminate, awaits the
// last command). Every ticket not known complete fails with cause at
// once, and counts as complete (nothing of it will run); waits return
// the failure without asking the runtime; the stream takes no more work;
// its events are never reused; and Close leaks the runtime stream
// instead of destroying it (see Evicted). The first cause is kept.
//
// Evict takes no lock the stream holds across runtime calls: it runs on
// ROCr's event thread (a system event handler), which a runtime call under
// the stream's lock (hipStreamDestroy in Close) may be waiting for. The
// failure is recorded at once; a goroutine counts the tickets complete and
// recycles under the lock.
func (s *Stream) Evict(cause error) {
	err := fmt.Errorf("stream: %s evicted: %w", s.name, cause)
	if !s.evicted.CompareAndSwap(nil, &err) {
		return
	}
	s.health.Fail(s.completed.Load()+1, err)
	go func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		last := s.lastTicket.Load()
		if last > s.reached.Load() {
			s.reached.Store(last)
		}
		if last > s.completed.Load() {
			s.completed.Store(last)
		}
		// The marks' events are recorded on the stream and never
		// reached: they leave the pool (recycleLocked drops them).
		s.recycleLocked(false)
	}()
}

// Evicted returns the error Evict recorded, or nil. A stream with one was
// not destroyed by Close: its runtime stream is leaked, for hipStreamDestroy
// on it would never return.
func (s *Stream) Evicted() error {
	if p := s.evicted.Load(); p != nil {
		return *p
	}
	return nil
}

// Health implements syncstate.HealthReporter.
func (s *Stream) Health() *syncstate.Health { return &s.health }

// Failed implements syncstate.Timeline.
func (s *Stream) Failed(t uint64) error { return s.health.Failed(t) }

// Err returns the error that broke the stream, if any.
func (s *Stream) Err() error { return s.health.Err() }

// failLocked records a runtime error of the stream: every op not known
// complete failed, and the runtime has reached ticket upTo. Failed tickets
// count as complete as far as the device waits they sit behind allow
// (settleLocked), and a goroutine keeps settling the rest.
func (s *Stream) failLocked(err error, upTo uint64) {
	s.health.Fail(s.completed.Load()+1, fmt.Errorf("stream: %s: %w", s.name, err))
	if upTo > s.reached.Load() {
		s.reached.Store(upTo)
	}
	s.settleLocked()
	if !s.settler.Started() {
		s.settler.Start(s.settle)
	}
}

// settleLocked counts the broken stream's failed tickets complete up to
// what the runtime reached and the device waits behind them allow, and
// runs the failure hooks now due.
func (s *Stream) settleLocked() {
	if c := s.health.Settled(s.reached.Load()); c > s.completed.Load() {
		s.completed.Store(c)
	}
	s.recycleLocked(false)
}

// settle runs while a broken stream has work not yet counted complete:
// it asks the runtime how far the stream got, and waits for the producers
// of the device waits behind that work (asking them too, as a host waiter
// would), until everything submitted is settled or Close stops it.
func (s *Stream) settle() {
	var pause syncstate.Backoff
	for !s.settler.Stopped() {
		s.mu.Lock()
		last := s.lastTicket.Load()
		if s.reached.Load() < last && s.s != 0 {
			if ok, err := s.api.StreamQuery(s.s); err != nil {
				// The runtime's own error: the tickets from the first
				// not known complete on fail with it (the earliest
				// failure is kept), whatever made this stream settle (a
				// producer's failure, seen first, may fail only later
				// tickets).
				s.failLocked(err, last)
			} else if ok {
				s.reached.Store(last)
			}
		}
		s.settleLocked()
		finished := s.completed.Load() >= last
		s.mu.Unlock()
		if finished {
			return
		}
		s.health.Probe()
		pause.Sleep()
	}
}

// Completed implements syncstate.Timeline. It never blocks (on contention
// it returns what it knows) and asks the runtime at most one question:
// when an event is recorded after the newest op, whether that event is
// reached, which proves the whole stream complete. Otherwise it asks
// nothing: syncstate asks about the fences it is about to order after,
// usually the producer's newest ops, and a query that cannot prove those
// complete would cost as much as the device wait it might save.
func (s *Stream) Completed() uint64 {
	if traceopt.Enabled {
		if tm := s.timing.Load(); tm != nil {
			s.pollTiming(tm)
		}
	}
	c := s.completed.Load()
	last := s.lastTicket.Load()
	if c == last || !s.mu.TryLock() {
		return c
	}
	if s.watch != nil {
		if w := s.watch.Word.Load(); w > c {
			// The device wrote w after every ticket up to it.
			s.completeLocked(w)
		}
	}
	if !s.settler.Started() && s.s != 0 && s.health.Failure() != nil {
		// The stream failed without the runtime having said so (a
		// producer it waited for on the device failed): nothing else
		// may ever ask the runtime how far it got, and consumers behind
		// it wait for its failed tickets to settle.
		s.settler.Start(s.settle)
	}
	if n := len(s.marks); n > 0 {
		if m := s.marks[n-1]; m.ticket == last && m.ticket > s.completed.Load() {
			if ok, err := s.api.EventQuery(m.ev); err == nil && ok {
				s.completeLocked(m.ticket)
			} else if err != nil {
				s.failLocked(err, m.ticket)
				s.recycleLocked(false)
			}
		}
	}
	s.mu.Unlock()
	return s.completed.Load()
}

// recycleLocked learns which marks are complete, oldest first (asking the
// runtime only when query is set), returns the events nobody holds to the
// pool, and runs the deferred work that is now due.
func (s *Stream) recycleLocked(query bool) {
	// A failed query is acted on after the walk: failLocked settles the
	// stream and recycles the marks itself, which must not happen under
	// this walk (it would put an event twice and cut past the marks).
	var queryErr error
	var queryTicket uint64
	k := 0
	for ; k < len(s.marks); k++ {
		m := &s.marks[k]
		if m.ticket > s.completed.Load() {
			if !query {
				break
			}
			ok, err := s.api.EventQuery(m.ev)
			if err != nil {
				queryErr, queryTicket = err, m.ticket
			}
			if err != nil || !ok {
				break
			}
			s.completed.Store(m.ticket)
		}
		if m.refs > 0 {
			break
		}
		if s.evicted.Load() == nil {
			s.events.put(m.ev)
		}
	}
	if k > 0 {
		n := copy(s.marks, s.marks[k:])
		clear(s.marks[n:])
		s.marks = s.marks[:n]
	}
	if len(s.onFailure) > 0 {
		// Past c a hook's ticket is complete: it ran, or it failed and
		// settled, when the hook must release its waiters.
		c := s.completed.Load()
		failed := s.health.Failure() != nil
		kept := s.onFailure[:0]
		for _, d := range s.onFailure {
			switch {
			case d.ticket > c:
				kept = append(kept, d)
			case failed:
				d.run()
			}
		}
		clear(s.onFailure[len(kept):])
		s.onFailure = kept
	}
	s.health.Prune(s.completed.Load())
	if len(s.after) > 0 {
		c := s.completed.Load()
		kept := s.after[:0]
		for _, d := range s.after {
			if d.ticket <= c {
				d.run()
				continue
			}
			kept = append(kept, d)
		}
		clear(s.after[len(kept):])
		s.after = kept
	}
	if queryErr != nil {
		s.failLocked(queryErr, queryTicket)
	}
}

// Poll asks the stream itself whether all its work is done. It costs a
// runtime call, so the ordering hot path does not use it; freeing does.
func (s *Stream) Poll() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.lastTicket.Load()
	if s.completed.Load() < last && s.s != 0 {
		if ok, err := s.api.StreamQuery(s.s); err == nil && ok {
			s.completed.Store(last)
		} else if err != nil {
			s.failLocked(err, last)
		}
	}
	s.recycleLocked(true)
	return s.completed.Load()
}

// eventFor returns an event that completes no earlier than ticket t, with
// a reference taken, or ok=false when t is already complete. It reuses a
// recorded event at or after t, and otherwise records one now, which
// covers every op submitted so far, t included.
func (s *Stream) eventFor(t uint64) (ev uintptr, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t <= s.completed.Load() {
		return 0, false, nil
	}
	for i := range s.marks {
		if s.marks[i].ticket >= t {
			s.marks[i].refs++
			return s.marks[i].ev, true, nil
		}
	}
	if n := len(s.marks); n > 0 && s.marks[n-1].refs == 0 {
		// Nobody holds the newest event, so record it again, after t:
		// the waits already enqueued on it captured its earlier record,
		// and no query is needed to recycle it. What it said about its
		// old ticket is given up.
		m := &s.marks[n-1]
		if err := s.api.EventRecord(m.ev, s.s); err != nil {
			return 0, false, err
		}
		s.sinks.EventRecorded()
		m.ticket, m.refs = s.lastTicket.Load(), 1
		return m.ev, true, nil
	}
	if len(s.marks) >= maxMarks {
		// Many waits in flight at once: learn what is done so the marks
		// (and the pool) stay small.
		s.recycleLocked(true)
	}
	ev, err = s.events.get()
	if err != nil {
		return 0, false, err
	}
	if err := s.api.EventRecord(ev, s.s); err != nil {
		s.events.put(ev)
		return 0, false, err
	}
	s.sinks.EventRecorded()
	s.marks = append(s.marks, mark{ticket: s.lastTicket.Load(), ev: ev, refs: 1})
	return ev, true, nil
}

// releaseEvent drops a reference taken by eventFor. It asks the runtime
// nothing: marks already known complete are recycled now, the others at
// the next Completed, Poll or host wait.
func (s *Stream) releaseEvent(ev uintptr) {
	s.mu.Lock()
	s.releaseEventLocked(ev)
	s.mu.Unlock()
}

func (s *Stream) releaseEventLocked(ev uintptr) {
	for i := range s.marks {
		if s.marks[i].ev == ev {
			s.marks[i].refs--
			break
		}
	}
	s.recycleLocked(false)
}

// WaitHost implements syncstate.Timeline. Waiting for the newest op when
// no recorded event covers it (a read-back, a boundary crossing,
// WaitAlways, Drain) is one stream synchronize; otherwise it synchronizes
// an event recorded (or reused) for ticket t, which does not also wait for
// the ops submitted after t.
func (s *Stream) WaitHost(t uint64) error { return s.WaitHostContext(context.Background(), t) }

// poll waits for query to report done, until b ends the wait or the
// stream is found to fail. It is the fallback of bounded waits once a
// stream has maxAbandoned blocking calls in flight (blockwait.go): first
// spinning for spinFor (what a spinning cuEventSynchronize does, and most
// crossings' waits end there), then with a pause that grows to maxPause,
// so that a long wait neither holds a core nor overshoots by much.
func (s *Stream) poll(b *syncstate.Bound, t uint64, h, ev uintptr) error {
	const spinFor, maxPause = 50 * time.Microsecond, 100 * time.Microsecond
	start := b.Start
	if start.IsZero() {
		start = time.Now()
	}
	pause := 10 * time.Microsecond
	for {
		var ok bool
		var err error
		if ev != 0 {
			ok, err = s.api.EventQuery(ev)
		} else {
			ok, err = s.api.StreamQuery(h)
		}
		if err != nil || ok {
			return err
		}
		if err := b.Check(syncstate.Fence{TL: s, Ticket: t}); err != nil {
			return &boundErr{err}
		}
		s.health.Probe()
		if err := s.health.Failed(t); err != nil {
			return &boundErr{err}
		}
		if time.Since(start) < spinFor {
			continue
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}

// boundErr ends a wait without saying anything about the stream itself.
type boundErr struct{ err error }

func (e *boundErr) Error() string { return e.err.Error() }
func (e *boundErr) Unwrap() error { return e.err }

// WaitHostContext implements syncstate.ContextWaiter: WaitHost that also
// ends when ctx is done (nil: never), leaving the work running.
func (s *Stream) WaitHostContext(ctx context.Context, t uint64) error {
	var bound syncstate.Bound
	var b *syncstate.Bound
	if syncstate.Cancellable(ctx) || s.timeout > 0 {
		bound = syncstate.Bound{Ctx: ctx, Timeout: s.timeout, Start: time.Now()}
		b = &bound
	}
	return s.waitBound(b, t)
}

// WaitHostBlocking is WaitHost as one blocking runtime call (an event or
// stream synchronize), whatever the stream's timeout: for a caller that
// bounds the wait itself on another goroutine, as copies do, so that a
// copy's completion is seen at once rather than at the next poll.
func (s *Stream) WaitHostBlocking(t uint64) error { return s.waitBound(nil, t) }

// WaitTimeout is the bound of the stream's host waits (0: none).
func (s *Stream) WaitTimeout() time.Duration { return s.timeout }

// PinTicket is Pin without a closure: it returns the event a later
// WaitHost(t) waits for (0: t is complete), held until UnpinTicket.
func (s *Stream) PinTicket(t uint64) (uintptr, error) {
	ev, ok, err := s.eventFor(t)
	if err != nil || !ok {
		return 0, err
	}
	return ev, nil
}

// UnpinTicket releases what PinTicket returned (0 is ignored).
func (s *Stream) UnpinTicket(ev uintptr) {
	if ev != 0 {
		s.releaseEvent(ev)
	}
}

// blockingCall returns a request for a bounded wait's blocking call, or
// nil when the stream has too many abandoned calls in flight (the wait
// then polls). A whole-stream call is counted on the handle at once,
// under mu, so that Close cannot destroy it under the call.
func (s *Stream) blockingCall(whole bool, last uint64) *blockReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abandoned >= maxAbandoned || (whole && s.s == 0) {
		return nil
	}
	r := getBlockReq()
	r.s, r.ev, r.h, r.last = s, 0, 0, 0
	if whole {
		s.handleCalls++
		r.h, r.last = s.s, last
	}
	return r
}

// waitBound is a host wait for t under b: with b, a blocking call on a
// helper goroutine (blockwait.go), or polling when the stream has too many
// abandoned calls; without, the blocking call itself.
func (s *Stream) waitBound(b *syncstate.Bound, t uint64) error {
	if s.evicted.Load() != nil {
		return s.health.Failed(t) // an evicted stream is never waited for
	}
	if last, ok := s.wholeStream(t); ok {
		// Ops another goroutine submits meanwhile may be waited for too,
		// which is harmless; only tickets up to last are claimed done.
		var err error
		var spun bool
		if b == nil {
			err = s.api.StreamSynchronize(s.s)
		} else if spun, err = s.spinWhole(b, last); spun {
			// Done (or failed) within the spin: no helper needed.
		} else if r := s.blockingCall(true, last); r != nil {
			if be, ok := s.waitBlocking(b, t, r).(*boundErr); ok {
				return be.err
			}
			// The helper recorded the outcome.
			return s.health.Failed(t)
		} else {
			err = s.poll(b, t, s.s, 0)
			if be, ok := err.(*boundErr); ok {
				return be.err
			}
		}
		s.mu.Lock()
		if err != nil {
			s.failLocked(err, last)
			s.recycleLocked(false)
		} else {
			s.completeLocked(last)
		}
		s.mu.Unlock()
		return s.health.Failed(t)
	}
	ev, ok, err := s.eventFor(t)
	if err != nil {
		return err
	}
	if !ok {
		return s.health.Failed(t)
	}
	var spun bool
	if b == nil {
		err = s.api.EventSynchronize(ev)
	} else if spun, err = s.spin(b, 0, ev); spun {
		// Done (or failed) within the spin: no helper needed.
	} else if r := s.blockingCall(false, 0); r != nil {
		r.ev = ev
		if be, ok := s.waitBlocking(b, t, r).(*boundErr); ok {
			return be.err
		}
		// The helper recorded the outcome and released the event.
		return s.health.Failed(t)
	} else {
		err = s.poll(b, t, 0, ev)
		if be, ok := err.(*boundErr); ok {
			s.releaseEvent(ev)
			return be.err
		}
	}
	s.mu.Lock()
	for _, m := range s.marks {
		if m.ev == ev && m.ticket > s.completed.Load() {
			if err != nil {
				s.failLocked(err, m.ticket)
				break
			}
			s.completed.Store(m.ticket)
		}
	}
	s.mu.Unlock()
	s.releaseEvent(ev)
	return s.health.Failed(t)
}

// Pin implements syncstate.Pinner: it records (or reuses) an event after
// ticket t now and holds it, so that WaitHost(t) waits for that event and
// not for work submitted after this call.
func (s *Stream) Pin(t uint64) (unpin func(), err error) {
	ev, ok, err := s.eventFor(t)
	if err != nil || !ok {
		return func() {}, err
	}
	return func() { s.releaseEvent(ev) }, nil
}

var _ syncstate.Pinner = (*Stream)(nil)

// completeLocked records that every ticket up to t (at most the newest)
// is complete, and recycles what that frees.
func (s *Stream) completeLocked(t uint64) {
	t = min(t, s.lastTicket.Load())
	if t > s.completed.Load() {
		s.completed.Store(t)
	}
	s.recycleLocked(false)
}

// spinWhole is spin for a whole-stream wait up to last: on the watch when
// the stream has one, else on stream queries.
func (s *Stream) spinWhole(b *syncstate.Bound, last uint64) (done bool, err error) {
	if s.watch == nil || s.health.Err() != nil {
		return s.spin(b, s.s, 0)
	}
	word := s.watch.Word
	if word.Load() >= last {
		return true, nil
	}
	s.mu.Lock()
	if newest := s.lastTicket.Load(); s.watchQueued < last && s.s != 0 {
		// The newest ticket, not last: ops submitted meanwhile are before
		// the write anyway, and the word then tells of them too.
		if err = s.watch.Write(s.s, newest); err == nil {
			s.watchQueued = newest
		}
	}
	s.mu.Unlock()
	if err != nil {
		return true, err
	}
	start := b.Start
	if start.IsZero() {
		start = time.Now()
	}
	for i := 0; ; i++ {
		if word.Load() >= last {
			return true, nil
		}
		// A failed stream never writes the word: after spinFor the wait
		// goes to a blocking runtime call, which reports the failure.
		if i%256 == 255 && spinEnded(b, start) {
			return false, nil
		}
	}
}

// wholeStream reports whether waiting for t means waiting for the whole
// stream: t is not known complete, it is the newest ticket, and no
// recorded event covers it (one would be recorded only to be waited for).
func (s *Stream) wholeStream(t uint64) (last uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last = s.lastTicket.Load()
	if t <= s.completed.Load() || t != last || s.s == 0 {
		return 0, false
	}
	for _, m := range s.marks {
		if m.ticket >= t {
			return 0, false
		}
	}
	return last, true
}

// CanWaitDevice implements syncstate.Timeline: a stream waits for another
// stream of its domain with an event; for the other domain only with
// CrossDomain or a bridge, so the policies keep the boundary host wait
// they are defined by.
func (s *Stream) CanWaitDevice(d syncstate.Domain) bool {
	if d == syncstate.DomainHost {
		return s.hostBridge != nil
	}
	return d == s.domain || s.crossDomain || s.bridge != nil
}

// Place implements syncstate.Placed.
func (s *Stream) Place() uint64 { return s.place }

// HostDeps implements syncstate.HostDepender: the host functions the
// stream waits for on the device, directly or through what it waits for.
func (s *Stream) HostDeps() *syncstate.HostDeps { return &s.hostDeps }

// CanWaitPeer implements syncstate.Placed: hipStreamWaitEvent and
// cuStreamWaitEvent accept an event of another device (the event is
// recorded with its own device's API on its own stream), so a stream waits
// for another device's stream as for its own device's.
func (s *Stream) CanWaitPeer(d syncstate.Domain) bool { return s.CanWaitDevice(d) }

// WaitDevice implements syncstate.Timeline with the runtime's stream wait
// event, which captures the event's newest record when it is enqueued: the
// event may be recycled as soon as the call returns and the producer has
// passed it.
//
// Each fence goes on the stream's health record with the first ticket
// behind its wait, taken under the lock that enqueues the wait (a bridge's
// wait is an op of its own: SubmitWait). The ticket the stream would give
// next when WaitDevice starts is not it: another goroutine may submit
// meanwhile, and a record naming that op would fail it with the producer,
// and be pruned once it completed while the wait still waited; a host
// waiting behind the wait then no longer asks the producer up the chain
// whether it failed (Probe), and a failure only a query reveals leaves the
// wait waiting for ever.
func (s *Stream) WaitDevice(fences []syncstate.Fence) error {
	for _, f := range fences {
		s.hostDeps.Note(f)
		waited, err := s.waitDevice(f)
		if err != nil {
			return err
		}
		if !waited {
			// Recorded though nothing waits: a fence that has completed
			// since the consumer looked at it may have failed, and the
			// work behind the wait then runs on what it left.
			s.health.AddUpstream(s.name, f, s.lastTicket.Load()+1)
		}
	}
	return nil
}

// waitDevice makes the stream wait on the device for f, and says whether
// it enqueued a wait (which it recorded).
func (s *Stream) waitDevice(f syncstate.Fence) (bool, error) {
	if f.TL.Domain() == syncstate.DomainHost {
		if s.hostBridge == nil {
			return false, fmt.Errorf("stream: %s cannot wait on the device for the host lane %s", s.name, f.TL.Name())
		}
		t, err := s.hostBridge(s, f)
		return t != 0, err
	}
	p, ok := f.TL.(*Stream)
	if !ok || (p.domain != s.domain && !s.crossDomain) {
		if s.bridge == nil {
			return false, fmt.Errorf("stream: %s (%s) cannot wait on the device for %s (%s)", s.name, s.domain, f.TL.Name(), f.TL.Domain())
		}
		t, err := s.bridge(s, f)
		return t != 0, err
	}
	ev, ok, err := p.eventFor(f.Ticket)
	if err != nil || !ok {
		return false, err
	}
	s.mu.Lock()
	// The wait is no op of its own: the next op is the first behind it.
	s.health.AddUpstream(s.name, f, s.lastTicket.Load()+1)
	err = s.api.StreamWaitEvent(s.s, ev)
	s.mu.Unlock()
	p.releaseEvent(ev)
	return true, err
}

// Drain waits on the host for everything submitted so far.
func (s *Stream) Drain() error { return s.WaitHost(s.lastTicket.Load()) }

// Close drains the stream and destroys it; its events go back to the pool.
// A broken stream first settles its failed work (see reached), waiting
// for the producers it sits behind up to the wait timeout, and past it
// counts it complete at once.
func (s *Stream) Close() error {
	err := s.Drain()
	s.settler.Finish(s.timeout)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failLocked(err, s.lastTicket.Load())
	}
	if e := s.destroyTimingLocked(); e != nil && err == nil {
		err = e // the drain reached every timing event
	}
	if s.s != 0 && s.evicted.Load() != nil {
		// Leaked: destroying an evicted stream never returns (Evict).
		s.destroyPending = false
		s.s = 0
	}
	if s.s != 0 {
		// hipStreamDestroy lets pending work finish, so after it every
		// ticket is complete. A helper still in a synchronize of the
		// stream (a wait that timed out) destroys it when that returns.
		if s.handleCalls > 0 {
			s.destroyPending = true
		} else if e := s.api.StreamDestroy(s.s); e != nil && err == nil {
			err = e
		}
		s.s = 0
	}
	s.completed.Store(s.lastTicket.Load())
	s.recycleLocked(false)
	held := s.marks[:0]
	for _, m := range s.marks {
		if m.refs > 0 {
			// A referenced event (a helper may be synchronizing it)
			// stays marked and goes back to the pool with its last
			// reference (releaseEvent).
			held = append(held, m)
			continue
		}
		if s.evicted.Load() == nil {
			s.events.put(m.ev)
		}
	}
	clear(s.marks[len(held):])
	s.marks = held
	return err
}

// Package stream makes a HIP stream a syncstate.Timeline. Every op on the
// stream gets the next ticket; events are recorded only when a consumer on
// another stream, or the host, needs to know when a ticket is done, and
// come from a pool, so a run of ops on one stream records none.
package stream

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/syncstate"
)

// EventPool recycles events created with hipEventDisableTiming.
type EventPool struct {
	rt      hip.Runtime
	device  int
	mu      sync.Mutex
	free    []hip.Event
	all     []hip.Event
	created atomic.Uint64
}

// NewEventPool makes a pool for one device.
func NewEventPool(rt hip.Runtime, device int) *EventPool {
	return &EventPool{rt: rt, device: device}
}

// Created is how many events the pool has ever created.
func (p *EventPool) Created() uint64 { return p.created.Load() }

func (p *EventPool) get() (hip.Event, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	e, err := p.rt.EventCreate(p.device, hip.EventDisableTiming)
	if err != nil {
		return 0, err
	}
	p.created.Add(1)
	p.mu.Lock()
	p.all = append(p.all, e)
	p.mu.Unlock()
	return e, nil
}

func (p *EventPool) put(e hip.Event) {
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
		if err := p.rt.EventDestroy(e); err != nil && first == nil {
			first = err
		}
	}
	p.all, p.free = nil, nil
	return first
}

// recorded is an event recorded after the op with ticket.
type recorded struct {
	ticket uint64
	ev     hip.Event
	refs   int // waiters using it; it is recycled only at 0 and when done
}

// Stream is one HIP stream with its ticket timeline.
type Stream struct {
	rt     hip.Runtime
	s      hip.Stream
	device int
	name   string
	events *EventPool
	sinks  syncstate.Sinks
	domain syncstate.Domain

	mu         sync.Mutex
	lastTicket atomic.Uint64
	completed  atomic.Uint64
	marks      []recorded // events in ticket order, oldest first
	after      []deferred // work to run once a ticket completes

	// bridge, when set, makes this stream wait on the device for a fence
	// of another domain (the DeviceBridge policy).
	bridge func(s *Stream, f syncstate.Fence) error
}

type deferred struct {
	ticket uint64
	fn     func()
}

// SetBridge lets the stream wait on the device for fences of other domains.
func (s *Stream) SetBridge(bridge func(s *Stream, f syncstate.Fence) error) { s.bridge = bridge }

// AfterComplete runs fn once ticket t is known complete (at a later poll,
// wait or Close), for resources the device may still read until then.
func (s *Stream) AfterComplete(t uint64, fn func()) {
	s.mu.Lock()
	s.after = append(s.after, deferred{t, fn})
	s.mu.Unlock()
}

// runAfterLocked runs the deferred work whose ticket is complete.
func (s *Stream) runAfterLocked() {
	c := s.completed.Load()
	kept := s.after[:0]
	for _, d := range s.after {
		if d.ticket <= c {
			d.fn()
			continue
		}
		kept = append(kept, d)
	}
	clear(s.after[len(kept):])
	s.after = kept
}

// Config describes a Stream.
type Config struct {
	Name   string
	Device int
	Events *EventPool
	Sinks  syncstate.Sinks
	// Domain is DomainLibrary for the stream vendor libraries run on; the
	// Unified policy also runs kernels on it.
	Domain syncstate.Domain
}

// New creates a non-blocking HIP stream.
func New(rt hip.Runtime, c Config) (*Stream, error) {
	s, err := rt.StreamCreate(c.Device, hip.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	return &Stream{rt: rt, s: s, device: c.Device, name: c.Name, events: c.Events, sinks: c.Sinks, domain: c.Domain}, nil
}

// HIPStream returns the underlying stream.
func (s *Stream) HIPStream() hip.Stream { return s.s }

// Domain implements syncstate.Timeline.
func (s *Stream) Domain() syncstate.Domain { return s.domain }

// Name implements syncstate.Timeline.
func (s *Stream) Name() string { return s.name }

// LastTicket is the ticket of the newest op.
func (s *Stream) LastTicket() uint64 { return s.lastTicket.Load() }

// Submit runs enqueue (which must put exactly one op on the stream) under
// the stream's lock, and returns the op's ticket.
func (s *Stream) Submit(enqueue func(hip.Stream) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := enqueue(s.s); err != nil {
		return 0, err
	}
	t := s.lastTicket.Load() + 1
	s.lastTicket.Store(t)
	return t, nil
}

// Completed implements syncstate.Timeline by querying the oldest recorded
// events; it never blocks.
func (s *Stream) Completed() uint64 {
	c := s.completed.Load()
	if c == s.lastTicket.Load() || !s.mu.TryLock() {
		return c
	}
	s.pollLocked()
	s.mu.Unlock()
	return s.completed.Load()
}

func (s *Stream) pollLocked() {
	k := 0
	for ; k < len(s.marks); k++ {
		m := &s.marks[k]
		if m.ticket > s.completed.Load() {
			if s.rt.EventQuery(m.ev) != nil {
				break
			}
			s.completed.Store(m.ticket)
		}
		if m.refs > 0 {
			break
		}
		s.events.put(m.ev)
	}
	if k > 0 {
		n := copy(s.marks, s.marks[k:])
		clear(s.marks[n:])
		s.marks = s.marks[:n]
	}
	if len(s.after) > 0 {
		s.runAfterLocked()
	}
}

// Poll asks the stream itself whether all its work is done. It costs a
// runtime call, so the hot path does not use it; freeing does.
func (s *Stream) Poll() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.lastTicket.Load()
	if s.completed.Load() < last && s.rt.StreamQuery(s.s) == nil {
		s.completed.Store(last)
	}
	s.pollLocked()
	return s.completed.Load()
}

// eventFor returns an event that completes no earlier than ticket t, with a
// reference taken, or ok=false when t is already complete. It reuses a
// recorded event at or after t, and otherwise records one now. Recording
// now covers every op submitted so far, which includes t.
func (s *Stream) eventFor(t uint64) (ev hip.Event, ok bool, err error) {
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
	ev, err = s.events.get()
	if err != nil {
		return 0, false, err
	}
	if err := s.rt.EventRecord(ev, s.s); err != nil {
		s.events.put(ev)
		return 0, false, err
	}
	s.sinks.EventRecorded()
	s.marks = append(s.marks, recorded{ticket: s.lastTicket.Load(), ev: ev, refs: 1})
	return ev, true, nil
}

func (s *Stream) releaseEvent(ev hip.Event) {
	s.mu.Lock()
	for i := range s.marks {
		if s.marks[i].ev == ev {
			s.marks[i].refs--
			break
		}
	}
	s.pollLocked()
	s.mu.Unlock()
}

// WaitHost implements syncstate.Timeline with hipEventSynchronize.
func (s *Stream) WaitHost(t uint64) error {
	ev, ok, err := s.eventFor(t)
	if err != nil || !ok {
		return err
	}
	err = s.rt.EventSynchronize(ev)
	if err == nil {
		s.mu.Lock()
		for _, m := range s.marks {
			if m.ev == ev && m.ticket > s.completed.Load() {
				s.completed.Store(m.ticket)
			}
		}
		s.mu.Unlock()
	}
	s.releaseEvent(ev)
	return err
}

// CanWaitDevice implements syncstate.Timeline: hipStreamWaitEvent orders
// this stream after any other HIP stream.
func (s *Stream) CanWaitDevice(d syncstate.Domain) bool {
	return d == s.domain || s.bridge != nil
}

// WaitDevice implements syncstate.Timeline with hipStreamWaitEvent. The
// wait captures the event's state when it is enqueued, so the event may be
// recycled as soon as the call returns and the producer has passed it.
func (s *Stream) WaitDevice(fences []syncstate.Fence) error {
	for _, f := range fences {
		p, ok := f.TL.(*Stream)
		if !ok {
			if s.bridge != nil {
				if err := s.bridge(s, f); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("stream: %s cannot wait on the device for %s (%s)", s.name, f.TL.Name(), f.TL.Domain())
		}
		ev, ok, err := p.eventFor(f.Ticket)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		s.mu.Lock()
		err = s.rt.StreamWaitEvent(s.s, ev)
		s.mu.Unlock()
		p.releaseEvent(ev)
		if err != nil {
			return err
		}
	}
	return nil
}

// Drain waits on the host for everything submitted so far.
func (s *Stream) Drain() error { return s.WaitHost(s.lastTicket.Load()) }

// Close drains and destroys the stream.
func (s *Stream) Close() error {
	err := s.Drain()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.completed.Store(s.lastTicket.Load())
	}
	s.runAfterLocked()
	for _, m := range s.marks {
		s.events.put(m.ev)
	}
	s.marks = nil
	if s.s != 0 {
		if e := s.rt.StreamDestroy(s.s); e != nil && err == nil {
			err = e
		}
		s.s = 0
	}
	return err
}

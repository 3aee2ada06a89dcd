package syncstate

import (
	"sync/atomic"
	"testing"
)

// hostTL is a host lane for HostDeps: only its domain, name and completed
// ticket matter.
type hostTL struct {
	fakeTL
	done atomic.Uint64
}

func (h *hostTL) Domain() Domain    { return DomainHost }
func (h *hostTL) Completed() uint64 { return h.done.Load() }

// depTL is a device timeline that keeps HostDeps.
type depTL struct {
	fakeTL
	deps HostDeps
}

func (d *depTL) HostDeps() *HostDeps { return &d.deps }

// A timeline's HostDeps keep the newest fence per host lane, drop the
// complete ones, and take in what the timelines it waits for wait for.
func TestHostDeps(t *testing.T) {
	a, b := &hostTL{}, &hostTL{}
	a.name, b.name = "a", "b"
	var q depTL
	q.Note(Fence{TL: a, Ticket: 1})
	q.Note(Fence{TL: a, Ticket: 3})
	q.Note(Fence{TL: a, Ticket: 2})
	if n := q.Len(); n != 1 {
		t.Fatalf("%d fences for one lane, want 1", n)
	}
	var s depTL
	s.deps.Note(Fence{TL: &q, Ticket: 1}) // through q
	s.deps.Note(Fence{TL: b, Ticket: 1})
	live := s.deps.Live(nil)
	if len(live) != 2 || live[0] != (Fence{TL: a, Ticket: 3}) || live[1] != (Fence{TL: b, Ticket: 1}) {
		t.Fatalf("live: %v, want a#3 and b#1", live)
	}
	a.done.Store(3)
	if live := s.deps.Live(nil); len(live) != 1 || live[0].TL != b {
		t.Fatalf("after a#3 completed: %v, want b#1", live)
	}
	if s.deps.Len() != 1 {
		t.Fatalf("Live kept %d fences, want the 1 not complete", s.deps.Len())
	}
	s.deps.Note(Fence{TL: a, Ticket: 2}) // complete: not kept
	if s.deps.Len() != 1 {
		t.Fatalf("a complete fence was kept: %d", s.deps.Len())
	}
	var plain fakeTL
	s.deps.Note(Fence{TL: &plain, Ticket: 1}) // keeps no HostDeps: nothing
	s.deps.Note(Fence{TL: &s, Ticket: 1})     // itself: nothing
	if s.deps.Len() != 1 {
		t.Fatalf("%d fences, want 1", s.deps.Len())
	}
}

func (d *depTL) Note(f Fence) { d.deps.Note(f) }
func (d *depTL) Len() int     { return d.deps.Len() }

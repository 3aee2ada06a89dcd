package syncstate

// Helpers for an op made of several Ops: a replayed recording touches more
// operands than one Op holds (MaxOperands). The caller splits them, in
// lock order (ID), into Ops that it begins in turn, so the locks are still
// taken in one global order; it records the op's fence on all of them.

// ID is the State's place in the global lock order: Ops taken in
// increasing ID of their operands never deadlock.
func (s *State) ID() uint64 { return s.id }

// CommitOn is Commit of the op's fence on timeline tl, which may differ
// from the timeline it began on: an op submitted as a sequence whose later
// parts run on other timelines, each ordered after the one before it, is
// complete when its last part is.
func (o *Op) CommitOn(tl Timeline, ticket uint64, sinks Sinks) error {
	o.tl = tl
	return o.Commit(ticket, sinks)
}

// RecordOn records fence f on the op's operands and unlocks them, without
// Commit's WaitAlways wait (which the last part of a split op makes). An
// op that has not begun takes the locks first.
func (o *Op) RecordOn(f Fence, name string) {
	if !o.locked {
		o.lock()
	}
	for i := 0; i < o.n; i++ {
		if o.acc[i].write {
			o.acc[i].s.recordWrite(f, name)
		} else {
			o.acc[i].s.recordRead(f)
		}
	}
	o.unlock()
}

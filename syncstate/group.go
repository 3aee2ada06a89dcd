package syncstate

import (
	"slices"
	"sync"

	"github.com/rocsync/rocsync/internal/testhooks"
)

// A Group is the sync record that a replayed op of many operands (a
// recording) shares with them, so that a replay costs the same whatever
// its operand count: it records its fence once, on the group, instead of
// on every operand. Each member State links to its group and takes the
// group's newest replay into its own fields when anything reads or
// changes it (a fold): as a writer (readers cleared) where the replay
// writes it, as a reader where it only reads it. A State folded and a
// State updated by the replay itself are the same State.
//
// A replay needs no member when the members are as its group last left
// them (settled): then every wait it would consider on a member is the
// previous replay's fence on its own timeline, or a reader of it there,
// and each is skipped; see BeginReplay. An Op that takes a member between
// replays marks it taken: the next replay looks at the taken members
// alone, and where every decision Begin would make on them is a skip (an
// eager op read an input on the replay's own timeline, say) it still
// needs no other member. Otherwise, or where more than maxTaken members
// were taken, it takes every member as an Op and settles the group again.
// A host take (State.Lock) holds the group's replays off until it ends.
//
// Lock order: member States (by ID) first, then their groups, each alone.
type Group struct {
	mu      sync.Mutex
	name    string // the replay's op name, recorded as its members' writer
	members []groupMember

	// epoch counts the replays recorded on the group; a member folded up
	// to epoch has taken all of them. okEpoch is the newest successful
	// replay's (fence last), failEpoch the newest failed one's (failErr
	// poisons what it writes).
	epoch, okEpoch, failEpoch uint64
	last                      Fence
	failErr                   error

	// settled: since the last Settle the group's replays succeeded and
	// Ops took at most maxTaken members, listed in taken (each once).
	// held counts host takes (State.Lock) of members in progress.
	settled bool
	taken   []int32
	held    int
	// holding are the taken members a replay begun by BeginReplay holds
	// locked until it ends (indexes into members, in lock order).
	holding [maxTaken]int32
	nhold   int
	// skips is the number of waits a settled replay on last.TL skips:
	// one per written member (its writer, last), one per read-only
	// member with a writer (a reader on last.TL orders it).
	skips uint64
	// roWriters are the distinct writers of read-only members not known
	// to have completed successfully, whose failure a replay must still
	// notice (Poison); a writer that completed without failing never fails
	// later, and is dropped.
	roWriters []Fence
}

// maxTaken bounds the members taken between two replays that a replay
// looks at one by one; an Op taking one more unsettles the group.
const maxTaken = 16

type groupMember struct {
	s   *State
	acc Access
	// skipped: the member counts in skips (it is written, or read with a
	// writer). taken: an Op took it since the group settled.
	skipped, taken bool
}

// NewGroup links states (in lock order, distinct) to a new group; acc
// says how the replay uses each. A State already linked to another group
// stays as it is, and NewGroup returns nil: the caller then orders each
// replay per operand, as an Op.
func NewGroup(name string, states []*State, acc []Access) *Group {
	g := &Group{name: name, members: make([]groupMember, len(states)), roWriters: make([]Fence, 0, len(states)),
		taken: make([]int32, 0, maxTaken)}
	for i, s := range states {
		s.mu.Lock()
		if s.grp != nil {
			s.mu.Unlock()
			for _, m := range g.members[:i] {
				m.s.mu.Lock()
				m.s.grp = nil
				m.s.mu.Unlock()
			}
			return nil
		}
		s.grp, s.gwrite, s.gidx, s.epoch = g, acc[i].Writes(), int32(i), 0
		s.mu.Unlock()
		g.members[i] = groupMember{s: s, acc: acc[i]}
	}
	return g
}

// Unlink folds the group's replays into its members and unlinks them.
// Call it once no replay can run any more. Without fold the members keep
// what they hold (their device is closed: their timelines may be gone,
// and nothing reads them any more).
func (g *Group) Unlink(fold bool) {
	for _, m := range g.members {
		s := m.s
		s.mu.Lock()
		if fold {
			g.mu.Lock()
			s.foldLocked(g)
			g.mu.Unlock()
		}
		s.grp, s.epoch = nil, 0
		s.mu.Unlock()
	}
	g.members = nil
}

// foldLocked takes the group's replays that s has not taken into s. The
// caller holds s's and g's locks. Only the newest success and the newest
// failure matter: a replay writes its written members (which clears a
// poison), and a read-only member's reader on last's timeline replaces
// the older one there.
func (s *State) foldLocked(g *Group) {
	if s.epoch >= g.epoch {
		return
	}
	if testhooks.SkipGroupFold.Load() {
		s.epoch = g.epoch
		return
	}
	if g.okEpoch > s.epoch {
		if s.gwrite {
			s.recordWrite(g.last, g.name)
		} else {
			s.recordRead(g.last)
		}
	}
	if g.failEpoch > s.epoch && g.failEpoch > g.okEpoch && s.gwrite {
		s.err = g.failErr
	}
	s.epoch = g.epoch
}

// fold brings s up to date with its group, if it has one; the caller holds
// s's lock. take reports an Op taking s (which unsettles the group), host
// a host take (+1) or its end (-1).
func (s *State) fold(take bool, host int) {
	g := s.grp
	if g == nil {
		return
	}
	g.mu.Lock()
	s.foldLocked(g)
	if take && !testhooks.SkipGroupUnsettle.Load() {
		g.take(s.gidx)
	}
	g.held += host
	g.mu.Unlock()
}

// take marks member i taken by an Op; the caller holds g's lock.
func (g *Group) take(i int32) {
	m := &g.members[i]
	if m.taken || !g.settled {
		return
	}
	if len(g.taken) == maxTaken {
		g.settled = false
		return
	}
	m.taken = true
	g.taken = append(g.taken, i)
}

// ready reports whether a replay on tl may begin on the group as far as
// the group itself knows: it is settled, no host holds a member, its
// newest replay ran on tl, and neither that replay nor a read-only
// member's writer is known to have failed. The caller holds g's lock.
func (g *Group) ready(tl Timeline) bool {
	if !g.settled || g.held != 0 || g.last.TL != tl || g.last.Err() != nil {
		return false
	}
	live := g.roWriters[:0]
	for _, w := range g.roWriters {
		switch {
		case w.Err() != nil:
			return false
		case !w.Done():
			live = append(live, w)
		}
	}
	g.roWriters = live
	return true
}

// BeginReplay begins a replay on timeline tl without taking every
// member, where that gives what Begin on every member would: the group is
// ready (see ready), every decision Begin would make on a member an Op
// took since is a skip (Skips), and the engine neither observes
// decisions, nor asks before host waits (sync-debug mode), nor skips
// waits (those replays take the members). Then the replay needs no wait,
// the skips are counted, and BeginReplay returns true holding the group's
// lock and the taken members' locks: the caller submits the replay and
// ends it with CommitReplay or FailReplay. Otherwise it returns false and
// changes nothing: the caller begins the replay on every member as Ops,
// and ends it with Settle.
func (g *Group) BeginReplay(e *Engine, tl Timeline, sinks Sinks) bool {
	if e.Test.DisableWaits || e.Observer != nil || e.OnHostWait != nil {
		return false
	}
	g.mu.Lock()
	if !g.ready(tl) {
		g.mu.Unlock()
		return false
	}
	n := len(g.taken)
	if n == 0 {
		g.nhold = 0
		sinks.Skipped(g.skips)
		return true
	}
	if e.Test.DisableCrossDeviceWaits {
		g.mu.Unlock()
		return false
	}
	// The taken members are locked before the group (the lock order),
	// in member order, which is the States' order.
	var idx [maxTaken]int32
	copy(idx[:], g.taken)
	g.mu.Unlock()
	slices.Sort(idx[:n])
	var skips uint64
	for i := range n {
		m := &g.members[idx[i]]
		m.s.mu.Lock()
		m.s.fold(false, 0)
		k, ok := m.s.replaySkips(tl, m.acc)
		if !ok {
			g.unlockMembers(idx[:i+1])
			return false
		}
		skips += k
	}
	g.mu.Lock()
	// Taken members only accrue until a replay ends, and an Op taking one
	// now waits for its lock or for the group's: the same count is the
	// same members.
	if !g.ready(tl) || len(g.taken) != n {
		g.mu.Unlock()
		g.unlockMembers(idx[:n])
		return false
	}
	for _, i := range idx[:n] {
		if g.members[i].skipped {
			skips-- // counted again below, as g.skips counts it
		}
	}
	g.holding, g.nhold = idx, n
	sinks.Skipped(g.skips + skips)
	return true
}

func (g *Group) unlockMembers(idx []int32) {
	for _, i := range idx {
		g.members[i].s.mu.Unlock()
	}
}

// Skips is what Begin decides on s, used as acc on timeline tl, where
// each of its decisions is a skip: the skips it counts, and true. It
// returns false where Begin would wait, or would meet a failure (Begin
// reports that). The caller holds s's lock.
func (s *State) replaySkips(tl Timeline, acc Access) (uint64, bool) {
	if acc&Read != 0 && s.PoisonLocked() != nil {
		return 0, false
	}
	var n uint64
	skip := func(f Fence) bool {
		switch {
		case f.TL == nil:
			return true
		case f.Err() != nil:
			return false
		case f.TL == tl, f.Ticket <= f.TL.Completed():
			n++
			return true
		}
		return false
	}
	if acc.Writes() {
		if !skip(s.writer) {
			return 0, false
		}
		for _, r := range s.readers {
			if !skip(r) {
				return 0, false
			}
		}
		return n, true
	}
	if readerOn(s, tl) {
		if !s.writer.IsZero() {
			n++
		}
		return n, true
	}
	if !skip(s.writer) {
		return 0, false
	}
	return n, true
}

// settleTaken counts the members a replay took (locked) as the group
// leaves them, and unlocks them. The caller holds g's lock.
func (g *Group) settleTaken() {
	for _, i := range g.holding[:g.nhold] {
		g.settleMember(&g.members[i])
	}
	g.taken = g.taken[:0]
	for _, i := range g.holding[:g.nhold] {
		g.members[i].s.mu.Unlock()
	}
	g.nhold = 0
}

// settleMember counts m, whose lock the caller holds, as the group's
// replay leaves it: in skips, and its writer among the roWriters.
func (g *Group) settleMember(m *groupMember) {
	skipped := m.acc.Writes() || !m.s.writer.IsZero()
	switch {
	case skipped && !m.skipped:
		g.skips++
	case !skipped && m.skipped:
		g.skips--
	}
	m.skipped, m.taken = skipped, false
	if m.acc.Writes() {
		return
	}
	w := m.s.writer
	if w.IsZero() || (w.Done() && w.Err() == nil) || slices.Contains(g.roWriters, w) {
		return
	}
	if len(g.roWriters) == cap(g.roWriters) {
		// Writers that never complete: take every member next time,
		// which counts them afresh.
		g.settled = false
		return
	}
	g.roWriters = append(g.roWriters, w)
}

// CommitReplay records a replay begun by BeginReplay as fence f and
// unlocks the group.
func (g *Group) CommitReplay(f Fence) {
	g.epoch++
	g.okEpoch, g.last = g.epoch, f
	g.settleTaken()
	g.mu.Unlock()
}

// FailReplay records that a replay begun by BeginReplay failed after it
// began, poisoning what it writes with err (as Op.Fail), and unlocks the
// group; the next replay takes the members.
func (g *Group) FailReplay(err error) {
	g.epoch++
	g.failEpoch, g.failErr = g.epoch, err
	g.settled = false
	g.settleTaken()
	g.mu.Unlock()
}

// Settle records a replay begun on every member as fence f, instead of
// recording it on each: the caller holds every member's lock (the Ops
// that began it), and afterwards unlocks them without recording (Abort),
// then calls Engine.Committed. The members are as the group leaves them,
// so the next replay may begin with BeginReplay.
func (g *Group) Settle(f Fence) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.epoch++
	g.okEpoch, g.last = g.epoch, f
	g.skips = 0
	g.roWriters = g.roWriters[:0]
	g.taken = g.taken[:0]
	g.settled = true
	for i := range g.members {
		m := &g.members[i]
		m.skipped = false
		g.settleMember(m)
	}
}

// Committed ends an op made of several parts whose fence f was recorded
// by other means (Group.Settle, Group.CommitReplay): under WaitAlways it
// waits for f, as Commit does.
func (e *Engine) Committed(name string, f Fence, sinks Sinks) error {
	return e.waitAlways(name, f, sinks)
}

// Settled reports whether the members are as the group's last replay
// left them, so that the next replay may begin on the group alone.
func (g *Group) Settled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.settled && len(g.taken) == 0
}

// AbortReplay ends a replay begun by BeginReplay that submitted nothing:
// it unlocks the group and the taken members it held, and changes
// nothing else (they stay taken).
func (g *Group) AbortReplay() {
	g.unlockMembers(g.holding[:g.nhold])
	g.nhold = 0
	g.mu.Unlock()
}

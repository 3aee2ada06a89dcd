package syncstate

import (
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
// and each is skipped; see BeginReplay. Anything that may change a
// member outside replays (an Op taking it) unsettles the group, and the
// next replay takes every member as an Op and settles it again; a host
// take (State.Lock) holds the group's replays off until it ends.
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

	// settled: since the last Settle, no Op took a member, and the
	// group's replays since then succeeded. held counts host takes
	// (State.Lock) of members in progress.
	settled bool
	held    int
	// skips is the number of waits a settled replay on last.TL skips:
	// one per written member (its writer, last), one per read-only
	// member with a writer (a reader on last.TL orders it).
	skips uint64
	// roWriters are the distinct writers of read-only members, whose
	// failure a replay must still notice (Poison).
	roWriters []Fence
}

type groupMember struct {
	s     *State
	write bool
}

// NewGroup links states (in lock order, distinct) to a new group; writes
// says which of them the replay writes (it reads the others). A State
// already linked to another group stays as it is, and NewGroup returns
// nil: the caller then orders each replay per operand, as an Op.
func NewGroup(name string, states []*State, writes []bool) *Group {
	g := &Group{name: name, members: make([]groupMember, len(states)), roWriters: make([]Fence, 0, len(states))}
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
		s.grp, s.gwrite, s.epoch = g, writes[i], 0
		s.mu.Unlock()
		g.members[i] = groupMember{s: s, write: writes[i]}
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
		g.settled = false
	}
	g.held += host
	g.mu.Unlock()
}

// BeginReplay begins a replay on timeline tl without touching a member,
// where that gives what Begin on every member would: the group is
// settled, no host holds a member, its newest replay ran on tl and
// neither it nor a read-only member's writer is known to have failed, and
// the engine neither observes decisions, nor asks before host waits
// (sync-debug mode), nor skips waits (those replays take the members).
// Then the replay needs no wait, the skips are counted, and BeginReplay
// returns true holding the group's lock: the caller
// submits the replay and ends it with CommitReplay or FailReplay.
// Otherwise it returns false and changes nothing: the caller begins the
// replay on every member as Ops, and ends it with Settle.
func (g *Group) BeginReplay(e *Engine, tl Timeline, sinks Sinks) bool {
	if e.Test.DisableWaits || e.Observer != nil || e.OnHostWait != nil {
		return false
	}
	g.mu.Lock()
	ok := g.settled && g.held == 0 && g.last.TL == tl && g.last.Err() == nil
	for i := 0; ok && i < len(g.roWriters); i++ {
		ok = g.roWriters[i].Err() == nil
	}
	if !ok {
		g.mu.Unlock()
		return false
	}
	sinks.Skipped(g.skips)
	return true
}

// CommitReplay records a replay begun by BeginReplay as fence f and
// unlocks the group.
func (g *Group) CommitReplay(f Fence) {
	g.epoch++
	g.okEpoch, g.last = g.epoch, f
	g.mu.Unlock()
}

// FailReplay records that a replay begun by BeginReplay failed after it
// began, poisoning what it writes with err (as Op.Fail), and unlocks the
// group; the next replay takes the members.
func (g *Group) FailReplay(err error) {
	g.epoch++
	g.failEpoch, g.failErr = g.epoch, err
	g.settled = false
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
	for _, m := range g.members {
		if m.write {
			g.skips++
			continue
		}
		w := m.s.writer
		if w.IsZero() {
			continue
		}
		g.skips++
		seen := false
		for _, x := range g.roWriters {
			if x == w {
				seen = true
				break
			}
		}
		if !seen {
			g.roWriters = append(g.roWriters, w)
		}
	}
	g.settled = true
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
	return g.settled
}

// AbortReplay ends a replay begun by BeginReplay that submitted nothing:
// it unlocks the group and changes nothing else.
func (g *Group) AbortReplay() { g.mu.Unlock() }

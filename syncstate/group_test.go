package syncstate

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// replayOn begins a replay of g's members (r read, w written) on tl: on the
// group when it can, else on every member, as rocsync's Replay does; it
// reports whether it skipped the members.
func replayOn(t *testing.T, e *Engine, g *Group, tl Timeline, ticket uint64, r, w *State) bool {
	t.Helper()
	var s Stats
	if g.BeginReplay(e, tl, Sinks{&s}) {
		g.CommitReplay(Fence{TL: tl, Ticket: ticket})
		return true
	}
	var op Op
	op.Name = "Replay"
	op.Read(r)
	op.Write(w)
	require.NoError(t, op.Begin(e, tl, Sinks{&s}))
	g.Settle(Fence{TL: tl, Ticket: ticket})
	op.Abort()
	return false
}

// A member takes the group's replays when read: the newest as writer of
// what it writes, as a reader of what it reads; a failure after it
// poisons what it writes; Unlink leaves the members as folded.
func TestGroupFolds(t *testing.T) {
	q := &fakeTL{name: "q"}
	e := &Engine{Policy: DeviceSide}
	r, w := NewState(), NewState()
	g := NewGroup("Replay", []*State{r, w}, []Access{Read, Write})
	require.NotNil(t, g)
	require.Nil(t, NewGroup("Replay", []*State{w}, []Access{Write}), "a State joins one group")

	require.False(t, replayOn(t, e, g, q, 1, r, w), "the first replay takes its members")
	require.True(t, g.Settled())
	require.True(t, replayOn(t, e, g, q, 2, r, w), "a replay after a replay skips them")
	require.True(t, replayOn(t, e, g, q, 3, r, w))
	require.Equal(t, Fence{TL: q, Ticket: 3}, w.Writer())
	require.Zero(t, r.Writer().Ticket)
	require.Equal(t, 1, r.PendingCount(), "the read-only member's reader is the newest replay")

	// An op that takes a member unsettles the group: the next replay takes
	// them all, and is ordered after the op.
	o := &fakeTL{name: "o"}
	run(t, e, o, 7, nil, []*State{r})
	require.False(t, g.Settled())
	require.False(t, replayOn(t, e, g, q, 4, r, w))
	require.Equal(t, [][]Fence{{{TL: o, Ticket: 7}}}, q.devWaits)
	require.True(t, replayOn(t, e, g, q, 5, r, w))

	// A failed skipping replay poisons what it writes only.
	boom := errors.New("boom")
	var s Stats
	require.True(t, g.BeginReplay(e, q, Sinks{&s}))
	g.FailReplay(boom)
	require.ErrorIs(t, w.Poison(), boom)
	require.NoError(t, r.Poison())
	require.False(t, g.Settled())

	// A host take holds skipping replays off.
	require.False(t, replayOn(t, e, g, q, 6, r, w))
	require.NoError(t, w.Poison(), "the replay's write clears the poison")
	r.Lock()
	require.False(t, g.BeginReplay(e, q, Sinks{&s}))
	r.Unlock()
	require.True(t, replayOn(t, e, g, q, 8, r, w))

	g.Unlink(true)
	require.Equal(t, Fence{TL: q, Ticket: 8}, w.Writer())
	require.NotNil(t, NewGroup("Replay", []*State{w}, []Access{Write}), "unlinked States join another group")
}

// An op that takes a member where every decision a replay would make on it
// is a skip (it read a member on the replay's own timeline, or its work is
// complete) leaves the replay on the group: it takes that member alone,
// counts the same skips that taking every member counts, and the members
// then fold the replay as before.
func TestGroupReplayTakesOnlyTheMembersOpsTook(t *testing.T) {
	q := &fakeTL{name: "q"}
	e := &Engine{Policy: DeviceSide}
	const n = 40
	states := make([]*State, n)
	acc := make([]Access, n)
	for i := range states {
		states[i] = NewState()
		acc[i] = ReadWrite
		if i == 0 {
			acc[i] = Read
		}
	}
	run(t, e, q, 1, nil, []*State{states[0]}) // the read-only member has a writer
	g := NewGroup("Replay", states, acc)
	require.NotNil(t, g)
	full := func(ticket uint64) Snapshot {
		var s Stats
		parts := make([]Op, (n+MaxOperands-1)/MaxOperands)
		for i := range parts {
			parts[i].Name = "Replay"
			for j := i * MaxOperands; j < min(n, (i+1)*MaxOperands); j++ {
				parts[i].Use(states[j], acc[j])
			}
			require.NoError(t, parts[i].Begin(e, q, Sinks{&s}))
		}
		g.Settle(Fence{TL: q, Ticket: ticket})
		for i := range parts {
			parts[i].Abort()
		}
		return s.Snapshot()
	}
	onGroup := func(ticket uint64) (Snapshot, bool) {
		var s Stats
		if !g.BeginReplay(e, q, Sinks{&s}) {
			return s.Snapshot(), false
		}
		g.CommitReplay(Fence{TL: q, Ticket: ticket})
		return s.Snapshot(), true
	}
	require.EqualValues(t, 1, full(2).SkippedWaits, "the first replay finds one writer")
	want, ok := onGroup(3)
	require.True(t, ok)
	require.EqualValues(t, n, want.SkippedWaits, "one skip per member")

	// Eager ops on the replay's timeline: one reads the read-only member,
	// one reads a written member, one writes another.
	run(t, e, q, 4, []*State{states[0], states[7]}, nil)
	run(t, e, q, 5, nil, []*State{states[30]})
	require.False(t, g.Settled(), "ops took members")
	got, ok := onGroup(6)
	require.True(t, ok, "a replay whose every decision is a skip stays on the group")
	// Begin on every member would skip one more: states[7]'s reader on q
	// besides its writer.
	want.SkippedWaits++
	require.Equal(t, want, got, "the same skips as a replay that takes every member")
	require.True(t, g.Settled())
	require.Equal(t, Fence{TL: q, Ticket: 6}, states[30].Writer(), "the written member folds the replay")
	require.Equal(t, Fence{TL: q, Ticket: 1}, states[0].Writer())
	require.Empty(t, q.devWaits)

	// An op on another timeline that has not completed needs a wait: the
	// replay takes every member, and waits for it.
	o := &fakeTL{name: "o"}
	run(t, e, o, 1, []*State{states[12]}, nil)
	_, ok = onGroup(7)
	require.False(t, ok)
	full(7)
	require.Equal(t, [][]Fence{{{TL: o, Ticket: 1}}}, q.devWaits, "the replay overwrites what o still reads")
	_, ok = onGroup(8)
	require.True(t, ok, "and settles the group again")

	// A poisoned member the replay reads makes it take every member, so
	// that it fails as Begin fails.
	boom := errors.New("boom")
	q.failFrom, q.failErr = 9, boom
	run(t, e, q, 9, nil, []*State{states[0]})
	_, ok = onGroup(10)
	require.False(t, ok, "a failed writer of a read member is Begin's to report")
}

// groupWorld is a recording's operands and group on timelines q and o,
// for TestGroupReplayDecidesAsEveryMember.
type groupWorld struct {
	q, o   *fakeTL
	states []*State
	acc    []Access
	g      *Group
	ticket map[*fakeTL]uint64
	// partial counts the replays that stayed on the group although ops
	// had taken members.
	partial int
}

func newGroupWorld(acc []Access) *groupWorld {
	w := &groupWorld{q: &fakeTL{name: "q"}, o: &fakeTL{name: "o"}, acc: acc, ticket: map[*fakeTL]uint64{}}
	for range acc {
		w.states = append(w.states, NewState())
	}
	w.g = NewGroup("Replay", w.states, acc)
	return w
}

func (w *groupWorld) next(tl *fakeTL) uint64 { w.ticket[tl]++; return w.ticket[tl] }

// replay begins on the group where it can (onGroup) or on every member.
func (w *groupWorld) replay(t *testing.T, e *Engine, onGroup bool) Snapshot {
	var s Stats
	f := Fence{TL: w.q, Ticket: w.next(w.q)}
	if onGroup && w.g.BeginReplay(e, w.q, Sinks{&s}) {
		if w.g.nhold > 0 {
			w.partial++
		}
		w.g.CommitReplay(f)
		return s.Snapshot()
	}
	parts := make([]Op, (len(w.states)+MaxOperands-1)/MaxOperands)
	for i := range parts {
		parts[i].Name = "Replay"
		for j := i * MaxOperands; j < min(len(w.states), (i+1)*MaxOperands); j++ {
			parts[i].Use(w.states[j], w.acc[j])
		}
		require.NoError(t, parts[i].Begin(e, w.q, Sinks{&s}))
	}
	w.g.Settle(f)
	for i := range parts {
		parts[i].Abort()
	}
	return s.Snapshot()
}

// seen is what the world's states say, by timeline name.
func (w *groupWorld) seen() []string {
	var out []string
	for _, s := range w.states {
		for _, f := range s.PendingFences(nil) {
			out = append(out, f.String())
		}
		out = append(out, "writer "+s.Writer().String(), "|")
	}
	return out
}

// A replay that stays on its group decides, counts and leaves its members
// exactly as one that takes every member, whatever eager ops took them in
// between: a random differential of the two.
func TestGroupReplayDecidesAsEveryMember(t *testing.T) {
	partial := 0
	for seed := range int64(200) {
		r := rand.New(rand.NewSource(seed))
		n := 1 + r.Intn(30)
		acc := make([]Access, n)
		for i := range acc {
			acc[i] = []Access{Read, Write, ReadWrite}[r.Intn(3)]
		}
		e := &Engine{Policy: DeviceSide}
		a, b := newGroupWorld(acc), newGroupWorld(acc)
		for step := range 30 {
			sa, sb := a.replay(t, e, true), b.replay(t, e, false)
			require.Equal(t, sb, sa, "seed %d step %d: counts", seed, step)
			require.Equal(t, b.seen(), a.seen(), "seed %d step %d: states", seed, step)
			require.Equal(t, len(b.q.devWaits), len(a.q.devWaits), "seed %d step %d: device waits", seed, step)
			for range r.Intn(4) {
				useO := r.Intn(3) == 0
				i, write := r.Intn(n), r.Intn(2) == 0
				for _, w := range []*groupWorld{a, b} {
					tl := w.q
					if useO {
						tl = w.o
					}
					var reads, writes []*State
					if write {
						writes = []*State{w.states[i]}
					} else {
						reads = []*State{w.states[i]}
					}
					run(t, e, tl, w.next(tl), reads, writes)
				}
			}
			if r.Intn(2) == 0 { // o catches up
				a.o.completed, b.o.completed = a.ticket[a.o], b.ticket[b.o]
			}
		}
		partial += a.partial
	}
	require.Greater(t, partial, 500, "replays that stayed on the group after ops took members")
}

// A replay begun on the group that submits nothing (AbortReplay) leaves
// the members it took unlocked and still taken.
func TestGroupAbortReplayReleasesTakenMembers(t *testing.T) {
	q := &fakeTL{name: "q"}
	e := &Engine{Policy: DeviceSide}
	r, w := NewState(), NewState()
	g := NewGroup("Replay", []*State{r, w}, []Access{Read, Write})
	require.False(t, replayOn(t, e, g, q, 1, r, w))
	run(t, e, q, 2, []*State{r}, nil) // takes r; every decision on it a skip
	var s Stats
	require.True(t, g.BeginReplay(e, q, Sinks{&s}))
	require.False(t, r.mu.TryLock(), "the replay holds the member it took")
	g.AbortReplay()
	require.True(t, r.mu.TryLock(), "AbortReplay unlocks it")
	r.mu.Unlock()
	require.False(t, g.Settled(), "and it stays taken")
	require.True(t, replayOn(t, e, g, q, 3, r, w))
	require.True(t, g.Settled())
}

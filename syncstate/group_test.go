package syncstate

import (
	"errors"
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
	g := NewGroup("Replay", []*State{r, w}, []bool{false, true})
	require.NotNil(t, g)
	require.Nil(t, NewGroup("Replay", []*State{w}, []bool{true}), "a State joins one group")

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
	require.NotNil(t, NewGroup("Replay", []*State{w}, []bool{true}), "unlinked States join another group")
}

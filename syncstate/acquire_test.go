package syncstate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// acquiringTL is a fakeTL that is an Acquirer: it shares the writes of the
// timelines in shares, and logs its device waits and acquires in order.
type acquiringTL struct {
	fakeTL
	shares map[Timeline]bool
	log    []string
}

func (a *acquiringTL) SharesWritesOf(p Timeline) bool { return a.shares[p] }
func (a *acquiringTL) AcquireSystem()                 { a.log = append(a.log, "acquire") }
func (a *acquiringTL) WaitDevice(fs []Fence) error {
	a.log = append(a.log, "wait")
	return a.fakeTL.WaitDevice(fs)
}

// An op on an Acquirer asks for a system-scope acquire when an operand
// was last written by the host or by a timeline whose writes it does not
// share, unless the timeline has read it since; it asks after its device
// waits, so the packet that takes the acquire launches after them.
func TestOpAsksForAnAcquireWhereOutsideWritesEnter(t *testing.T) {
	q := &acquiringTL{fakeTL: fakeTL{name: "q"}}
	sibling := &fakeTL{name: "sibling queue of the GPU"}
	outside := &fakeTL{name: "copy stream"}
	q.shares = map[Timeline]bool{sibling: true}
	e := &Engine{Policy: DeviceSide}
	step := func(reads, writes []*State, ticket uint64) []string {
		q.log = nil
		run(t, e, q, ticket, reads, writes)
		return q.log
	}

	fresh := NewState() // never written: its contents are undefined
	require.Empty(t, step([]*State{fresh}, nil, 1), "a read of an array no one wrote")

	host := NewState()
	host.MarkHostWritten()
	require.Equal(t, []string{"acquire"}, step([]*State{host}, nil, 2), "the first read of what the host wrote")
	require.Empty(t, step([]*State{host}, nil, 3), "q has read it since the host wrote it")

	hostOut := NewState()
	hostOut.MarkHostWritten()
	require.Equal(t, []string{"acquire"}, step(nil, []*State{hostOut}, 4), "a write over what the host wrote (it may write part of it)")
	require.Empty(t, step([]*State{hostOut}, nil, 5), "q wrote it last: MarkHostWritten is cleared")

	copied := NewState()
	run(t, e, outside, 1, nil, []*State{copied})
	require.Equal(t, []string{"wait", "acquire"}, step([]*State{copied}, nil, 6), "after the wait for the copy, not before")

	bySibling := NewState()
	run(t, e, sibling, 1, nil, []*State{bySibling})
	require.Equal(t, []string{"wait"}, step([]*State{bySibling}, nil, 7), "a sibling's write is in the shared cache")

	outside.completed = 1
	done := NewState()
	run(t, e, outside, 1, nil, []*State{done})
	require.Equal(t, []string{"acquire"}, step([]*State{done}, nil, 8), "a copy already complete: no wait, still an acquire")

	// An op whose writes are foreign work's (a signal import on q) marks
	// them: q's own next op that uses them asks too.
	foreign := NewState()
	var imp Op
	imp.ForeignWrites = true
	imp.Write(foreign)
	require.NoError(t, imp.Begin(e, q, Sinks{}))
	require.NoError(t, imp.Commit(10, Sinks{}))
	require.Equal(t, []string{"acquire"}, step([]*State{foreign}, nil, 11), "what foreign work wrote")
	require.Empty(t, step([]*State{foreign}, nil, 12), "q has read it since")

	// With waits disabled (a test switch) the acquire is still asked for.
	dis := &Engine{Policy: DeviceSide}
	dis.Test.DisableWaits = true
	late := NewState()
	run(t, e, outside, 2, nil, []*State{late})
	q.log = nil
	run(t, dis, q, 9, []*State{late}, nil)
	require.Equal(t, []string{"acquire"}, q.log)
}

package syncstate

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Ops submitted together (LockAll, BeginLocked each) lock in the global
// order: an op over the same arrays, locked from another goroutine in
// the opposite argument order, never deadlocks with them. Each gets the
// waits Begin would give it.
func TestLockAllKeepsTheGlobalOrder(t *testing.T) {
	a, b := &fakeTL{name: "a"}, &fakeTL{name: "b"}
	e := &Engine{Policy: DeviceSide}
	x, y := NewState(), NewState() // x's id is below y's
	sinks := Sinks{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 2000 {
			var ox, oy Op
			oy.Write(y) // the higher id first
			ox.Write(x)
			if err := LockAll(&oy, &ox); err != nil {
				t.Error(err)
				return
			}
			if err := errors.Join(oy.BeginLocked(e, a, sinks), ox.BeginLocked(e, b, sinks)); err != nil {
				t.Error(err)
				return
			}
			oy.Abort()
			ox.Abort()
		}
	})
	wg.Go(func() {
		for range 2000 {
			var o Op
			o.Read(y)
			o.Read(x)
			if err := o.Begin(e, a, sinks); err != nil {
				t.Error(err)
				return
			}
			o.Abort()
		}
	})
	wg.Wait()

	// BeginLocked orders as Begin: y written on b is waited for on a.
	var w Op
	w.Write(y)
	require.NoError(t, w.Begin(e, b, sinks))
	require.NoError(t, w.Commit(1, sinks))
	var oy Op
	oy.Write(y)
	require.NoError(t, LockAll(&oy))
	require.NoError(t, oy.BeginLocked(e, a, sinks))
	require.Equal(t, [][]Fence{{{TL: b, Ticket: 1}}}, a.devWaits)
	oy.Abort()

	var unlocked Op
	unlocked.Write(x)
	require.Error(t, unlocked.BeginLocked(e, a, sinks), "BeginLocked of an op LockAll did not lock")
	var many Op
	for range MaxOperands + 1 {
		many.Write(NewState())
	}
	require.ErrorIs(t, LockAll(&many), ErrTooManyOperands)
}

// CommitFailed records the op's fence (later ops order after it) and
// poisons what it writes; what it reads stays sound.
func TestCommitFailedRecordsAndPoisons(t *testing.T) {
	q, r := &fakeTL{name: "q"}, &fakeTL{name: "r"}
	e := &Engine{Policy: DeviceSide}
	in, out := NewState(), NewState()
	boom := errors.New("group launch failed")
	var o Op
	o.Read(in)
	o.Write(out)
	require.NoError(t, o.Begin(e, q, Sinks{}))
	o.CommitFailed(3, boom)
	require.ErrorIs(t, out.Poison(), boom)
	require.NoError(t, in.Poison())
	// A write of out on another timeline waits for the failed op's fence.
	var w Op
	w.Write(out)
	require.NoError(t, w.Begin(e, r, Sinks{}))
	require.Equal(t, [][]Fence{{{TL: q, Ticket: 3}}}, r.devWaits)
	require.NoError(t, w.Commit(1, Sinks{}))
	require.NoError(t, out.Poison(), "a new write makes it sound again")
}

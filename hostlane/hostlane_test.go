package hostlane

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/syncstate"
)

// manual is a producer timeline the test completes by hand.
type manual struct {
	mu        sync.Mutex
	completed uint64
	failFrom  uint64
	err       error
	changed   chan struct{}
	pinned    atomic.Int32
}

func newManual() *manual { return &manual{changed: make(chan struct{})} }

func (m *manual) Domain() syncstate.Domain            { return syncstate.DomainKernel }
func (m *manual) Name() string                        { return "manual" }
func (m *manual) LastTicket() uint64                  { return 100 }
func (m *manual) CanWaitDevice(syncstate.Domain) bool { return false }
func (m *manual) WaitDevice([]syncstate.Fence) error  { return errors.New("no") }
func (m *manual) Completed() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.completed
}
func (m *manual) Failed(t uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil && t >= m.failFrom {
		return m.err
	}
	return nil
}
func (m *manual) WaitHost(t uint64) error {
	for {
		m.mu.Lock()
		ch, done := m.changed, m.completed >= t
		m.mu.Unlock()
		if done {
			return m.Failed(t)
		}
		<-ch
	}
}
func (m *manual) complete(t uint64, err error) {
	m.mu.Lock()
	m.completed = t
	if err != nil && m.err == nil {
		m.err, m.failFrom = err, t
	}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}
func (m *manual) Pin(uint64) (func(), error) {
	m.pinned.Add(1)
	return func() { m.pinned.Add(-1) }, nil
}

// Functions run in order, each after the fences it was told to wait for,
// and the submitter does not wait; OnComplete fires once the ticket is
// done, or reports it already is.
func TestLaneOrderAndDependencies(t *testing.T) {
	l := New(Config{Name: "h"})
	defer l.Close()
	p := newManual()
	var order []int
	var mu sync.Mutex
	add := func(i int) func() error {
		return func() error { mu.Lock(); order = append(order, i); mu.Unlock(); return nil }
	}
	require.NoError(t, l.WaitDevice([]syncstate.Fence{{TL: p, Ticket: 2}}))
	require.Equal(t, int32(1), p.pinned.Load(), "a pinner's fence is pinned when recorded")
	t1, err := l.Submit(add(1))
	require.NoError(t, err)
	t2, err := l.Submit(add(2))
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, []uint64{t1, t2})
	fired := make(chan struct{})
	require.True(t, l.OnComplete(t2, func() { close(fired) }))
	time.Sleep(5 * time.Millisecond)
	require.Zero(t, l.Completed(), "ran before its dependency completed")
	p.complete(1, nil)
	time.Sleep(5 * time.Millisecond)
	require.Zero(t, l.Completed(), "ran before its dependency completed")
	p.complete(2, nil)
	require.NoError(t, l.WaitHost(t2))
	<-fired
	require.Equal(t, []int{1, 2}, order)
	require.Zero(t, p.pinned.Load(), "the pin is released after the wait")
	require.False(t, l.OnComplete(t1, func() { t.Error("called for a completed ticket") }))

	// Fences recorded for a function never submitted are unpinned at Close.
	require.NoError(t, l.WaitDevice([]syncstate.Fence{{TL: p, Ticket: 3}}))
	require.Equal(t, int32(1), p.pinned.Load())
	require.NoError(t, l.Close())
	require.Zero(t, p.pinned.Load())
}

// A function's error breaks the lane from its ticket on: later functions
// do not run, and waits report the error. A failed dependency fails the
// function with an UpstreamError wrapping the producer's error.
func TestLaneFailure(t *testing.T) {
	cause := errors.New("boom")
	l := New(Config{Name: "h"})
	t1, _ := l.Submit(func() error { return nil })
	t2, _ := l.Submit(func() error { return cause })
	var ran atomic.Bool
	t3, _ := l.Submit(func() error { ran.Store(true); return nil })
	require.NoError(t, l.WaitHost(t1))
	require.ErrorIs(t, l.WaitHost(t2), cause)
	require.ErrorIs(t, l.WaitHost(t3), cause)
	require.False(t, ran.Load())
	require.ErrorIs(t, l.Close(), cause)

	l2 := New(Config{Name: "h2"})
	p := newManual()
	require.NoError(t, l2.WaitDevice([]syncstate.Fence{{TL: p, Ticket: 1}}))
	t4, _ := l2.Submit(func() error { ran.Store(true); return nil })
	p.complete(1, cause)
	err := l2.WaitHost(t4)
	var up *syncstate.UpstreamError
	require.ErrorAs(t, err, &up)
	require.ErrorIs(t, err, cause)
	require.False(t, ran.Load())
	_ = l2.Close()

	l3 := New(Config{Name: "h3"})
	t5, _ := l3.Submit(func() error { panic("oops") })
	var pe *PanicError
	require.ErrorAs(t, l3.WaitHost(t5), &pe)
	_ = l3.Close()
}

// Host waits on the lane are bounded by WaitTimeout and by a context;
// Close of a lane stuck past WaitTimeout returns the timeout and keeps
// the lane; submitting to a closed lane is ErrClosed.
func TestLaneBoundedWaits(t *testing.T) {
	l := New(Config{Name: "h", WaitTimeout: 20 * time.Millisecond})
	gate := make(chan struct{})
	tk, _ := l.Submit(func() error { <-gate; return nil })
	require.ErrorIs(t, l.WaitHost(tk), syncstate.ErrWaitTimeout)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, l.WaitHostContext(ctx, tk), context.Canceled)
	require.ErrorIs(t, l.Close(), syncstate.ErrWaitTimeout)
	close(gate)
	require.NoError(t, l.Close())
	_, err := l.Submit(func() error { return nil })
	require.ErrorIs(t, err, ErrClosed)
}

// Past MaxPending functions in flight, Submit waits for the older half:
// a throttle wait, reported to OnThrottle, which may refuse it.
func TestLaneThrottle(t *testing.T) {
	var stats syncstate.Stats
	var throttled atomic.Int32
	l := New(Config{Name: "h", MaxPending: 4, Sinks: syncstate.Sinks{&stats},
		OnThrottle: func(syncstate.Fence) error { throttled.Add(1); return nil }})
	defer l.Close()
	var running, worst atomic.Int64
	for range 20 {
		_, err := l.Submit(func() error { time.Sleep(100 * time.Microsecond); running.Add(-1); return nil })
		require.NoError(t, err)
		worst.Store(max(worst.Load(), running.Add(1)))
	}
	require.LessOrEqual(t, worst.Load(), int64(4))
	require.Positive(t, throttled.Load())
	require.Positive(t, stats.Snapshot().HostWaitsFor(syncstate.ReasonThrottle))

	refuse := errors.New("refused")
	gate := make(chan struct{})
	l2 := New(Config{Name: "h2", MaxPending: 1, OnThrottle: func(syncstate.Fence) error { return refuse }})
	_, err := l2.Submit(func() error { <-gate; return nil })
	require.NoError(t, err)
	_, err = l2.Submit(func() error { return nil })
	require.ErrorIs(t, err, refuse)
	close(gate)
	require.NoError(t, l2.Close())
}

// A function that waits for its own ticket, or one behind it, is refused
// at once with ErrSelfWait (it blocked for ever without a timeout); it may
// wait for tickets already complete, and other goroutines' waits for the
// same tickets block as before until the functions return.
func TestLaneRefusesAFunctionsWaitForItself(t *testing.T) {
	l := New(Config{Name: "h"}) // no WaitTimeout: the wait would never end
	defer l.Close()
	first, err := l.Submit(func() error { return nil })
	require.NoError(t, err)
	require.NoError(t, l.WaitHost(first))
	inside := make(chan error, 3)
	release := make(chan struct{})
	own := first + 1 // tickets go in order; the function reads it before Submit returns it
	got, err := l.Submit(func() error {
		inside <- l.WaitHost(first) // complete: fine
		inside <- l.WaitHost(own)   // itself
		inside <- l.WaitHost(own + 1)
		<-release
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, own, got)
	behind, err := l.Submit(func() error { return nil })
	require.NoError(t, err)
	require.Equal(t, own+1, behind)
	require.NoError(t, <-inside)
	for range 2 {
		err := <-inside
		require.ErrorIs(t, err, syncstate.ErrSelfWait)
		require.ErrorContains(t, err, "h#")
	}
	waited := make(chan error)
	go func() { waited <- l.WaitHost(behind) }()
	close(release)
	require.NoError(t, <-waited)
}

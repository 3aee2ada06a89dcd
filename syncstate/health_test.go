package syncstate

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// healthTL is a fake timeline whose failures come from a Health.
type healthTL struct {
	fakeTL
	h Health
}

func (f *healthTL) Failed(t uint64) error { return f.h.Failed(t) }

func (f *healthTL) Health() *Health { return &f.h }

// A timeline that waited on the device for a fence that failed breaks from
// the first ticket behind that wait, transitively, and the error wraps the
// producer's; a wait for a fence before the failure does not break it.
func TestHealthPropagatesUpstreamFailures(t *testing.T) {
	a := &healthTL{fakeTL: fakeTL{name: "a"}}
	b := &healthTL{fakeTL: fakeTL{name: "b"}}
	c := &healthTL{fakeTL: fakeTL{name: "c"}}
	b.h.AddUpstream("b", Fence{TL: a, Ticket: 3}, 10) // b#10.. wait for a#3
	c.h.AddUpstream("c", Fence{TL: b, Ticket: 12}, 5) // c#5.. wait for b#12
	c.h.AddUpstream("c", Fence{TL: a, Ticket: 1}, 2)  // c#2.. wait for a#1
	require.NoError(t, c.h.Failed(100))
	cause := errors.New("fault")
	a.h.Fail(2, cause) // a#1 succeeded, a#2.. failed
	require.NoError(t, a.h.Failed(1))
	require.ErrorIs(t, a.h.Failed(2), cause)
	require.NoError(t, b.h.Failed(9), "before the wait")
	require.ErrorIs(t, b.h.Failed(10), cause)
	require.NoError(t, c.h.Failed(4), "c#2..4 waited only for a#1, which succeeded")
	err := c.h.Failed(5)
	require.ErrorIs(t, err, cause)
	var ue *UpstreamError
	require.True(t, errors.As(err, &ue))
	require.Equal(t, "c", ue.Consumer)
	require.Equal(t, b, ue.Producer.TL)
}

// Prune forgets waits that completed on good data, oldest first, and keeps
// Failed O(1) while nothing fails.
func TestHealthPrunes(t *testing.T) {
	a := &healthTL{fakeTL: fakeTL{name: "a"}}
	b := &healthTL{fakeTL: fakeTL{name: "b"}}
	for i := uint64(1); i <= 10; i++ {
		b.h.AddUpstream("b", Fence{TL: a, Ticket: i}, i)
	}
	a.completed = 6
	b.h.Prune(4)
	require.EqualValues(t, 6, b.h.n.Load(), "waits 1-4 passed on good data")
	b.h.Prune(8)
	require.EqualValues(t, 4, b.h.n.Load(), "wait 7 is not known complete at its producer")
	allocs := testing.AllocsPerRun(100, func() { _ = b.h.Failed(9) })
	require.Zero(t, allocs)
}

// A failure reported for an earlier ticket replaces one reported first for
// a later ticket: every ticket from the earliest failure on failed.
func TestHealthEarliestFailureWins(t *testing.T) {
	var h Health
	late, early := errors.New("late"), errors.New("early")
	h.Fail(10, late)
	h.Fail(5, early)
	h.Fail(7, errors.New("between"))
	if err := h.Failed(4); err != nil {
		t.Fatalf("ticket 4 failed: %v", err)
	}
	for _, tk := range []uint64{5, 9, 10, 11} {
		if err := h.Failed(tk); err != early {
			t.Fatalf("ticket %d: %v, want %v", tk, err, early)
		}
	}
}

// learningTL learns that its work failed when asked how far it completed,
// as a stream does when the event it queries reports the fault.
type learningTL struct {
	fakeTL
	last uint64
	err  error
}

func (l *learningTL) Completed() uint64 {
	if l.failFrom == 0 {
		l.failFrom, l.failErr, l.completed = 1, l.err, l.last
	}
	return l.completed
}

// The producer of an input can be found failed (and complete: it will not
// run) between the check of the inputs and the ordering: the op must still
// fail, not skip the producer as merely complete and run on its output
// (found by the fault fuzzer: a gemm under Unified read what a faulted
// kernel was to write, and its own output read back as sound).
func TestProducerFoundFailedWhileOrderingFailsTheOp(t *testing.T) {
	cause := errors.New("fault")
	prod := &learningTL{fakeTL: fakeTL{name: "p", domain: DomainLibrary}, last: 3, err: cause}
	cons := &fakeTL{name: "c", domain: DomainLibrary}
	in, out := NewState(), NewState()
	in.recordWrite(Fence{TL: prod, Ticket: 3}, "Producer")
	var op Op
	op.Name = "Consumer"
	op.Read(in)
	op.Write(out)
	err := op.Begin(&Engine{Policy: Unified}, cons, Sinks{})
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, out.Poison(), cause, "what the op was to write is poisoned")
	require.Empty(t, cons.devWaits)
}

// A device wait can be recorded for a fence whose producer has already
// failed: the consumer checked its inputs, then the producer broke, then
// the wait was enqueued. The consumer's tickets behind that wait fail,
// although it found its producers healthy since the failure (found by the
// fault fuzzer: a gemm waited on the device for a kernel whose queue had
// just broken, and its output read back without an error, seed 109 under
// DeviceBridge).
func TestUpstreamAddedAfterItsProducerFailed(t *testing.T) {
	a := &healthTL{fakeTL: fakeTL{name: "a"}}
	c := &healthTL{fakeTL: fakeTL{name: "c"}}
	c.h.AddUpstream("c", Fence{TL: a, Ticket: 1}, 1) // c#1.. wait for a#1
	cause := errors.New("fault")
	a.h.Fail(3, cause) // a#1 and a#2 succeeded, a#3.. failed
	require.NoError(t, c.h.Failed(10), "c waited only for a#1, which succeeded")
	c.h.AddUpstream("c", Fence{TL: a, Ticket: 4}, 5) // c#5.. wait for a#4, failed already
	require.NoError(t, c.h.Failed(4))
	require.ErrorIs(t, c.h.Failed(5), cause)
}

// blockingTL's Failed blocks, the first time, until release is closed,
// after closing entered: a producer that another goroutine is asking while
// the test looks at the consumer.
type blockingTL struct {
	fakeTL
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
}

func (b *blockingTL) Failed(t uint64) error {
	b.once.Do(func() {
		close(b.entered)
		<-b.released
	})
	return b.fakeTL.Failed(t)
}

// Whether a ticket failed is answered exactly, whatever another goroutine
// is doing with the timeline's record of device waits at the time (asking
// its producers, pruning): an answer of "healthy" for a failed ticket is
// read as sound data. It was answered "healthy" whenever the record was
// busy (the fault fuzzer's read-backs of faulted data under -race).
func TestFailedIsExactWhileAnotherGoroutineAsksTheProducers(t *testing.T) {
	a := &healthTL{fakeTL: fakeTL{name: "a"}}
	slow := &blockingTL{fakeTL: fakeTL{name: "slow"}, entered: make(chan struct{}), released: make(chan struct{})}
	c := &healthTL{fakeTL: fakeTL{name: "c"}}
	c.h.AddUpstream("c", Fence{TL: a, Ticket: 2}, 5)    // c#5.. wait for a#2
	c.h.AddUpstream("c", Fence{TL: slow, Ticket: 1}, 6) // c#6.. wait for slow#1
	cause := errors.New("fault")
	a.h.Fail(1, cause)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		c.h.Probe() // asks a, then slow, which blocks
	}()
	<-slow.entered
	err := c.h.Failed(5)
	close(slow.released)
	<-probed
	require.ErrorIs(t, err, cause)
}

// A timeline that learns of its own failure first, from a later ticket,
// still fails the earlier tickets that waited on the device for a producer
// that failed: the earliest failure wins, in whichever order they are
// learned.
func TestOwnLaterFailureDoesNotHideAnUpstreamFailure(t *testing.T) {
	a := &healthTL{fakeTL: fakeTL{name: "a"}}
	c := &healthTL{fakeTL: fakeTL{name: "c"}}
	c.h.AddUpstream("c", Fence{TL: a, Ticket: 2}, 5) // c#5.. wait for a#2
	own := errors.New("own error")
	c.h.Fail(8, own)
	cause := errors.New("fault")
	a.h.Fail(1, cause)
	require.NoError(t, c.h.Failed(4))
	require.ErrorIs(t, c.h.Failed(5), cause)
	require.ErrorIs(t, c.h.Failed(9), cause)
}

// Timelines wait on the device for each other both ways (task A's queue
// for task B's stream and the other way round), and each may be broken
// from some ticket on by an error of its own: asking either one ends, and
// finds each failure the waits imply.
func TestFailedEndsOnTimelinesWaitingForEachOther(t *testing.T) {
	a := &healthTL{fakeTL: fakeTL{name: "a"}}
	b := &healthTL{fakeTL: fakeTL{name: "b"}}
	a.h.AddUpstream("a", Fence{TL: b, Ticket: 7}, 3)  // a#3.. wait for b#7
	b.h.AddUpstream("b", Fence{TL: a, Ticket: 10}, 5) // b#5.. wait for a#10
	errA, errB := errors.New("a's own"), errors.New("b's own")
	a.h.Fail(9, errA)
	b.h.Fail(8, errB)
	// b#5.. waited for a#10, which failed: b fails from 5 with a's error;
	// then a#3.. waited for b#7, which failed: a fails from 3 with it.
	require.ErrorIs(t, b.h.Failed(5), errA)
	require.NoError(t, b.h.Failed(4))
	require.ErrorIs(t, a.h.Failed(3), errA)
	require.NoError(t, a.h.Failed(2))
}

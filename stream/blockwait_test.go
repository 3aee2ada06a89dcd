package stream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// countingAPI counts the queries a Stream makes, and reports on blocked
// (when set) each blocking call it enters.
type countingAPI struct {
	stream.API
	queries atomic.Int64
	blocked chan struct{}
}

func (c *countingAPI) EventQuery(ev uintptr) (bool, error) {
	c.queries.Add(1)
	return c.API.EventQuery(ev)
}

func (c *countingAPI) StreamQuery(s uintptr) (bool, error) {
	c.queries.Add(1)
	return c.API.StreamQuery(s)
}

func (c *countingAPI) EventSynchronize(ev uintptr) error {
	c.enterBlocking()
	return c.API.EventSynchronize(ev)
}

func (c *countingAPI) StreamSynchronize(s uintptr) error {
	c.enterBlocking()
	return c.API.StreamSynchronize(s)
}

func (c *countingAPI) enterBlocking() {
	if c.blocked != nil {
		select {
		case c.blocked <- struct{}{}:
		default:
		}
	}
}

// gate is an op that holds a stream until open: the stream waits for a
// word of signal memory that another stream then writes.
type gate struct {
	m    *emu.Machine
	word unsafe.Pointer
	hs   hip.Stream
}

func newGate(t *testing.T, m *emu.Machine) *gate {
	p, err := m.HIP().ExtMalloc(0, 8, hip.MallocSignalMemory)
	require.NoError(t, err)
	hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	// The emulator's signal memory is a Go object: reinterpret the
	// address's bits, as the binding's callers hold it, without the
	// conversion checkptr refuses for an address it did not see made.
	return &gate{m: m, word: *(*unsafe.Pointer)(unsafe.Pointer(&p)), hs: hs}
}

// hold puts on s an op that waits until open.
func (g *gate) hold(t *testing.T, s *stream.Stream) uint64 {
	ticket, err := s.Submit(func(hs uintptr) error {
		return g.m.HIP().StreamWaitValue64(hip.Stream(hs), g.word, 1, hip.StreamWaitValueGte, ^uint64(0))
	})
	require.NoError(t, err)
	return ticket
}

func (g *gate) open(t *testing.T) {
	require.NoError(t, g.m.HIP().StreamWriteValue64(g.hs, g.word, 1, 0))
}

func newBoundedStream(t *testing.T, m *emu.Machine, api stream.API, timeout time.Duration) *stream.Stream {
	hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	s := stream.New(api, uintptr(hs), stream.Config{Name: "bounded", Events: stream.NewEventPool(api),
		Domain: syncstate.DomainLibrary, WaitTimeout: timeout})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A bounded wait (WaitTimeout set) queries for spinFor, then blocks in
// the runtime instead of polling: once it has entered the blocking call
// (hipStreamSynchronize for the whole stream, hipEventSynchronize for an
// older ticket), it asks the runtime nothing more until the work
// completes. The gate opens only after the wait has blocked, so the test
// depends on no timing: the polling waits never entered a blocking call,
// and queried every 100µs at most until the gate opened.
func TestBoundedWaitDoesNotPoll(t *testing.T) {
	m := emu.New(emu.Options{Hazards: true})
	api := &countingAPI{API: stream.HIP(m.HIP(), 0), blocked: make(chan struct{}, 1)}
	s := newBoundedStream(t, m, api, time.Minute)
	buf, err := m.HIP().Malloc(0, 64)
	require.NoError(t, err)

	for _, whole := range []bool{true, false} {
		g := newGate(t, m)
		held := g.hold(t, s)
		if !whole {
			memset(t, m, s, buf, 1) // the wait for held is then an event's
		}
		select {
		case <-api.blocked: // the last iteration's Drain
		default:
		}
		var blocked atomic.Bool
		var atBlock atomic.Int64
		var opened atomic.Bool
		go func() {
			// A wait that never blocks would hang on the gate: open it
			// after a bound that only a failing wait reaches.
			select {
			case <-api.blocked:
				blocked.Store(true)
			case <-time.After(20 * time.Second):
			}
			atBlock.Store(api.queries.Load())
			opened.Store(true)
			g.open(t)
		}()
		require.NoError(t, s.WaitHost(held))
		require.True(t, opened.Load(), "whole stream %v: the wait returned before the gate opened", whole)
		require.True(t, blocked.Load(), "whole stream %v: the wait never entered a blocking call (queried %d times)", whole, api.queries.Load())
		require.LessOrEqual(t, api.queries.Load()-atBlock.Load(), int64(1),
			"whole stream %v: queried %d times after blocking", whole, api.queries.Load()-atBlock.Load())
		require.NoError(t, s.Drain())
	}
}

// A bounded wait that times out, or is cancelled, returns in time and
// leaves the work running; waits after it, while the abandoned call is
// still blocked in the runtime, are bounded by their own timers; and once
// the work completes, a wait sees it at once.
func TestBoundedWaitBehindAbandoned(t *testing.T) {
	m := emu.New(emu.Options{Hazards: true})
	s := newBoundedStream(t, m, stream.HIP(m.HIP(), 0), 40*time.Millisecond)
	g := newGate(t, m)
	held := g.hold(t, s)

	for i := 0; i < 3; i++ {
		start := time.Now()
		err := s.WaitHost(held)
		require.ErrorIs(t, err, syncstate.ErrWaitTimeout)
		require.Less(t, time.Since(start), 2*time.Second)
	}
	require.Less(t, s.Completed(), held, "the work is still running")

	// A cancelled wait ends with its context, also behind an abandoned
	// call: on a stream whose own timeout (a minute) no cancellation
	// races, the first wait abandons its blocking call and the second
	// waits behind it.
	c := newBoundedStream(t, m, stream.HIP(m.HIP(), 0), time.Minute)
	gc := newGate(t, m)
	heldC := gc.hold(t, c)
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Millisecond, cancel)
		require.ErrorIs(t, c.WaitHostContext(ctx, heldC), context.Canceled)
	}
	require.Less(t, c.Completed(), heldC, "the work is still running")
	gc.open(t)
	require.NoError(t, c.WaitHost(heldC))

	g.open(t)
	require.NoError(t, s.WaitHost(held))
	require.Equal(t, held, s.Completed())
	require.NoError(t, s.WaitHost(memset(t, m, s, mustMalloc(t, m), 1)))
}

// More abandoned calls than a stream keeps in flight: later waits poll,
// still bounded, and everything completes once the work does.
func TestBoundedWaitManyAbandoned(t *testing.T) {
	m := emu.New(emu.Options{Hazards: true})
	s := newBoundedStream(t, m, stream.HIP(m.HIP(), 0), 5*time.Millisecond)
	g := newGate(t, m)
	held := g.hold(t, s)
	for i := 0; i < 10; i++ {
		require.ErrorIs(t, s.WaitHost(held), syncstate.ErrWaitTimeout)
	}
	g.open(t)
	require.Eventually(t, func() bool { return s.WaitHost(held) == nil }, 5*time.Second, time.Millisecond)
}

func mustMalloc(t *testing.T, m *emu.Machine) hip.DevicePtr {
	p, err := m.HIP().Malloc(0, 64)
	require.NoError(t, err)
	return p
}

// A stream that fails while a bounded wait is blocked in the runtime
// releases the wait with its error, and so does the failure of a
// producer the stream waited for on the device, even while the stream's
// own work stays blocked (the waiter asks the producer).
func TestBoundedWaitReleasedByFailure(t *testing.T) {
	m := emu.New(emu.Options{Hazards: true})
	var armed atomic.Bool
	m.SetFaultInjector(func(op string) bool { return op == "hipMemsetAsync" && armed.Swap(false) })
	api := stream.HIP(m.HIP(), 0)
	pool := stream.NewEventPool(api)
	mk := func(name string) *stream.Stream {
		hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, err)
		s := stream.New(api, uintptr(hs), stream.Config{Name: name, Events: pool, Domain: syncstate.DomainLibrary, WaitTimeout: time.Minute})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	buf := mustMalloc(t, m)

	// Its own fault: the blocking call returns it.
	s := mk("own")
	g := newGate(t, m)
	g.hold(t, s)
	armed.Store(true)
	last := memset(t, m, s, buf, 1)
	time.AfterFunc(10*time.Millisecond, func() { g.open(t) })
	done := make(chan error, 1)
	go func() { done <- s.WaitHost(last) }()
	select {
	case err := <-done:
		require.Error(t, err)
		require.False(t, errors.Is(err, syncstate.ErrWaitTimeout))
	case <-time.After(10 * time.Second):
		t.Fatal("the wait hangs on a failed stream")
	}

	// A producer's fault, while the consumer's own work never completes.
	p, c := mk("producer"), mk("consumer")
	armed.Store(true)
	tp := memset(t, m, p, buf, 2)
	require.NoError(t, c.WaitDevice([]syncstate.Fence{{TL: p, Ticket: tp}}))
	stuck := newGate(t, m)
	tc := stuck.hold(t, c)
	go func() { done <- c.WaitHost(tc) }()
	select {
	case err := <-done:
		// The emulator's HIP, like HIP, may report the producer's
		// launch failure on the consumer's stream too; either way the
		// wait ends with the failure, not a timeout.
		require.Error(t, err)
		require.False(t, errors.Is(err, syncstate.ErrWaitTimeout))
	case <-time.After(10 * time.Second):
		t.Fatal("the wait hangs behind a failed producer")
	}
	stuck.open(t) // let the helper's call return
}

// A bounded wait allocates nothing beyond what the op and an unbounded
// wait do.
func TestBoundedWaitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	m := emu.New(emu.Options{})
	buf := mustMalloc(t, m)
	measure := func(timeout time.Duration, older bool) float64 {
		s := newBoundedStream(t, m, stream.HIP(m.HIP(), 0), timeout)
		op := func(hs uintptr) error { return m.HIP().MemsetAsync(buf, 1, 64, hip.Stream(hs)) }
		// The first error is kept, not dropped: a submit or wait that
		// fails early would allocate the same in both modes and pass.
		var firstErr error
		keep := func(err error) {
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
		run := func() {
			t1, err := s.Submit(op)
			keep(err)
			if older {
				_, err = s.Submit(op)
				keep(err)
			}
			keep(s.WaitHost(t1))
		}
		for i := 0; i < 100; i++ {
			run()
		}
		allocs := testing.AllocsPerRun(200, run)
		require.NoError(t, firstErr, "timeout %v, event wait %v", timeout, older)
		return allocs
	}
	for _, older := range []bool{false, true} {
		unbounded, bounded := measure(0, older), measure(time.Minute, older)
		t.Logf("event wait %v: allocations per op and wait: %v unbounded, %v bounded", older, unbounded, bounded)
		require.Equal(t, unbounded, bounded, "event wait %v", older)
	}
}

// BenchmarkStreamWait: an op, then a host wait for it (the whole stream)
// or for the op before it (an event), unbounded (the runtime's blocking
// call on the caller's goroutine) and bounded (WaitTimeout: a helper's
// blocking call).
func BenchmarkStreamWait(b *testing.B) {
	for _, c := range []struct {
		name    string
		timeout time.Duration
		older   bool
	}{{"Unbounded", 0, false}, {"Bounded", time.Minute, false}, {"UnboundedEvent", 0, true}, {"BoundedEvent", time.Minute, true}} {
		b.Run(c.name, func(b *testing.B) {
			m := emu.New(emu.Options{})
			api := stream.HIP(m.HIP(), 0)
			hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
			if err != nil {
				b.Fatal(err)
			}
			s := stream.New(api, uintptr(hs), stream.Config{Name: "bench", Events: stream.NewEventPool(api),
				Domain: syncstate.DomainLibrary, WaitTimeout: c.timeout})
			defer s.Close()
			buf, _ := m.HIP().Malloc(0, 64)
			op := func(hs uintptr) error { return m.HIP().MemsetAsync(buf, 1, 64, hip.Stream(hs)) }
			b.ReportAllocs()
			for b.Loop() {
				t, _ := s.Submit(op)
				if c.older {
					_, _ = s.Submit(op)
				}
				if err := s.WaitHost(t); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Close while helpers are still blocked in abandoned calls (a stream
// synchronize and an event's) returns without waiting for them, and the
// stream is destroyed once the call on it returns, not under it.
func TestCloseWithAbandonedCalls(t *testing.T) {
	m := emu.New(emu.Options{Hazards: true})
	api := stream.HIP(m.HIP(), 0)
	hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	s := stream.New(api, uintptr(hs), stream.Config{Name: "closing", Events: stream.NewEventPool(api),
		Domain: syncstate.DomainLibrary, WaitTimeout: 20 * time.Millisecond})
	g := newGate(t, m)
	held := g.hold(t, s)
	require.ErrorIs(t, s.WaitHost(held), syncstate.ErrWaitTimeout) // the whole stream
	memset(t, m, s, mustMalloc(t, m), 1)
	require.ErrorIs(t, s.WaitHost(held), syncstate.ErrWaitTimeout) // an event

	start := time.Now()
	require.ErrorIs(t, s.Close(), syncstate.ErrWaitTimeout)
	require.Less(t, time.Since(start), 5*time.Second)
	code := func() hip.ErrorCode {
		var he *hip.Error
		if errors.As(m.HIP().StreamQuery(hs), &he) {
			return he.Code
		}
		return 0
	}
	require.Equal(t, hip.ErrorNotReady, code(), "not destroyed under the helper's call")
	g.open(t)
	require.Eventually(t, func() bool { return code() == hip.ErrorInvalidHandle }, 5*time.Second, time.Millisecond,
		"destroyed once the helper's call returned")
}

// A bounded wait whose context is already done stops spinning at its
// first check (every fourth query) and returns the context's error, rather
// than spinning out the whole spinFor first.
func TestBoundedWaitSpinEndsWithItsBound(t *testing.T) {
	m := emu.New(emu.Options{Hazards: true})
	api := &countingAPI{API: stream.HIP(m.HIP(), 0), blocked: make(chan struct{}, 1)}
	s := newBoundedStream(t, m, api, time.Minute)
	g := newGate(t, m)
	held := g.hold(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := api.queries.Load()
	err := s.WaitHostContext(ctx, held)
	queries := api.queries.Load() - before
	g.open(t) // before any assertion: the stream's Close waits for the work
	require.ErrorIs(t, err, context.Canceled)
	require.LessOrEqual(t, queries, int64(4), "queries after the context was done")
	require.NoError(t, s.WaitHost(held))
}

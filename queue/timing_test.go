//go:build !rocsync_notrace

package queue_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

type span struct{ start, end time.Time }

// Every dispatch submitted with timing on is reported once, as it
// retires, with device times inside its submission and its completion as
// the host saw them; dispatches on the in-order queue do not overlap, and
// barrier packets are not reported. The ring (64) is smaller than the
// dispatches (300), so completion signals are recycled: a time read after
// its signal went back to the pool would belong to another packet and
// break the ordering checks.
func TestTimingReportsEveryDispatch(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true, MaxDelay: 30 * time.Microsecond, Seed: 5})
	q := r.queue(t, "timed", 64)
	other := r.queue(t, "other", 64)
	var mu sync.Mutex
	got := map[uint64]span{}
	require.NoError(t, q.EnableTiming(func(ticket uint64, start, end time.Time) {
		mu.Lock()
		defer mu.Unlock()
		_, dup := got[ticket]
		require.False(t, dup, "ticket %d reported twice", ticket)
		got[ticket] = span{start, end}
	}))
	require.Error(t, q.EnableTiming(func(uint64, time.Time, time.Time) {}), "enabled twice")
	buf, _ := r.m.HIP().Malloc(0, 64)
	buf2, _ := r.m.HIP().Malloc(0, 64)
	submitted := map[uint64]time.Time{}
	var dispatches []uint64
	for i := 0; i < 300; i++ {
		if i%7 == 0 {
			f := syncstate.Fence{TL: other, Ticket: r.fillDispatch(t, other, uint64(buf2), 1)}
			require.NoError(t, q.WaitDevice([]syncstate.Fence{f})) // a barrier-AND: not timed
		}
		before := time.Now()
		ticket := r.fillDispatch(t, q, uint64(buf), float64(i))
		submitted[ticket] = before
		dispatches = append(dispatches, ticket)
	}
	require.NoError(t, q.Drain())
	done := time.Now()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, len(dispatches), "one report per dispatch")
	require.Zero(t, q.TimingLost())
	var prev span
	for _, ticket := range dispatches {
		s, ok := got[ticket]
		require.True(t, ok, "dispatch %d not reported", ticket)
		// The emulated clock ticks at 100 MHz: a reading is up to 10 ns
		// before the moment it was taken.
		const tick = 10 * time.Nanosecond
		require.False(t, s.start.Add(tick).Before(submitted[ticket]), "dispatch %d started before it was submitted", ticket)
		require.False(t, s.end.Before(s.start), "dispatch %d ends before it starts", ticket)
		require.False(t, s.end.After(done), "dispatch %d ends after the drain returned", ticket)
		require.False(t, s.start.Add(tick).Before(prev.end), "dispatch %d overlaps the one before it on the in-order queue", ticket)
		prev = s
	}
	require.Empty(t, r.m.Hazards())
}

// A runtime without dispatch profiling refuses timing with ErrNoProfiling.
func TestTimingNeedsProfiling(t *testing.T) {
	r := newRig(t, emu.Options{})
	agents, _ := r.rt.Agents()
	pools, _ := r.rt.MemoryPools(agents[0])
	q, err := queue.New(noProfiler{r.rt}, queue.Config{Name: "q", Agent: agents[1], Size: 64, KernargPool: pools[0],
		Signals: r.signals, Sinks: syncstate.Sinks{&r.stats}})
	require.NoError(t, err)
	defer q.Close()
	require.ErrorIs(t, q.EnableTiming(func(uint64, time.Time, time.Time) {}), queue.ErrNoProfiling)
}

// noProfiler hides the runtime's profiling calls.
type noProfiler struct{ hsa.Runtime }

func TestSystemClockAt(t *testing.T) {
	h := time.Now()
	c := queue.SystemClock{Ticks: 1000, Host: h, Frequency: 100_000_000}
	require.Equal(t, h.Add(10*time.Microsecond), c.At(2000))
	require.Equal(t, h.Add(-5*time.Microsecond), c.At(500))
	g := queue.SystemClock{Ticks: 0, Host: h, Frequency: 1_000_000_000}
	require.Equal(t, h.Add(100*time.Hour+7), g.At(uint64(100*time.Hour)+7), "no overflow over long runs")
}

// A replayed recording's packets are timed each on its own: every ticket
// of the replay is reported once, with times of its own packet, in queue
// order and not overlapping. A replay that shared one completion signal
// among its packets (the last one's) would report the last kernel's times
// for every kernel.
func TestReplayTimesEachPacket(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true, MaxDelay: 300 * time.Microsecond, Seed: 9})
	q := r.queue(t, "timed", 64)
	var mu sync.Mutex
	got := map[uint64]span{}
	require.NoError(t, q.EnableTiming(func(ticket uint64, start, end time.Time) {
		mu.Lock()
		defer mu.Unlock()
		_, dup := got[ticket]
		require.False(t, dup, "ticket %d reported twice", ticket)
		got[ticket] = span{start, end}
	}))
	buf, _ := r.m.HIP().Malloc(0, 64)
	var ds []queue.Dispatch
	for i := 0; i < 4; i++ {
		ds = append(ds, r.fillOf(uint64(buf), float64(i)))
	}
	rec, err := q.NewRecording(ds)
	require.NoError(t, err)
	defer rec.Release()
	var tickets []uint64
	for rep := 0; rep < 3; rep++ {
		last, err := q.Replay(rec)
		require.NoError(t, err)
		for k := uint64(len(ds)) - 1; ; k-- {
			tickets = append(tickets, last-k)
			if k == 0 {
				break
			}
		}
	}
	require.NoError(t, q.Drain())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, len(tickets), "one report per replayed packet")
	const tick = 10 * time.Nanosecond // the emulated clock's
	var prev span
	for i, ticket := range tickets {
		s, ok := got[ticket]
		require.True(t, ok, "ticket %d not reported", ticket)
		require.False(t, s.end.Before(s.start))
		if i > 0 {
			require.False(t, s.start.Add(tick).Before(prev.end), "ticket %d starts before ticket %d ended: another packet's times", ticket, tickets[i-1])
		}
		prev = s
	}
	require.Empty(t, r.m.Hazards())
}

//go:build !rocsync_notrace

package stream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// Every op submitted with timing on is reported once, with device times
// after its submission (times are never early), in order and without
// overlap on the in-order stream; timing events are not the pool's
// DisableTiming events.
func TestTimingReportsEveryOp(t *testing.T) {
	m := emu.New(emu.Options{Hazards: true, MaxDelay: 30 * time.Microsecond, Seed: 9})
	var stats syncstate.Stats
	api := stream.HIP(m.HIP(), 0)
	pool := stream.NewEventPool(api)
	hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	s := stream.New(api, uintptr(hs), stream.Config{Name: "s", Events: pool, Sinks: syncstate.Sinks{&stats},
		Domain: syncstate.DomainLibrary, MaxInFlight: 16})
	type span struct{ start, end time.Time }
	got := map[uint64]span{}
	require.NoError(t, s.EnableTiming(func(ticket uint64, start, end time.Time) {
		_, dup := got[ticket]
		require.False(t, dup, "ticket %d reported twice", ticket)
		got[ticket] = span{start, end}
	}))
	require.Error(t, s.EnableTiming(func(uint64, time.Time, time.Time) {}), "enabled twice")
	p, _ := m.HIP().Malloc(0, 64)
	submitted := map[uint64]time.Time{}
	var tickets []uint64
	for i := 0; i < 100; i++ {
		before := time.Now()
		ticket := memset(t, m, s, p, byte(i))
		submitted[ticket] = before
		tickets = append(tickets, ticket)
		if i == 50 {
			s.Completed() // a poll reports what is done so far
		}
	}
	// A failed enqueue is not an op: nothing is reported for it.
	_, err = s.Submit(func(uintptr) error { return errors.New("refused") })
	require.Error(t, err)
	require.NoError(t, s.Close())
	require.Zero(t, s.TimingLost())
	require.Len(t, got, len(tickets))
	var prev span
	for _, ticket := range tickets {
		sp, ok := got[ticket]
		require.True(t, ok, "op %d not reported", ticket)
		require.False(t, sp.start.Before(submitted[ticket]), "op %d started before it was submitted", ticket)
		require.False(t, sp.end.Before(sp.start), "op %d ends before it starts", ticket)
		require.False(t, sp.start.Before(prev.end), "op %d overlaps the op before it on the in-order stream", ticket)
		prev = sp
	}
	require.Empty(t, m.Hazards())
}

// As HIP does, the emulator refuses hipEventElapsedTime on events made
// with hipEventDisableTiming (the stream pool's), never recorded, or not
// yet reached.
func TestEmulatorEventElapsedTimeRules(t *testing.T) {
	m := emu.New(emu.Options{MaxDelay: time.Millisecond, Seed: 1})
	h := m.HIP()
	s, err := h.StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	defer h.StreamDestroy(s)
	timed, _ := h.EventCreate(0, 0)
	timed2, _ := h.EventCreate(0, 0)
	untimed, _ := h.EventCreate(0, hip.EventDisableTiming)
	_, err = h.EventElapsedTime(timed, timed2)
	require.True(t, errors.Is(err, &hip.Error{Code: hip.ErrorInvalidHandle}), "never recorded: %v", err)
	require.NoError(t, h.EventRecord(timed, s))
	require.NoError(t, h.EventRecord(untimed, s))
	require.NoError(t, h.EventSynchronize(untimed))
	_, err = h.EventElapsedTime(timed, untimed)
	require.True(t, errors.Is(err, &hip.Error{Code: hip.ErrorInvalidHandle}), "DisableTiming: %v", err)
	p, _ := h.Malloc(0, 64)
	for i := 0; i < 20; i++ {
		require.NoError(t, h.MemsetAsync(p, 1, 64, s))
	}
	require.NoError(t, h.EventRecord(timed2, s))
	_, err = h.EventElapsedTime(timed, timed2)
	require.True(t, errors.Is(err, &hip.Error{Code: hip.ErrorNotReady}), "not reached: %v", err)
	require.NoError(t, h.EventSynchronize(timed2))
	ms, err := h.EventElapsedTime(timed, timed2)
	require.NoError(t, err)
	require.Greater(t, ms, float32(0))
	back, err := h.EventElapsedTime(timed2, timed)
	require.NoError(t, err)
	require.Equal(t, -ms, back)
}

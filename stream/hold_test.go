package stream_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// A held op takes its ticket at Release, and what the stream records for
// others (here the throttle's mark after every op) is recorded then,
// behind the op's work, not at Hold. A release of nothing changes
// nothing.
func TestHoldTakesTheTicketAtRelease(t *testing.T) {
	m, _, _, _ := newStreams(t, 0)
	var stats syncstate.Stats
	api := stream.HIP(m.HIP(), 0)
	hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	s := stream.New(api, uintptr(hs), stream.Config{Name: "s", Events: stream.NewEventPool(api), Sinks: syncstate.Sinks{&stats},
		Domain: syncstate.DomainLibrary, MaxInFlight: 4})
	defer s.Close()
	p, _ := m.HIP().Malloc(0, 64)

	h, err := s.Hold()
	require.NoError(t, err)
	require.Equal(t, uintptr(hs), h.Handle())
	require.Zero(t, s.Release(h, false))
	require.Zero(t, s.LastTicket())
	require.Zero(t, stats.Snapshot().EventsRecorded)

	require.NoError(t, s.Throttle())
	h, err = s.Hold()
	require.NoError(t, err)
	require.NoError(t, m.HIP().MemsetAsync(p, 7, 64, hip.Stream(h.Handle())))
	require.Zero(t, stats.Snapshot().EventsRecorded, "nothing recorded while held")
	require.EqualValues(t, 1, s.Release(h, true))
	require.EqualValues(t, 1, stats.Snapshot().EventsRecorded, "the mark, after the held op")
	require.NoError(t, s.WaitHost(1))
	out := make([]byte, 64)
	require.NoError(t, m.HIP().MemcpyDtoH(0, ptr(out), p, 64))
	require.Equal(t, byte(7), out[0])
	require.Empty(t, m.Hazards())

	require.NoError(t, s.Close())
	_, err = s.Hold()
	require.ErrorIs(t, err, stream.ErrClosed)
}

// An enqueue that panics leaves the stream free: the next op submits.
func TestSubmitPanicReleasesTheStream(t *testing.T) {
	m, _, _, ss := newStreams(t, 1)
	s := ss[0]
	p, _ := m.HIP().Malloc(0, 64)
	require.Panics(t, func() { _, _ = s.Submit(func(uintptr) error { panic("enqueue") }) })
	require.Zero(t, s.LastTicket())
	require.EqualValues(t, 1, memset(t, m, s, p, 1))
}

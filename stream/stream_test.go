package stream_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

func newStreams(t *testing.T, n int) (*emu.Machine, *stream.EventPool, *syncstate.Stats, []*stream.Stream) {
	m := emu.New(emu.Options{Hazards: true})
	var stats syncstate.Stats
	api := stream.HIP(m.HIP(), 0)
	pool := stream.NewEventPool(api)
	var out []*stream.Stream
	for i := 0; i < n; i++ {
		hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, err)
		s := stream.New(api, uintptr(hs), stream.Config{Name: "s", Events: pool, Sinks: syncstate.Sinks{&stats}, Domain: syncstate.DomainLibrary})
		t.Cleanup(func() { _ = s.Close() })
		out = append(out, s)
	}
	return m, pool, &stats, out
}

func memset(t *testing.T, m *emu.Machine, s *stream.Stream, p hip.DevicePtr, v byte) uint64 {
	ticket, err := s.Submit(func(hs uintptr) error { return m.HIP().MemsetAsync(p, v, 64, hip.Stream(hs)) })
	require.NoError(t, err)
	return ticket
}

// A run of ops on one stream records no event; the host's wait records one.
func TestEventsAreRecordedOnlyWhenNeeded(t *testing.T) {
	m, pool, stats, ss := newStreams(t, 1)
	s := ss[0]
	p, _ := m.HIP().Malloc(0, 64)
	var last uint64
	for i := 0; i < 10; i++ {
		last = memset(t, m, s, p, byte(i))
	}
	require.Zero(t, stats.Snapshot().EventsRecorded)
	// Waiting for an older op records one event after it.
	require.NoError(t, s.WaitHost(last-1))
	require.EqualValues(t, 1, stats.Snapshot().EventsRecorded)
	// Waiting for the newest op synchronizes the stream: no event.
	require.NoError(t, s.WaitHost(last))
	require.EqualValues(t, 1, stats.Snapshot().EventsRecorded)
	require.Equal(t, last, s.Completed())
	// A wait for a completed ticket records nothing.
	require.NoError(t, s.WaitHost(last))
	require.EqualValues(t, 1, stats.Snapshot().EventsRecorded)
	require.EqualValues(t, 1, pool.Created())
}

// A device-side wait orders the consumer stream after the producer; the
// hazard checker would report the conflicting writes otherwise.
func TestWaitDeviceOrdersStreams(t *testing.T) {
	m, _, _, ss := newStreams(t, 2)
	a, b := ss[0], ss[1]
	p, _ := m.HIP().Malloc(0, 64)
	release := m.Hold()
	ta := memset(t, m, a, p, 1)
	require.NoError(t, b.WaitDevice([]syncstate.Fence{{TL: a, Ticket: ta}}))
	tb := memset(t, m, b, p, 2)
	release()
	require.NoError(t, b.WaitHost(tb))
	require.Empty(t, m.Hazards())
	out := make([]byte, 64)
	require.NoError(t, m.HIP().MemcpyDtoH(0, ptr(out), p, 64))
	require.Equal(t, byte(2), out[0])
}

func TestWithoutWaitTheCheckerFires(t *testing.T) {
	m, _, _, ss := newStreams(t, 2)
	a, b := ss[0], ss[1]
	p, _ := m.HIP().Malloc(0, 64)
	memset(t, m, a, p, 1)
	m.Quiesce()
	tb := memset(t, m, b, p, 2)
	require.NoError(t, b.WaitHost(tb))
	require.NotEmpty(t, m.Hazards())
}

func TestAfterCompleteRunsOnceDone(t *testing.T) {
	m, _, _, ss := newStreams(t, 1)
	s := ss[0]
	p, _ := m.HIP().Malloc(0, 64)
	release := m.Hold()
	ticket := memset(t, m, s, p, 1)
	ran := false
	s.AfterComplete(ticket, func() { ran = true })
	s.Completed()
	require.False(t, ran)
	release()
	require.NoError(t, s.WaitHost(ticket))
	require.True(t, ran)
}

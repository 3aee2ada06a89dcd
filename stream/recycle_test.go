package stream_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// failingQueryAPI fails the query of one event, the one armed.
type failingQueryAPI struct {
	stream.API
	lastRecorded atomic.Uintptr
	failing      atomic.Uintptr
}

func (f *failingQueryAPI) EventRecord(ev, s uintptr) error {
	f.lastRecorded.Store(ev)
	return f.API.EventRecord(ev, s)
}

// StreamQuery says "not done" while an event is armed, so that a poll
// walks the marks.
func (f *failingQueryAPI) StreamQuery(hs uintptr) (bool, error) {
	if f.failing.Load() != 0 {
		return false, nil
	}
	return f.API.StreamQuery(hs)
}

func (f *failingQueryAPI) EventQuery(ev uintptr) (bool, error) {
	if ev != 0 && ev == f.failing.Load() {
		return false, errors.New("query failed")
	}
	return f.API.EventQuery(ev)
}

// A poll that learns an older mark completed and then that a newer one's
// query failed: the failure, which settles the stream and recycles its
// marks, must not run inside the poll's own walk over them (it compacted
// them under the walk, and the walk then cut a slice past their end).
func TestPollSurvivesAFailedQueryAfterACompletedMark(t *testing.T) {
	m := emu.New(emu.Options{})
	api := &failingQueryAPI{API: stream.HIP(m.HIP(), 0)}
	pool := stream.NewEventPool(api)
	hs, err := m.HIP().StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	var stats syncstate.Stats
	s := stream.New(api, uintptr(hs), stream.Config{Name: "s", Events: pool, Sinks: syncstate.Sinks{&stats}, Domain: syncstate.DomainLibrary})
	t.Cleanup(func() { _ = s.Close() })
	buf, err := m.HIP().Malloc(0, 64)
	require.NoError(t, err)

	t1 := memset(t, m, s, buf, 1)
	unpin1, err := s.Pin(t1) // mark 1, held so that the next pin records its own
	require.NoError(t, err)
	t2 := memset(t, m, s, buf, 2)
	unpin2, err := s.Pin(t2) // mark 2
	require.NoError(t, err)
	unpin1()
	unpin2()
	require.NoError(t, m.HIP().StreamSynchronize(hip.Stream(hs)))
	api.failing.Store(api.lastRecorded.Load())

	require.NotPanics(t, func() { s.Poll() })
	require.Error(t, s.Failed(t2), "the failed query fails the ticket after the completed mark")
	require.NoError(t, s.Failed(t1), "the completed mark's ticket stays complete")
}

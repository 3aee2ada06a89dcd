package stream_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// failedQueue is a producer of another domain whose ticket 1 completed and
// failed (a broken HSA queue's packet, released).
type failedQueue struct{ err error }

func (f *failedQueue) Domain() syncstate.Domain            { return syncstate.DomainKernel }
func (f *failedQueue) Name() string                        { return "failed-queue" }
func (f *failedQueue) LastTicket() uint64                  { return 1 }
func (f *failedQueue) Completed() uint64                   { return 1 }
func (f *failedQueue) WaitHost(uint64) error               { return f.err }
func (f *failedQueue) CanWaitDevice(syncstate.Domain) bool { return false }
func (f *failedQueue) WaitDevice([]syncstate.Fence) error  { return nil }
func (f *failedQueue) Failed(uint64) error                 { return f.err }

// A bridged wait for a failed fence fails the ops from the wait on, and
// not an op that went on the stream before it. Here another goroutine's op
// (a bridge's write for an HSA queue under DeviceBridge) goes on the
// stream while the consumer bridges its wait. The record used to name the
// ticket the stream would have given next when the wait began, which was
// that op's: it failed with a producer it never waited for, and its record
// was pruned once it completed, while the wait still waited.
func TestBridgedWaitRecordNamesTheWait(t *testing.T) {
	m, _, _, ss := newStreams(t, 1)
	s := ss[0]
	p, err := m.HIP().Malloc(0, 64)
	require.NoError(t, err)
	prod := &failedQueue{err: errors.New("the producer's fault")}

	var other, wait uint64
	s.SetBridge(func(s *stream.Stream, f syncstate.Fence) (uint64, error) {
		other = memset(t, m, s, p, 1) // another goroutine's op
		var err error
		wait, err = s.SubmitWait(f, func(hs uintptr) error { return m.HIP().MemsetAsync(p, 2, 64, hip.Stream(hs)) })
		return wait, err
	})
	require.NoError(t, s.WaitDevice([]syncstate.Fence{{TL: prod, Ticket: 1}}))
	require.Equal(t, other+1, wait)
	require.NoError(t, s.Failed(other), "the op before the wait does not depend on the producer")
	require.ErrorIs(t, s.Failed(wait), prod.err)
}

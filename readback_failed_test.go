package rocsync

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/syncstate"
)

// failedTimeline is a timeline whose every ticket is known failed but none
// yet complete: the Timeline contract allows it ("a failed ticket may
// still count as complete"), and a broken queue is in that state until it
// has flushed and completed its failed packets' signals.
type failedTimeline struct {
	err   error
	waits atomic.Int32
}

func (f *failedTimeline) Domain() syncstate.Domain            { return syncstate.DomainKernel }
func (f *failedTimeline) Name() string                        { return "failed-tl" }
func (f *failedTimeline) LastTicket() uint64                  { return 1 }
func (f *failedTimeline) Completed() uint64                   { return 0 }
func (f *failedTimeline) CanWaitDevice(syncstate.Domain) bool { return false }
func (f *failedTimeline) WaitDevice([]syncstate.Fence) error  { return errors.New("no device waits") }
func (f *failedTimeline) Failed(uint64) error                 { return f.err }
func (f *failedTimeline) WaitHost(uint64) error               { f.waits.Add(1); return f.err }

// A read-back of an array whose writer is known to have failed reports
// what Err reports, the failed writer, without waiting for it: whether the
// failed ticket already counts as complete must not change the error
// (TestReplayGroupFaultAsUngrouped failed under load when it did not).
func TestReadBackOfAKnownFailedWriterIsItsErr(t *testing.T) {
	d := openFaulty(t, DeviceSide)
	defer func() { require.NoError(t, d.Close()) }()
	a, err := d.FromFloat32(2, 2, []float32{5, 6, 7, 8})
	require.NoError(t, err)
	tl := &failedTimeline{err: errors.New("injected queue error")}
	var op syncstate.Op
	op.Name = "FailedWriter"
	op.Write(&a.st)
	require.NoError(t, op.Begin(&syncstate.Engine{}, tl, syncstate.Sinks{}))
	require.NoError(t, op.Commit(1, syncstate.Sinks{}))

	errErr := a.Err()
	require.ErrorIs(t, errErr, ErrFault)
	_, readErr := a.Float32s()
	require.ErrorIs(t, readErr, ErrFault)
	require.Zero(t, tl.waits.Load(), "the read-back waited for a writer known to have failed")
	var dep *syncstate.DependencyError
	require.ErrorAs(t, readErr, &dep, "%v", readErr)
	require.Equal(t, "FailedWriter", dep.WriterOp)
	require.Equal(t, errErr.(*Error).Detail, readErr.(*Error).Detail)

	dst := []float32{1, 2, 3, 4}
	require.ErrorIs(t, a.CopyToFloat32(dst), ErrFault)
	require.Equal(t, []float32{1, 2, 3, 4}, dst, "nothing is copied")
	require.Zero(t, tl.waits.Load())
}

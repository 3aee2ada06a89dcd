package queue_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

// Once the queue has published its break, nothing submitted from then on
// can succeed: Failed says so for every future ticket at once, before the
// break has failed the packets in flight, so that a submission refused
// by the broken queue is a fault of the device, not an unavailable
// backend. A ticket that completed before the break stays sound.
func TestBrokenQueueFailsFutureTicketsAtOnce(t *testing.T) {
	_, q, done := filledQueue(t)
	require.NoError(t, q.WaitHost(done))

	q.PublishBreakOnly(errors.New("queue error"))
	require.Error(t, q.Failed(math.MaxUint64), "a ticket not yet submitted")
	require.Error(t, q.Failed(done+1), "the next ticket")
	require.NoError(t, q.Failed(done), "a ticket complete before the break")
}

// filledQueue is a queue on an emulated GPU with one fill submitted, done.
func filledQueue(t *testing.T) (*rig, *queue.Queue, uint64) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	buf, err := r.m.HIP().Malloc(0, 64)
	require.NoError(t, err)
	return r, q, r.fillDispatch(t, q, uint64(buf), 1)
}

// failedTL is a timeline of another domain whose ticket 1 has completed
// and failed (a broken stream that has settled).
type failedTL struct{ err error }

func (f *failedTL) Domain() syncstate.Domain            { return syncstate.DomainLibrary }
func (f *failedTL) Name() string                        { return "failed-stream" }
func (f *failedTL) LastTicket() uint64                  { return 1 }
func (f *failedTL) Completed() uint64                   { return 1 }
func (f *failedTL) WaitHost(uint64) error               { return f.err }
func (f *failedTL) CanWaitDevice(syncstate.Domain) bool { return false }
func (f *failedTL) WaitDevice([]syncstate.Fence) error  { return nil }
func (f *failedTL) Failed(t uint64) error               { return f.err }

// A fence can complete, failed, between the consumer's look at it and its
// device wait: the wait then needs no packet (its signal is done), but the
// work behind it would run on what the failed producer left, so it fails
// and the queue, broken, takes no more
// (found by the fault fuzzer: a kernel waited for a gemm whose stream had
// just failed and settled, and its output read back without an error,
// seed 38 under DeviceBridge).
func TestWaitDeviceForAFenceCompletedFailedBreaksTheQueue(t *testing.T) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	q.SetBridge(func(syncstate.Fence) (*queue.Signal, error) { return nil, nil }) // complete: nothing to wait for
	cause := errors.New("gemm fault")
	require.NoError(t, q.WaitDevice([]syncstate.Fence{{TL: &failedTL{err: cause}, Ticket: 1}}))
	require.ErrorIs(t, q.Failed(q.LastTicket()+1), cause, "the work behind the wait")
	require.ErrorIs(t, q.Err(), cause, "the queue takes no more work")
	require.NoError(t, q.Failed(q.LastTicket()), "the work before the wait")
}

// A wait for a ticket that completed before the queue broke succeeds,
// even when it had not yet seen the ticket's signal complete: a polling
// wait that slept across the ticket's completion and the next packet's
// fault, or a wait on a marker after the ticket that never ran. The queue
// runs its packets in order (every one has the barrier bit), and the break
// fails only the tickets from brokenFrom on. The wait returned the break
// instead, and an op that depended only on work before the fault failed
// (the fault fuzzer's seed 133, about 1 run in 20 under -race).
func TestWaitForATicketBeforeTheBreakSucceeds(t *testing.T) {
	r, q, done := filledQueue(t)
	var ka [kernels.KernargSize]byte
	bad, err := q.Dispatch(&queue.Dispatch{KernelObject: 0xbad, Grid: 1, Workgroup: 1, Kernarg: ka[:]})
	require.NoError(t, err)
	require.ErrorIs(t, q.WaitHost(bad), queue.ErrQueueBroken)
	// A signal that never completes: the one the wait had armed, which
	// it had not seen complete when the break was published.
	never := queue.Foreign(mustSignal(t, r.rt))
	require.NoError(t, q.WaitSignal(never, done), "the ticket before the fault succeeded")
	require.ErrorIs(t, q.WaitSignal(never, bad), queue.ErrQueueBroken)
	require.NoError(t, q.WaitHost(done))
}

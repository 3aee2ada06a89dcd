package queue_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/emu"
)

// Once the queue has published its break, nothing submitted from then on
// can succeed: Failed says so for every future ticket at once, before the
// break has failed the packets in flight, so that a submission refused
// by the broken queue is a fault of the device, not an unavailable
// backend. A ticket that completed before the break stays sound.
func TestBrokenQueueFailsFutureTicketsAtOnce(t *testing.T) {
	r := newRig(t, emu.Options{})
	q := r.queue(t, "q", 64)
	buf, err := r.m.HIP().Malloc(0, 64)
	require.NoError(t, err)
	done := r.fillDispatch(t, q, uint64(buf), 1)
	require.NoError(t, q.WaitHost(done))

	q.PublishBreakOnly(errors.New("queue error"))
	require.Error(t, q.Failed(math.MaxUint64), "a ticket not yet submitted")
	require.Error(t, q.Failed(done+1), "the next ticket")
	require.NoError(t, q.Failed(done), "a ticket complete before the break")
}

package stream_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/syncstate"
)

// A stream that learns it failed only through a producer it waited for
// on the device (the runtime never told it: nothing queried it, and
// Submit does not query) still settles once someone asks Completed, and
// its own runtime fault, earlier than the producer's failure reaches it,
// fails the tickets from there: reading what they wrote must not look
// sound.
func TestStreamFailedThroughProducerSettles(t *testing.T) {
	m, _, _, ss := newStreams(t, 2)
	p, c := ss[0], ss[1]
	var armed atomic.Bool
	m.SetFaultInjector(func(op string) bool { return op == "hipMemsetAsync" && armed.Swap(false) })
	buf, _ := m.HIP().Malloc(0, 64)

	memset(t, m, p, buf, 1)
	armed.Store(true)
	tp := memset(t, m, p, buf, 2) // faults on the device
	require.Eventually(t, func() bool { return !armed.Load() }, 5*time.Second, time.Millisecond)

	memset(t, m, c, buf, 3)
	armed.Store(true)
	tc := memset(t, m, c, buf, 4) // faults on the device, unknown to c
	require.Eventually(t, func() bool { return !armed.Load() }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.WaitDevice([]syncstate.Fence{{TL: p, Ticket: tp}}))
	memset(t, m, c, buf, 5)

	require.Error(t, p.WaitHost(tp), "the producer learns its fault")
	require.Error(t, c.Failed(c.LastTicket()), "the consumer fails behind the producer")
	require.Eventually(t, func() bool { return c.Completed() == c.LastTicket() }, 5*time.Second, time.Millisecond,
		"the consumer's failed tickets settle")
	require.Error(t, c.Failed(tc), "the consumer's own fault, before the wait, fails its ticket")
}

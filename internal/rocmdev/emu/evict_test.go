package emu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
)

// A VM fault evicts every queue of the process on the faulting GPU, as KFD
// does: a HIP stream of that GPU with work pending never completes it,
// hipStreamDestroy on it blocks (clr HostQueue::terminate awaits the last
// command), and new streams of that GPU never run; the other GPU runs on.
// With eviction off the stream completes: the rule is what makes code
// that waits for or destroys such a stream hang.
func TestVMFaultEvictsTheGPU(t *testing.T) {
	for _, evict := range []bool{true, false} {
		m := New(Options{Devices: 2})
		m.SetVMFaultEviction(evict)
		require.NoError(t, m.HSA().Init())
		faults := handleFaults(t, m.HSA())
		hp := m.HIP()
		s0, err := hp.StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, err)
		s1, err := hp.StreamCreate(1, hip.StreamNonBlocking)
		require.NoError(t, err)
		b0, err := hp.Malloc(0, 64)
		require.NoError(t, err)
		b1, err := hp.Malloc(1, 64)
		require.NoError(t, err)

		release := m.Hold()
		require.NoError(t, hp.MemsetAsync(b0, 1, 64, s0)) // pending when the fault comes
		_, err = m.gpuSpan(0, uint64(b1), 4, false, nil)  // gpu0 touches gpu1's memory
		require.ErrorIs(t, err, ErrNoAccess)
		nextFault(t, faults)
		release()
		require.Equal(t, evict, m.Evicted(0))
		require.False(t, m.Evicted(1))

		// The other GPU is unaffected either way.
		require.NoError(t, hp.MemsetAsync(b1, 2, 64, s1))
		require.NoError(t, hp.StreamSynchronize(s1))
		require.NoError(t, hp.StreamDestroy(s1))

		if !evict {
			require.NoError(t, hp.StreamSynchronize(s0))
			require.NoError(t, hp.StreamDestroy(s0))
			continue
		}
		m.Quiesce() // passes over evicted streams
		require.ErrorIs(t, hp.StreamQuery(s0), &hip.Error{Code: hip.ErrorNotReady}, "the evicted stream's memset never completes")
		late, err := hp.StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, err)
		require.NoError(t, hp.MemsetAsync(b0, 3, 64, late))
		require.ErrorIs(t, hp.StreamQuery(late), &hip.Error{Code: hip.ErrorNotReady}, "a stream made after the eviction never runs")
		destroyed := make(chan error, 1)
		go func() { destroyed <- hp.StreamDestroy(s0) }() // blocks for ever, as in clr
		select {
		case err := <-destroyed:
			t.Fatalf("hipStreamDestroy of an evicted stream with pending work returned (%v)", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

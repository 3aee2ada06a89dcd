package emu

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
)

func hipCode(t *testing.T, err error) hip.ErrorCode {
	t.Helper()
	var he *hip.Error
	require.True(t, errors.As(err, &he), "%v", err)
	return he.Code
}

// Peer access per pair, as Options.PeerAccess says: GPU 1 may map GPU 0's
// memory, not the reverse. A copy on GPU 1's stream from GPU 0's memory
// faults until peer access is enabled (the GPU's VM has no mapping), then
// copies; enabling twice, or a pair that cannot, gets HIP's errors.
func TestPeerAccessPerPair(t *testing.T) {
	m := New(Options{Devices: 2, Hazards: true, PeerAccess: func(accessor, owner int) bool { return accessor == 1 && owner == 0 }})
	// GPU 1 works on after its VM fault, which KFD's eviction would stop.
	m.SetVMFaultEviction(false)
	h := m.HIP()
	require.NoError(t, m.HSA().Init())
	faults := handleFaults(t, m.HSA())
	for _, c := range []struct {
		dev, peer int
		want      bool
	}{{1, 0, true}, {0, 1, false}, {0, 0, false}} {
		got, err := h.DeviceCanAccessPeer(c.dev, c.peer)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%d -> %d", c.dev, c.peer)
	}
	src, err := h.Malloc(0, 64)
	require.NoError(t, err)
	dst, err := h.Malloc(1, 64)
	require.NoError(t, err)
	in := make([]byte, 64)
	in[0] = 7
	require.NoError(t, h.MemcpyHtoD(0, src, unsafe.Pointer(&in[0]), 64))

	s, err := h.StreamCreate(1, hip.StreamNonBlocking)
	require.NoError(t, err)
	require.NoError(t, h.MemcpyPeerAsync(dst, 1, src, 0, 64, s))
	require.Equal(t, hip.ErrorIllegalAddress, hipCode(t, h.StreamSynchronize(s)), "a peer read before peer access")
	require.Equal(t, uint64(src), nextFault(t, faults).Address, "the VM fault names GPU 0's memory")

	require.NoError(t, h.DeviceEnablePeerAccess(1, 0))
	require.Equal(t, hip.ErrorPeerAccessAlreadyEnabled, hipCode(t, h.DeviceEnablePeerAccess(1, 0)))
	require.Equal(t, hip.ErrorPeerAccessUnsupported, hipCode(t, h.DeviceEnablePeerAccess(0, 1)))
	s2, err := h.StreamCreate(1, hip.StreamNonBlocking)
	require.NoError(t, err)
	require.NoError(t, h.MemcpyPeerAsync(dst, 1, src, 0, 64, s2))
	require.NoError(t, h.StreamSynchronize(s2))
	out := make([]byte, 64)
	require.NoError(t, h.MemcpyDtoH(1, unsafe.Pointer(&out[0]), dst, 64))
	require.Equal(t, byte(7), out[0])
	// A copy whose pointers are not on the devices it names is refused.
	require.Equal(t, hip.ErrorInvalidValue, hipCode(t, h.MemcpyPeerAsync(src, 1, dst, 0, 64, s2)))
}

// Events work across devices: GPU 1's stream waits for an event recorded
// on GPU 0's stream, and the checker sees the two GPUs' accesses ordered;
// without the wait it reports the race.
func TestStreamWaitsForAnotherGPUsEvent(t *testing.T) {
	for _, wait := range []bool{true, false} {
		m := New(Options{Devices: 2, Hazards: true})
		h := m.HIP()
		src, err := h.Malloc(0, 64)
		require.NoError(t, err)
		dst, err := h.Malloc(1, 64)
		require.NoError(t, err)
		require.NoError(t, h.DeviceEnablePeerAccess(1, 0))
		s0, err := h.StreamCreate(0, hip.StreamNonBlocking)
		require.NoError(t, err)
		s1, err := h.StreamCreate(1, hip.StreamNonBlocking)
		require.NoError(t, err)
		ev, err := h.EventCreate(0, hip.EventDisableTiming)
		require.NoError(t, err)
		require.NoError(t, h.MemsetAsync(src, 5, 64, s0))
		if wait {
			require.NoError(t, h.EventRecord(ev, s0))
			require.NoError(t, h.StreamWaitEvent(s1, ev))
		} else {
			m.Quiesce() // GPU 0 finishes unobserved: only the checker sees the race
		}
		require.NoError(t, h.MemcpyPeerAsync(dst, 1, src, 0, 64, s1))
		require.NoError(t, h.StreamSynchronize(s1))
		require.NoError(t, h.StreamSynchronize(s0))
		if wait {
			require.Empty(t, m.Hazards())
			continue
		}
		hz := m.Hazards()
		require.NotEmpty(t, hz)
		require.Equal(t, HazardReadWrite, hz[0].Kind)
		require.Contains(t, hz[0].Queue+hz[0].PriorQ, "gpu0")
		require.Contains(t, hz[0].Queue+hz[0].PriorQ, "gpu1")
	}
}

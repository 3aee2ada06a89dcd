package emu

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
)

// barrier submits a barrier-AND packet with no dependencies and the given
// fence scopes; it returns its completion signal.
func (r *rig) barrier(t *testing.T, acquire, release uint16) hsa.Signal {
	sig, err := r.h.SignalCreate(1, nil)
	require.NoError(t, err)
	idx := r.h.QueueAddWriteIndexScacqScrel(r.q, 1)
	p := hsa.BarrierAndPacket{Header: hsa.Header(hsa.PacketTypeBarrierAnd, true, acquire, release), CompletionSignal: sig}
	slot := hsa.Slot(r.q, idx)
	p.EncodeBody(slot)
	hsa.PublishHeader(slot, p.FirstWord())
	r.h.SignalStoreScrelease(r.q.Doorbell, int64(idx))
	return sig
}

// A packet's writes reach the host and the copy engines only through a
// system-scope release: a kernel that releases at agent scope leaves them
// in the GPU's L2, and whoever outside the GPU reads them, even after
// waiting for the packet, trips a visibility hazard naming the packet. A
// later packet on the same GPU reads them (it shares the L2), and a
// system-scope release after them, by any packet on that GPU, makes them
// visible.
func TestAgentScopeReleaseIsVisibleOnlyOnItsGPU(t *testing.T) {
	agent := hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeAgent, hsa.FenceScopeAgent)
	system := hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeAgent, hsa.FenceScopeSystem)
	for _, tc := range []struct {
		name string
		// run fills buf (and may read it on the GPU), then reads it
		// outside the GPU.
		run     func(t *testing.T, r *rig, buf, tmp hip.DevicePtr)
		hazards int
	}{
		{"system release, host reads", func(t *testing.T, r *rig, buf, _ hip.DevicePtr) {
			r.wait(r.submitHeader(t, "fill", system, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64}))
			readBack(t, r, buf)
		}, 0},
		{"agent release, host reads", func(t *testing.T, r *rig, buf, _ hip.DevicePtr) {
			r.wait(r.submitHeader(t, "fill", agent, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64}))
			readBack(t, r, buf)
		}, 1},
		{"agent release, then a system-scope marker, host reads", func(t *testing.T, r *rig, buf, _ hip.DevicePtr) {
			r.submitHeader(t, "fill", agent, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64})
			r.wait(r.barrier(t, hsa.FenceScopeNone, hsa.FenceScopeSystem))
			readBack(t, r, buf)
		}, 0},
		{"agent release, then an agent-scope marker, host reads", func(t *testing.T, r *rig, buf, _ hip.DevicePtr) {
			r.submitHeader(t, "fill", agent, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64})
			r.wait(r.barrier(t, hsa.FenceScopeNone, hsa.FenceScopeAgent))
			readBack(t, r, buf)
		}, 1},
		{"agent release, read on the GPU, system release after it", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			r.submitHeader(t, "fill", agent, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64})
			r.submitHeader(t, "add", agent, kernels.Args{Out: uint64(tmp), A: uint64(buf), B: uint64(buf), N: 64})
			r.wait(r.submitHeader(t, "fill", system, kernels.Args{Out: uint64(tmp), Alpha: 2, N: 64}))
			readBack(t, r, buf)
		}, 0},
		{"agent release, a copy engine reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			r.wait(r.submitHeader(t, "fill", agent, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64}))
			h := r.m.HIP()
			s, err := h.StreamCreate(0, 0)
			require.NoError(t, err)
			require.NoError(t, h.MemcpyDtoDAsync(tmp, buf, 256, s))
			require.NoError(t, h.StreamSynchronize(s))
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Options{Hazards: true})
			buf, err := r.m.HIP().Malloc(0, 256)
			require.NoError(t, err)
			tmp, err := r.m.HIP().Malloc(0, 256)
			require.NoError(t, err)
			tc.run(t, r, buf, tmp)
			hs := r.m.Hazards()
			require.Len(t, hs, tc.hazards, "%v", hs)
			for _, h := range hs {
				require.ErrorIs(t, h, ErrHazard)
				require.Equal(t, HazardVisibility, h.Kind)
				require.Contains(t, h.Prior, "rocsync_fill_f32.kd (dispatch packet #0)")
			}
		})
	}
}

func readBack(t *testing.T, r *rig, buf hip.DevicePtr) {
	out := make([]float32, 64)
	require.NoError(t, r.m.HIP().MemcpyDtoH(0, unsafe.Pointer(&out[0]), buf, 256))
	require.Equal(t, float32(2), out[63])
}

// The packet processors count the fence scopes of the packets they
// process, by kind.
func TestFenceScopesAreCounted(t *testing.T) {
	r := newRig(t, Options{})
	buf, err := r.m.HIP().Malloc(0, 256)
	require.NoError(t, err)
	before := r.h.FenceScopes()
	r.submitHeader(t, "fill", hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeAgent, hsa.FenceScopeAgent), kernels.Args{Out: uint64(buf), Alpha: 2, N: 64})
	r.wait(r.submit(t, "fill", true, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64}))
	r.wait(r.barrier(t, hsa.FenceScopeNone, hsa.FenceScopeSystem))
	c := r.h.FenceScopes().Sub(before)
	require.Equal(t, [4]uint64{0, 1, 1, 0}, c.Acquire[hsa.FenceKindDispatch])
	require.Equal(t, [4]uint64{0, 1, 1, 0}, c.Release[hsa.FenceKindDispatch])
	require.Equal(t, [4]uint64{1, 0, 0, 0}, c.Acquire[hsa.FenceKindBarrierAnd])
	require.Equal(t, [4]uint64{0, 0, 1, 0}, c.Release[hsa.FenceKindBarrierAnd])
}

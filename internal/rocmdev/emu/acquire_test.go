package emu

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
)

// A packet reads what was written outside its GPU's L2 (by the host's
// copy, a copy engine) only after a system-scope acquire on that GPU:
// its own, or an earlier packet's that launched after the write. An
// agent-scope acquire, which leaves the L2 as it is, trips a stale-read
// hazard naming the reader and the write, even though the reader was
// ordered after the write. What a packet of the same GPU wrote needs no
// acquire (the L2 holds it), and a packet that only writes needs none.
func TestAgentScopeAcquireReadsStaleOutsideWrites(t *testing.T) {
	agent := hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeAgent, hsa.FenceScopeSystem)
	system := hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem)
	add := func(buf, tmp hip.DevicePtr) kernels.Args {
		return kernels.Args{Out: uint64(tmp), A: uint64(buf), B: uint64(buf), N: 64}
	}
	upload := func(t *testing.T, r *rig, buf hip.DevicePtr) {
		in := make([]float32, 64)
		for i := range in {
			in[i] = 1
		}
		require.NoError(t, r.m.HIP().MemcpyHtoD(0, buf, unsafe.Pointer(&in[0]), 256))
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, r *rig, buf, tmp hip.DevicePtr)
		// stale counts hazards: add reads buf twice (as A and as B).
		stale int
	}{
		{"host copy, agent-scope acquire reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			upload(t, r, buf)
			r.wait(r.submitHeader(t, "add", agent, add(buf, tmp)))
		}, 2},
		{"host copy, system-scope acquire reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			upload(t, r, buf)
			r.wait(r.submitHeader(t, "add", system, add(buf, tmp)))
		}, 0},
		{"host copy, a system-scope acquire before, agent-scope reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			upload(t, r, buf)
			r.barrier(t, hsa.FenceScopeSystem, hsa.FenceScopeNone)
			r.wait(r.submitHeader(t, "add", agent, add(buf, tmp)))
		}, 0},
		{"a system-scope acquire before the host copy, agent-scope reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			r.wait(r.barrier(t, hsa.FenceScopeSystem, hsa.FenceScopeNone))
			upload(t, r, buf)
			r.wait(r.submitHeader(t, "add", agent, add(buf, tmp)))
		}, 2},
		{"host copy, an agent-scope acquire before, agent-scope reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			upload(t, r, buf)
			r.barrier(t, hsa.FenceScopeAgent, hsa.FenceScopeNone)
			r.wait(r.submitHeader(t, "add", agent, add(buf, tmp)))
		}, 2},
		{"host copy, agent-scope acquire overwrites", func(t *testing.T, r *rig, buf, _ hip.DevicePtr) {
			upload(t, r, buf)
			r.wait(r.submitHeader(t, "fill", agent, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64}))
		}, 0},
		{"a kernel of the GPU writes, agent-scope acquire reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			r.submitHeader(t, "fill", agent, kernels.Args{Out: uint64(buf), Alpha: 2, N: 64})
			r.wait(r.submitHeader(t, "add", agent, add(buf, tmp)))
		}, 0},
		{"a copy engine writes, agent-scope acquire reads", func(t *testing.T, r *rig, buf, tmp hip.DevicePtr) {
			upload(t, r, tmp)
			h := r.m.HIP()
			s, err := h.StreamCreate(0, 0)
			require.NoError(t, err)
			require.NoError(t, h.MemcpyDtoDAsync(buf, tmp, 256, s))
			require.NoError(t, h.StreamSynchronize(s))
			r.wait(r.submitHeader(t, "add", agent, add(buf, tmp)))
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Options{Hazards: true})
			buf, err := r.m.HIP().Malloc(0, 256)
			require.NoError(t, err)
			tmp, err := r.m.HIP().Malloc(0, 256)
			require.NoError(t, err)
			tc.run(t, r, buf, tmp)
			hs := r.m.Hazards()
			require.Len(t, hs, tc.stale, "%v", hs)
			for _, h := range hs {
				require.ErrorIs(t, h, ErrHazard)
				require.Equal(t, HazardStale, h.Kind)
				require.Contains(t, h.Op, "rocsync_add_f32.kd")
				require.Contains(t, h.Error(), "no system-scope acquire")
			}
		})
	}
}

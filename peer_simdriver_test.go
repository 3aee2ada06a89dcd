//go:build linux && (amd64 || arm64)

package rocsync

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/kernels"
)

// Two simulated GPUs under Debian's real ROCr and HIP 5.2.3: the training
// chain of the conformance suite PeerCopyTrainingChain, with its peer copies between the GPUs
// and its cross-device waits (hipStreamWaitEvent on an event of the other
// GPU). HIP's order is the reverse of HSA's and the GPUs are of two
// targets, so a pairing by index would load the wrong code and copy to the
// wrong GPU. Without P2P links in the topology ROCr never lets
// one GPU map another's memory, hipDeviceCanAccessPeer says no and the
// copies are staged through hipHostMalloc memory; with them
// (KFDSIM_P2P=1), hipDeviceEnablePeerAccess maps each GPU's memory to the
// other's node (hsa_amd_agents_allow_access → MapMemoryToGPUNodes with
// both nodes) and hipMemcpyPeerAsync copies directly, the simulated GPU
// checking every access against those mappings. Results equal the CPU
// reference on both GPUs.
func TestCopyPeerOnSimulatedDriver(t *testing.T) {
	const gpus = "gfx90a@0000:83:00.0,gfx1030@0000:03:00.0"
	for _, p2p := range []string{"0", "1"} {
		t.Run("p2p="+p2p, func(t *testing.T) {
			if !kfdsim.InChild(t) {
				parentOfSimulatedDriver(t)
				out := kfdsim.Run(t, gpus, t.Name(), kfdsim.Options{Release: simRelease(t), Env: append(simblasEnv(t), "HIP_VISIBLE_DEVICES=1,0", "KFDSIM_P2P="+p2p)})
				for _, l := range strings.Split(out, "\n") {
					if strings.Contains(l, "peer access") || strings.Contains(l, "dispatches=") {
						t.Log(strings.TrimSpace(l))
					}
				}
				return
			}
			e, err := kfdsim.RegisterExecutor("")
			require.NoError(t, err)
			defer e.Close()
			wantDirect := os.Getenv("KFDSIM_P2P") == "1"
			for _, p := range []Policy{DeviceSide, Unified, SkipSameQueue} {
				for _, staged := range []bool{false, true} {
					devs := openSimulatedROCm(t, p)
					require.Len(t, devs, 2)
					require.Regexp(t, "--gfx90a(:|$)", devs[0].Target(), "GPUs in HSA's order")
					require.Regexp(t, "--gfx1030(:|$)", devs[1].Target())
					for _, d := range devs {
						d.peer.staged = staged
					}
					direct, err := devs[0].PeerAccess(devs[1])
					require.NoError(t, err)
					require.Equal(t, wantDirect && !staged, direct, "%v staged=%v", p, staged)
					t.Logf("%v staged=%v: peer access %v", p, staged, direct)
					pc := newPeerChain(t, devs, nil)
					const steps = 3
					for s := 0; s < steps; s++ {
						require.NoError(t, pc.Step(), "%v staged=%v", p, staged)
					}
					pc.Check(t, steps)
					for _, d := range devs {
						t.Logf("%v staged=%v: %v", p, staged, d.Stats())
						require.NoError(t, d.Close())
					}
				}
			}
			require.NotZero(t, e.Stats().Runs)
		})
	}
}

// The simulated GPU holds one GPU to another's memory only where the
// runtime mapped it, as a real GPU's VM does: a kernel on gpu1 reading
// gpu0's memory (dispatched below rocsync's front package, which refuses
// such an op) runs once hipDeviceEnablePeerAccess has mapped gpu0's memory
// to gpu1, and faults in the other direction, which nobody enabled.
func TestPeerMappingEnforcedOnSimulatedDriver(t *testing.T) {
	const gpus = "gfx90a@0000:83:00.0,gfx90a@0000:03:00.0"
	childTest(t, gpus, []string{"KFDSIM_P2P=1"}, func(t *testing.T) {
		devs := openSimulatedROCm(t, DeviceSide)
		require.Len(t, devs, 2)
		a, b := devs[0], devs[1]
		direct, err := b.PeerAccess(a) // gpu1 may read gpu0's memory
		require.NoError(t, err)
		require.True(t, direct)
		neg := func(on *Device, in *Array) (*Array, error) {
			out, err := on.Empty(1, 4, Float32)
			require.NoError(t, err)
			tk, err := on.NewTask()
			require.NoError(t, err)
			k, err := on.drv.Builtin(kernels.Neg, kernels.F32)
			require.NoError(t, err)
			tk.ops.dispatch.SetBuiltin(k, kernels.F32, &kernels.Args{Out: uint64(out.ptr), A: uint64(in.ptr), N: 4})
			ticket, err := tk.drv.Submit(&tk.ops.dispatch)
			require.NoError(t, err)
			return out, tk.drv.Timeline(driver.LaneKernel).WaitHost(ticket)
		}
		onA, err := a.FromFloat32(1, 4, []float32{1, 2, 3, 4})
		require.NoError(t, err)
		out, err := neg(b, onA)
		require.NoError(t, err, "gpu1 reading gpu0's memory after enabling peer access")
		got, err := out.Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{-1, -2, -3, -4}, got)
		onB, err := b.FromFloat32(1, 4, []float32{1, 2, 3, 4})
		require.NoError(t, err)
		_, err = neg(a, onB)
		require.Error(t, err, "gpu0 read gpu1's memory, which was never mapped to it")
		require.ErrorIs(t, err, hsa.ErrMemoryFault)
		for _, d := range devs {
			_ = d.Close() // gpu0 reports its fault
		}
	})
}

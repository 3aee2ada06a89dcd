//go:build linux && (amd64 || arm64)

package rocsync

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// Two simulated GPUs under Debian's real ROCr and HIP 5.2.3: the training
// chain of TestPeerCopyTrainingChain, with its peer copies between the GPUs
// (hipDeviceEnablePeerAccess mapping each GPU's memory to the other's node
// where HIP finds a link, staged through hipHostMalloc memory otherwise)
// and its cross-device waits (hipStreamWaitEvent on an event of the other
// GPU, barrier-AND packets on the other GPU's signals). HIP's order is the
// reverse of HSA's, so a pairing by index would copy to the wrong GPU.
// Results equal the CPU reference on both GPUs.
func TestCopyPeerOnSimulatedDriver(t *testing.T) {
	const gpus = "gfx90a@0000:83:00.0,gfx90a@0000:03:00.0"
	if !kfdsim.InChild(t) {
		parentOfSimulatedDriver(t)
		out := kfdsim.Run(t, gpus, t.Name(), kfdsim.Options{Env: append(simblasEnv(t), "HIP_VISIBLE_DEVICES=1,0")})
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
	func() {
		for _, p := range []Policy{DeviceSide, Unified, SkipSameQueue} {
			for _, staged := range []bool{false, true} {
				devs := openSimulatedROCm(t, p)
				require.Len(t, devs, 2)
				if staged {
					for _, d := range devs {
						d.peer.staged = true
					}
				}
				direct, err := devs[0].PeerAccess(devs[1])
				require.NoError(t, err)
				t.Logf("%v staged=%v: peer access %v", p, staged, direct)
				pc := newPeerChain(t, devs)
				const steps = 3
				for s := 0; s < steps; s++ {
					require.NoError(t, pc.step(), "%v staged=%v", p, staged)
				}
				pc.check(t, steps)
				for _, d := range devs {
					t.Logf("%v staged=%v: %v", p, staged, d.Stats())
					require.NoError(t, d.Close())
				}
			}
		}
	}()
}

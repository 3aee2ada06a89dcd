//go:build linux && (amd64 || arm64)

package rocsync

import (
	"testing"

	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// The op-set program (TestOpSetAcceptanceOnSimulatedDriver) with HIP
// confined to one hardware queue (GPU_MAX_HW_QUEUES=1): every stream of
// HIP's normal priority shares it, hipMemcpy's null stream included (clr
// rocdevice.cpp, Device::acquireQueue), and HIP 6.x copies through blit
// kernels on it. From HIP 5.6 the stream after the host function waits for
// it on the device, so the function's synchronous copies must not go
// through that queue: rocsync makes them on a high-priority stream of its
// own (clr keeps a pool of hardware queues per priority). On HIP 6.4.3
// they hung behind __amd_rocclr_streamOpsWait until the simulated GPU gave
// up after 60 s.
func TestOpSetOnOneHardwareQueueOnSimulatedDriver(t *testing.T) {
	if kfdsim.InChild(t) {
		t.Fatal("the child runs TestOpSetAcceptanceOnSimulatedDriver")
	}
	parentOfSimulatedDriver(t)
	out := kfdsim.Run(t, simulatedSuiteRuns[0].gpus, "TestOpSetAcceptanceOnSimulatedDriver",
		kfdsim.Options{Release: simRelease(t), Env: append(simblasEnv(t), "GPU_MAX_HW_QUEUES=1")})
	logChildSummary(t, out)
}

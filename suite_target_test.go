package rocsync

import (
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/emu"
)

// suiteTarget is where this test process runs the acceptance suite.
type suiteTarget int

const (
	// onEmulator: the default, with the hazard checker and random delays.
	onEmulator suiteTarget = iota
	// onHardware: ROCSYNC_GPU=1, a real AMD (or, with ROCSYNC_BACKEND=cuda,
	// NVIDIA) GPU.
	onHardware
	// onSimulatedDriver: a child of TestROCmSuiteOnSimulatedDriver, Debian's
	// real ROCr and HIP 5.2.3 over the simulated kernel driver (hsa/kfdsim)
	// with simblas as rocBLAS.
	onSimulatedDriver
)

func (s suiteTarget) String() string {
	return [...]string{"emulator", "hardware", "simulated driver"}[s]
}

// suiteOn says where the acceptance suite runs in this process.
func suiteOn() suiteTarget {
	switch {
	case kfdsim.IsChild():
		return onSimulatedDriver
	case os.Getenv("ROCSYNC_GPU") == "1":
		return onHardware
	}
	return onEmulator
}

var suiteHIP struct {
	once    sync.Once
	version int
	err     error
}

// deviceBridgeOnDevice reports whether DeviceBridge crosses the HSA/HIP
// boundary on the device where the suite runs. HIP before 5.6 (Debian's
// 5.2.3 on the simulated driver) refuses HSA signal memory in its stream
// memory operations, so DeviceBridge falls back to a host wait at each
// boundary crossing, exactly as DeviceSide does (docs/device-bridge.md);
// the emulator's default release is a 6.x.
func deviceBridgeOnDevice(t *testing.T) bool {
	t.Helper()
	if suiteOn() == onEmulator || gpuBackend() != ROCm {
		return true
	}
	suiteHIP.once.Do(func() {
		var lib *hip.Lib
		if lib, suiteHIP.err = hip.Open(); suiteHIP.err == nil {
			suiteHIP.version, suiteHIP.err = lib.RuntimeVersion()
		}
	})
	require.NoError(t, suiteHIP.err, "hipRuntimeGetVersion")
	return suiteHIP.version >= emu.HIPVersionStreamMemoryLookup
}

// expectedPolicy is the policy whose host-wait counts p has where the suite
// runs: DeviceBridge counts as DeviceSide where it falls back.
func expectedPolicy(t *testing.T, p Policy) Policy {
	if p == DeviceBridge && !deviceBridgeOnDevice(t) {
		return DeviceSide
	}
	return p
}

package rocsync

import (
	"os"

	"github.com/rocsync/rocsync/hsa/kfdsim"
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

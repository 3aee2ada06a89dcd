// Package testenv names the environment variables rocsync's tests read,
// and says what the common ones mean. docs/testing.md lists them all,
// with the child-process protocols (the simulated driver's is
// hsa/kfdsim's: EnvChild and the variables beside it).
package testenv

import "os"

// The variables that pick where the tests run.
const (
	// GPU=1 runs the hardware tests and the conformance suites on this
	// machine's GPU (TestConformanceOnHardware).
	GPU = "ROCSYNC_GPU"
	// Backend picks that GPU's backend: rocm (the default) or cuda.
	Backend = "ROCSYNC_BACKEND"
)

// The variables that size the long tests.
const (
	// Million=1 runs TestMillionOpsBoundedResources at 10^6 ops per
	// policy (CI's last stage).
	Million = "ROCSYNC_MILLION"
	// Ops sets that test's op count.
	Ops = "ROCSYNC_OPS"
	// FuzzSeed replays one seed of TestFuzzPrograms; FuzzSeeds runs that
	// many; FuzzFaults runs that many seeds of TestFuzzFaults.
	FuzzSeed   = "ROCSYNC_FUZZ_SEED"
	FuzzSeeds  = "ROCSYNC_FUZZ_SEEDS"
	FuzzFaults = "ROCSYNC_FUZZ_FAULTS"
	// FuzzStacks names a file that receives every goroutine's stack when
	// a fuzz run hangs.
	FuzzStacks = "ROCSYNC_FUZZ_STACKS"
)

// HIPTestObjects names a directory of prebuilt HIP test code objects
// (v4.hsaco, v5.hsaco, v6.hsaco) that a parent test hands its simulated
// driver child, so the child compiles nothing under its own timeout.
const HIPTestObjects = "ROCSYNC_HIPTEST_OBJECTS"

// OnGPU says whether the tests run on this machine's GPU (GPU=1).
func OnGPU() bool { return os.Getenv(GPU) == "1" }

// OnCUDA says whether they run on an NVIDIA GPU (GPU=1, Backend=cuda).
func OnCUDA() bool { return OnGPU() && os.Getenv(Backend) == "cuda" }

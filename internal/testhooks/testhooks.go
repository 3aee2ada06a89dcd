// Package testhooks holds the switches that tests flip, all in one struct
// (Switches): most remove one step of rocsync's protocol to show that the
// emulator (or the simulated driver) catches its absence; CUDAEmulator
// puts a stand-in where a runtime would be. Production code only reads
// them; nothing outside this module can import the package.
// docs/testing.md lists them with the tests' environment variables.
package testhooks

import "sync/atomic"

// Switches are every test switch, each off by default.
var Switches struct {
	// SkipKernargAllowAccess makes queue.New leave its kernarg ring
	// unmapped to the GPU (no hsa_amd_agents_allow_access), the defect a
	// discrete GPU answers with a memory fault on the first dispatch.
	SkipKernargAllowAccess atomic.Bool

	// SkipStagingWait makes the staging pool hand out a slot whose last
	// copy has not completed (no wait for it): the host then overwrites
	// pinned memory a copy still reads, or reads memory a copy still
	// fills.
	SkipStagingWait atomic.Bool

	// ForceHIPCapture makes rocmdev capture a stream recording into a
	// hipGraph even on a HIP (before 5.3) that does not capture
	// hipModuleLaunchKernel, to show what that HIP then does: the kernels
	// run at capture and the graph lacks them.
	ForceHIPCapture atomic.Bool

	// SkipHIPCapture makes rocmdev replay every stream recording as its
	// recorded calls in order (no hipGraph), for benchmarks that compare
	// the two on the real HIP.
	SkipHIPCapture atomic.Bool

	// SkipGroupFold makes a replayed recording's operands ignore the
	// replays recorded on their group (syncstate.Group) when read: an op
	// after a replay that did not take its operands is not ordered after
	// it.
	SkipGroupFold atomic.Bool

	// SkipGroupUnsettle makes an op that takes a replayed recording's
	// operand leave the group settled: the next replay then skips the
	// operands and is not ordered after that op.
	SkipGroupUnsettle atomic.Bool

	// SystemScopeFences makes the ROCm driver's HSA queues acquire and
	// release every packet at system scope (queue.Config.AgentScope off),
	// as they did before agent-scope fences became the default: for the
	// tests that count what each costs.
	SystemScopeFences atomic.Bool

	// SkipSystemRelease makes an HSA queue with AgentScope drop the
	// system-scope releases it adds where its work leaves the GPU: its
	// markers release at agent scope and a host wait makes no flush, so
	// the host, copies and other GPUs read what may still sit in the
	// GPU's L2.
	SkipSystemRelease atomic.Bool

	// SkipSystemAcquire makes an HSA queue with AgentScope drop the
	// system-scope acquires it adds where outside data enters: every
	// dispatch, a replay's first packet too, acquires at agent scope, so
	// its GPU may read older copies the L2 kept of what the host, a copy
	// engine or another GPU wrote.
	SkipSystemAcquire atomic.Bool

	// CUDAEmulator makes the CUDA driver (internal/cudadev) open its Go
	// emulator (internal/cudadev/emulator.go) instead of libcuda and
	// cuBLAS: the conformance suites' CUDA-emulator backend.
	CUDAEmulator atomic.Bool
}

// The switches under the names the production code reads them by.
var (
	SkipKernargAllowAccess = &Switches.SkipKernargAllowAccess
	SkipStagingWait        = &Switches.SkipStagingWait
	ForceHIPCapture        = &Switches.ForceHIPCapture
	SkipHIPCapture         = &Switches.SkipHIPCapture
	SkipGroupFold          = &Switches.SkipGroupFold
	SkipGroupUnsettle      = &Switches.SkipGroupUnsettle
	SkipSystemRelease      = &Switches.SkipSystemRelease
	SkipSystemAcquire      = &Switches.SkipSystemAcquire
	SystemScopeFences      = &Switches.SystemScopeFences
)

// Device are one device's test switches, each off by default:
// rocsync.Options carries them (a private field the package's tests set),
// and the device keeps them. They are per device, not in Switches,
// because tests open devices with and without them at once.
type Device struct {
	// DisableWaits skips every wait the policy would emit (the hazard
	// checker's self-test: the checker catches the missing waits).
	DisableWaits bool
	// DisableCrossDeviceWaits skips only the waits for other devices'
	// work (the checker's self-test for those).
	DisableCrossDeviceWaits bool
	// StagePeerCopies stages every copy between GPUs through host memory,
	// even where peer access works (tests and benchmarks of that path on
	// hardware).
	StagePeerCopies bool
	// BetweenHalves, if set, runs between a staged peer copy's two halves
	// (the checker's self-test lets the first finish unobserved).
	BetweenHalves func()
}

// Engine are one syncstate.Engine's test switches, each off by default.
type Engine struct {
	// DisableWaits skips every wait the policy would emit, so tests can
	// prove that the hazard checker catches missing waits.
	DisableWaits bool
	// DisableCrossDeviceWaits skips only the waits for fences of other
	// devices (syncstate.Placed), to prove the checker catches those.
	DisableCrossDeviceWaits bool
}

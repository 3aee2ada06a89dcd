package rocsync_test

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/conformance"
	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/internal/testhooks"
)

// internals are what the suites reach inside rocsync (export_test.go).
var internals = conformance.Internals{
	WithoutWaits:          rocsync.WithoutWaits,
	Ptr:                   rocsync.ArrayPtr,
	Fences:                rocsync.ArrayFences,
	Timelines:             rocsync.TaskTimelines,
	CodeObjectVersions:    rocsync.CodeObjectVersions,
	CUDAHostWaitsOnDevice: rocsync.CUDAHostWaitsOnDevice,
	StagePeerCopies:       rocsync.StagePeerCopies,
	GraphLaunches:         rocsync.GraphLaunches,
	StreamSegments:        rocsync.StreamSegments,
}

// Why a backend cannot run a suite.
const (
	noHazardChecker = "needs the emulator: the hazard checker"
	noAllocTable    = "needs the emulator: it inspects the emulator's allocation table"
	noHold          = "needs the emulator or the simulated driver: it holds the device"
	// Holding the simulated driver stops HIP's copies too, which a real
	// GPU runs beside a busy compute queue.
	noKernelQueueHold = "needs the emulator: it holds the emulated device's kernel queues only"
	noHSAQueues       = "CUDA streams are not pooled HSA queues"
	noFaultInjector   = "needs the emulator: it faults chosen ops on purpose"
	// A conformance run simulates one GPU (simulatedSuiteRuns).
	noSimulatedPeers = "one simulated GPU per run (TestCopyPeerOnSimulatedDriver runs the chain on two)"
)

// suiteBackends is every implementation the conformance suites run on, each
// with the suites it cannot run and why. Each has a one-line runner below
// (the simulated driver's in conformance_simdriver_test.go).
var suiteBackends = map[string]*conformance.Backend{
	// The emulator, with the hazard checker and random delays.
	"emulator": {
		Name: "emulator",
		Options: rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff,
			Emulator: rocsync.EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 7}},
		Hold:        rocsync.HoldDevice,
		BusyHold:    50 * time.Millisecond,
		Quiesce:     rocsync.QuiesceEmulator,
		Live:        rocsync.LiveOnEmulator,
		InjectFault: rocsync.InjectFaultOnEmulator,
		Machine: func(o *rocsync.Options, n int, reach func(a, b int) bool) {
			o.Emulator.Devices, o.Emulator.PeerAccess = n, reach
		},
		Internals: internals,
	},
	// Debian's real ROCr and HIP over the simulated kernel driver
	// (hsa/kfdsim), with simblas as rocBLAS. The hold is longer than the
	// emulator's because the real libraries' host side is slower (race
	// builds, shared CPUs).
	"simulated driver": {
		Name:             "simulated driver",
		Options:          rocsync.Options{Backend: rocsync.ROCm, LogLevel: rocsync.LogOff},
		Hold:             rocsync.HoldDevice,
		BusyHold:         250 * time.Millisecond,
		HIPVersion:       rocsync.HIPRuntimeVersion,
		CheckCodeObjects: true,
		Internals:        internals,
		Unsupported: map[string]string{
			"HazardCheckerFiresWithoutWaits": noHazardChecker,
			"FreeWithoutCache":               noAllocTable,
			"ReadBackWaitsForWriterOnly":     noKernelQueueHold,
			// HIP before 5.3 does not capture kernel launches into a
			// hipGraph, so a recording keeps its calls (rocmdev/replay.go)
			// and Record does not run a library call's function.
			"RecordLibraryCallPanicReleasesOperands": "HIP before 5.3 records a library call without running it: no panic at Record",
			"PeerCopyTrainingChain":                  noSimulatedPeers,
			"FaultReachesEveryDependent":             noFaultInjector,
			"AfterAFault":                            noFaultInjector,
			"GemmFaultThenWaitOnLaterEvent":          noFaultInjector,
		},
	},
	// The CUDA driver over its Go emulator (internal/cudadev/emulator.go),
	// which runs work only when the host blocks on it: a device is always
	// held, so its Hold holds nothing.
	"cuda emulator": {
		Name:      "cuda emulator",
		Options:   rocsync.Options{Backend: rocsync.CUDA, LogLevel: rocsync.LogOff},
		Hold:      func(*testing.T, *rocsync.Device) func() { return func() {} },
		Internals: internals,
		Unsupported: map[string]string{
			"HazardCheckerFiresWithoutWaits": noHazardChecker,
			"FreeWithoutCache":               noAllocTable,
			"QueuePoolSharesQueues":          noHSAQueues,
			"FaultReachesEveryDependent":     noFaultInjector,
			"AfterAFault":                    noFaultInjector,
			"GemmFaultThenWaitOnLaterEvent":  noFaultInjector,
			"PeerCopyTrainingChain":          "the CUDA emulator has one GPU (TestCopyPeerOnFakeCUDA runs the chain on two fake CUDA GPUs)",
		},
	},
	// A real AMD GPU (ROCSYNC_GPU=1).
	"rocm": {
		Name:          "rocm",
		Options:       rocsync.Options{Backend: rocsync.ROCm, LogLevel: rocsync.LogOff},
		HIPVersion:    rocsync.HIPRuntimeVersion,
		InexactReplay: true,
		Internals:     internals,
		Unsupported:   onHardware(nil),
	},
	// A real NVIDIA GPU (ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda).
	"cuda": {
		Name:          "cuda",
		Options:       rocsync.Options{Backend: rocsync.CUDA, LogLevel: rocsync.LogOff},
		InexactReplay: true,
		Internals:     internals,
		Unsupported:   onHardware(map[string]string{"QueuePoolSharesQueues": noHSAQueues}),
	},
}

// onHardware is what no real GPU can run (it has no emulator instruments
// and cannot be held), with more.
func onHardware(more map[string]string) map[string]string {
	m := map[string]string{
		"HazardCheckerFiresWithoutWaits": noHazardChecker,
		"FreeWithPendingWork":            noHold,
		"FreeWithoutCache":               noAllocTable,
		"ReadBackWaitsForWriterOnly":     noKernelQueueHold,
		"FaultReachesEveryDependent":     noFaultInjector,
		"AfterAFault":                    noFaultInjector,
		"GemmFaultThenWaitOnLaterEvent":  noFaultInjector,
	}
	maps.Copy(m, more)
	return m
}

func backend(t *testing.T, name string) *conformance.Backend {
	t.Helper()
	b, ok := suiteBackends[name]
	require.True(t, ok, "no backend %q", name)
	return b
}

func TestConformanceOnEmulator(t *testing.T) { conformance.Run(t, backend(t, "emulator")) }

func TestConformanceOnCUDAEmulator(t *testing.T) {
	testhooks.Switches.CUDAEmulator.Store(true)
	t.Cleanup(func() { testhooks.Switches.CUDAEmulator.Store(false) })
	conformance.Run(t, backend(t, "cuda emulator"))
}

// TestConformanceOnHardware runs the suites on the GPU of this machine
// with ROCSYNC_GPU=1: ROCSYNC_BACKEND picks rocm (the default) or cuda.
func TestConformanceOnHardware(t *testing.T) {
	if !testenv.OnGPU() {
		t.Skip("set ROCSYNC_GPU=1 to run on this machine's GPU")
	}
	name := "rocm"
	if testenv.OnCUDA() {
		name = "cuda"
	}
	conformance.Run(t, backend(t, name))
}

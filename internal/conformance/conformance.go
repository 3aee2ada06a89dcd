// Package conformance is rocsync's conformance suite at the driver seam:
// exported suites that run the public API against one backend, described
// by a Backend (its name, how to open it, the instruments it has, and the
// suites it cannot run, each with why). The shape is gonum's testblas and
// IREE's hal/cts: one suite serves every implementation, and each
// implementation has a one-line runner with its unsupported list in one
// table (the root package's conformance_test.go).
//
// The suites see rocsync's exported API only; where one asserts on
// rocsync's internal state or on a stand-in's instruments, it goes
// through the Backend's Internals, which the root package's tests provide
// (export_test.go). Ordering suites run on the emulator with its hazard
// checker and random delays on.
package conformance

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// Backend describes one implementation the suites run on.
type Backend struct {
	// Name names the backend in messages.
	Name string
	// Options open a device of the backend: its Backend and, on the
	// emulator, its instruments. A suite sets Policy and what it needs on
	// top of a copy.
	Options rocsync.Options
	// Unsupported names the suites the backend cannot run, each with why;
	// they skip with that reason.
	Unsupported map[string]string

	// Hold keeps every queue of the device from starting more work until
	// the returned function is called; nil where the device cannot be
	// held (hardware). A device that runs work only when the host blocks
	// on it (the CUDA emulator) is always held: its Hold does nothing.
	Hold func(t *testing.T, d *rocsync.Device) func()
	// BusyHold is how long busy holds the device through Hold.
	BusyHold time.Duration
	// Quiesce lets the device finish the work submitted so far, unobserved
	// by the host; nil where the backend cannot (only the emulator can).
	Quiesce func(d *rocsync.Device)
	// Live says whether the driver still holds the array's memory; nil
	// where the driver's allocation records do not show one array's
	// release (ROCr carves small device allocations out of 2 MiB blocks
	// that stay allocated, and hardware has no such record).
	Live func(d *rocsync.Device, a *rocsync.Array) bool
	// HIPVersion is the HIP release the ROCm backend runs on
	// (hipRuntimeGetVersion); nil where it is the emulator's default, a
	// 6.x, or the backend is not ROCm.
	HIPVersion func(t *testing.T) int
	// InjectFault makes every op of d that f names (by the kernel's or
	// library function's name) fail as a device fault; nil f stops. Nil
	// where the backend cannot fault an op on purpose (only the ROCm
	// emulator can).
	InjectFault func(d *rocsync.Device, f func(op string) bool)
	// Machine makes o open n devices, whose peer access reach decides
	// (nil: every pair reaches every other); nil where the backend's
	// devices and their links are given (hardware).
	Machine func(o *rocsync.Options, n int, reach func(a, b int) bool)
	// InexactReplay lets a replay's results differ from the eager ones
	// by rounding: a GPU BLAS may pick another algorithm inside a graph.
	InexactReplay bool
	// CheckCodeObjects makes EveryKernelMatchesReference check, under
	// Unified, which code-object version the real HIP loaded.
	CheckCodeObjects bool
	// Internals reach into rocsync's state.
	Internals Internals
}

// Internals reach into rocsync's state where a suite asserts on it; the
// root package's tests provide them.
type Internals struct {
	// WithoutWaits makes a device opened with o skip every wait (the
	// hazard checker's self-test).
	WithoutWaits func(o *rocsync.Options)
	// Ptr is the array's device address.
	Ptr func(a *rocsync.Array) driver.DevicePtr
	// Fences are the array's reader fences and whether its writer fence is
	// empty, read under the array's lock.
	Fences func(a *rocsync.Array) (readers int, writerZero bool)
	// Timelines are the task's kernel and library timelines.
	Timelines func(tk *rocsync.Task) (kernel, library syncstate.Timeline)
	// CodeObjectVersions are the code-object versions a ROCm device loaded
	// through HSA and through HIP.
	CodeObjectVersions func(d *rocsync.Device) (hsa, hip kernels.CodeObjectVersion)
	// CUDAHostWaitsOnDevice says whether a CUDA device's streams wait for
	// host memory (64-bit stream memory operations).
	CUDAHostWaitsOnDevice func(d *rocsync.Device) bool
	// StagePeerCopies makes a device opened with o stage every copy
	// between GPUs through host memory, even where peer access works.
	StagePeerCopies func(o *rocsync.Options)
	// GraphLaunches counts the emulated device's hipGraphLaunch calls.
	GraphLaunches func(d *rocsync.Device) uint64
	// StreamSegments counts the segments of rec that replay on the HIP
	// stream.
	StreamSegments func(d *rocsync.Device, rec *rocsync.Recording) int
}

// Suite is one conformance suite.
type Suite struct {
	Name string
	Run  func(t *testing.T, be *Backend)
}

// Suites are every suite, in the order Run runs them.
var Suites = []Suite{
	{"SeedPrograms", SeedPrograms},
	{"WriteAfterRead", WriteAfterRead},
	{"AliasingRecordsOneFence", AliasingRecordsOneFence},
	{"TwoTasksSharingArrays", TwoTasksSharingArrays},
	{"HazardCheckerFiresWithoutWaits", HazardCheckerFiresWithoutWaits},
	{"DeviceBridgeBothWays", DeviceBridgeBothWays},
	{"FreeWithPendingWork", FreeWithPendingWork},
	{"FreeWithoutCache", FreeWithoutCache},
	{"BadInput", BadInput},
	{"UnifiedHasNoBoundary", UnifiedHasNoBoundary},
	{"EveryKernelMatchesReference", EveryKernelMatchesReference},
	{"MatMulTransposes", MatMulTransposes},
	{"ReadBackWaitsForWriterOnly", ReadBackWaitsForWriterOnly},
	{"QueuePoolSharesQueues", QueuePoolSharesQueues},
	{"SignalsAndEventsArePooled", SignalsAndEventsArePooled},
	{"HostFuncOrdersGPUWork", HostFuncOrdersGPUWork},
	{"HostFuncAliasedOperandsMerge", HostFuncAliasedOperandsMerge},
	{"RecordErrors", RecordErrors},
	{"RecordPanicLeavesTaskEager", RecordPanicLeavesTaskEager},
	{"RecordLibraryCallPanicReleasesOperands", RecordLibraryCallPanicReleasesOperands},
	{"ReplayEqualsEager", ReplayEqualsEager},
	{"PeerCopyTrainingChain", PeerCopyTrainingChain},
	{"FaultReachesEveryDependent", FaultReachesEveryDependent},
	{"AfterAFault", AfterAFault},
	{"GemmFaultThenWaitOnLaterEvent", GemmFaultThenWaitOnLaterEvent},
}

// Run runs every suite on b, each as a subtest named by the suite; a suite
// b lists as unsupported skips with b's reason.
func Run(t *testing.T, b *Backend) {
	known := map[string]bool{}
	for _, s := range Suites {
		known[s.Name] = true
	}
	var unknown []string
	for name := range b.Unsupported {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	require.Empty(t, unknown, "%s lists suites that do not exist as unsupported", b.Name)
	for _, s := range Suites {
		t.Run(s.Name, func(t *testing.T) {
			if why, ok := b.Unsupported[s.Name]; ok {
				t.Skip(why)
			}
			s.Run(t, b)
		})
	}
}

// need fails t where b lacks what the running suite needs without listing
// the suite as unsupported.
func need(t *testing.T, b *Backend, ok bool, what string) {
	t.Helper()
	if !ok {
		t.Fatalf("%s has no %s: list %s as unsupported, with why", b.Name, what, t.Name())
	}
}

// open opens a device of b under p (mod sets more options); the test fails
// if the hazard checker finds anything.
func open(t *testing.T, b *Backend, p rocsync.Policy, mod ...func(*rocsync.Options)) *rocsync.Device {
	t.Helper()
	return openChecked(t, b, p, true, mod...)
}

func openChecked(t *testing.T, b *Backend, p rocsync.Policy, checkHazards bool, mod ...func(*rocsync.Options)) *rocsync.Device {
	t.Helper()
	o := b.Options
	o.Policy = p
	for _, f := range mod {
		f(&o)
	}
	d, err := rocsync.Open(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		if checkHazards {
			require.Empty(t, d.Hazards(), "hazard checker fired")
		}
	})
	return d
}

// held says whether busy holds b's devices (the emulators and the
// simulated driver), which makes a crossing always find its producer
// pending.
func (b *Backend) held() bool { return b.Hold != nil }

// busy keeps tk's kernel timeline busy for a while, so that work
// submitted behind it is still pending when the host reaches the next
// crossing, as on a GPU behind a fast host. Where the device can be held
// it holds every queue for BusyHold; on hardware it queues long kernels
// ahead.
func busy(t *testing.T, b *Backend, d *rocsync.Device, tk *rocsync.Task) {
	t.Helper()
	if d.Policy() == rocsync.WaitAlways {
		return // every op is waited for: nothing can be pending
	}
	if b.held() {
		release := b.Hold(t, d)
		go func() { time.Sleep(b.BusyHold); release() }()
		return
	}
	scratch, err := d.Empty(4096, 4096, rocsync.Float32)
	require.NoError(t, err)
	for i := 0; i < 200; i++ {
		require.NoError(t, tk.Fill(scratch, float64(i)))
	}
	require.NoError(t, scratch.Free())
}

// deviceBridgeOnDevice reports whether DeviceBridge crosses the HSA/HIP
// boundary on b's devices. HIP before 5.6 (Debian's 5.2.3 on the simulated
// driver) refuses HSA signal memory in its stream memory operations, so
// DeviceBridge falls back to a host wait at each boundary crossing,
// exactly as DeviceSide does (docs/device-bridge.md); the emulator's
// default release is a 6.x.
func (b *Backend) deviceBridgeOnDevice(t *testing.T) bool {
	t.Helper()
	if b.HIPVersion == nil || b.Options.Backend != rocsync.ROCm {
		return true
	}
	return b.HIPVersion(t) >= emu.HIPVersionStreamMemoryLookup
}

// expectedPolicy is the policy whose host-wait counts p has on b:
// DeviceBridge counts as DeviceSide where it falls back.
func (b *Backend) expectedPolicy(t *testing.T, p rocsync.Policy) rocsync.Policy {
	if p == rocsync.DeviceBridge && !b.deviceBridgeOnDevice(t) {
		return rocsync.DeviceSide
	}
	return p
}

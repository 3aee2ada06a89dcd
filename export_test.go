package rocsync

import (
	"testing"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/cudadev"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// What the conformance suites (internal/conformance) reach inside the
// package through their backends (conformance_test.go): they see the
// exported API only.

// HoldDevice keeps every queue of an emulated or simulated-driver device
// from starting more work until the returned function is called.
func HoldDevice(t *testing.T, d *Device) func() { return holdDevice(t, d) }

// QuiesceEmulator lets the emulated device finish its submitted work,
// unobserved by the host.
func QuiesceEmulator(d *Device) { d.machine().Quiesce() }

// LiveOnEmulator says whether the emulator still holds a's memory.
func LiveOnEmulator(d *Device, a *Array) bool { return d.machine().Live(uint64(a.ptr)) }

// WithoutWaits makes a device opened with o skip every wait.
func WithoutWaits(o *Options) { o.test.DisableWaits = true }

// ArrayPtr is a's device address.
func ArrayPtr(a *Array) driver.DevicePtr { return a.ptr }

// ArrayFences are a's reader fences and whether its writer fence is empty,
// read under a's lock.
func ArrayFences(a *Array) (readers int, writerZero bool) {
	a.st.Lock()
	defer a.st.Unlock()
	return a.st.ReadersLocked(), a.st.WriterLocked().IsZero()
}

// TaskTimelines are tk's kernel and library timelines.
func TaskTimelines(tk *Task) (kernel, library syncstate.Timeline) {
	return tk.drv.Timeline(driver.LaneKernel), tk.drv.Timeline(driver.LaneLibrary)
}

// CodeObjectVersions are the code-object versions a ROCm device loaded
// through HSA and through HIP.
func CodeObjectVersions(d *Device) (hsa, hip kernels.CodeObjectVersion) {
	return d.drv.(*rocmdev.Device).CodeObjectVersions()
}

// CUDAHostWaitsOnDevice says whether a CUDA device's streams wait for host
// memory (64-bit stream memory operations).
func CUDAHostWaitsOnDevice(d *Device) bool {
	cd, ok := d.drv.(*cudadev.Device)
	return ok && cd.HostWaitsOnDevice() == nil
}

// HIPRuntimeVersion is the version of the HIP runtime the process loads
// (hipRuntimeGetVersion), looked up once.
func HIPRuntimeVersion(t *testing.T) int { return hipRuntimeVersion(t) }

// GraphLaunches counts the emulated device's hipGraphLaunch calls.
func GraphLaunches(d *Device) uint64 { return d.machine().HIP().GraphLaunches() }

// StreamSegments counts the segments of rec that replay on d's HIP stream:
// the library lane's and, under Unified, the kernel lane's.
func StreamSegments(d *Device, rec *Recording) int {
	n := 0
	for _, s := range rec.segs {
		if s.lane != driver.LaneHost && (s.lane != driver.LaneKernel || d.Policy() == Unified) {
			n++
		}
	}
	return n
}

// InjectFaultOnEmulator makes every op of the emulated device d that f
// names fail as a device fault (nil f: none).
func InjectFaultOnEmulator(d *Device, f func(op string) bool) { d.machine().SetFaultInjector(f) }

// StagePeerCopies makes a device opened with o stage every copy between
// GPUs through host memory.
func StagePeerCopies(o *Options) { o.test.StagePeerCopies = true }

// PeerChain is internal/conformance's PeerChain.
type PeerChain = peerChain

// UsePeerChain hands the package's tests internal/conformance's peer-copy
// chain, which they cannot import.
func UsePeerChain(f func(t *testing.T, devs []*Device, settle func()) PeerChain) { newPeerChain = f }

// ReplayProgram is internal/conformance's ReplayProgram.
type ReplayProgram = replayProgram

// UseReplayChecks hands the package's tests internal/conformance's seed
// programs, replay check and output arrays, which they cannot import.
func UseReplayChecks(progs []ReplayProgram, check func(t *testing.T, d *Device, tk *Task, p ReplayProgram, n, iters int),
	outs func(t *testing.T, d *Device, p ReplayProgram, n int) []*Array) {
	replaySeedPrograms, checkReplayEqualsEager, outsFor = progs, check, outs
}

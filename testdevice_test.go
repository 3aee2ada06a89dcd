package rocsync

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/internal/testenv"
)

// The root package's tests that open their device with openStrict run on
// the emulator by default, with the hazard checker and random delays on.
// With ROCSYNC_GPU=1 they run on real hardware instead: ROCSYNC_BACKEND
// picks rocm (the default) or cuda. In a simulated-driver child
// (OnSimulatedGPUs, childTest) they run on the ROCm backend over the real
// ROCm libraries and the simulated driver (suiteOn). The conformance
// suites (internal/conformance) take their backend from the table in
// conformance_test.go instead.
func gpuRun() bool { return suiteOn() != onEmulator }

func gpuBackend() Backend {
	if suiteOn() == onHardware && testenv.OnCUDA() {
		return CUDA
	}
	return ROCm
}

// openStrict opens the device the suite runs on; on the emulator the test
// fails if the hazard checker finds anything.
func openStrict(t *testing.T, p Policy, mod ...func(*Options)) *Device {
	t.Helper()
	o := Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 7}}
	if gpuRun() {
		o.Backend = gpuBackend()
	}
	for _, f := range mod {
		f(&o)
	}
	d, err := Open(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		if !o.test.DisableWaits {
			require.Empty(t, d.Hazards(), "hazard checker fired")
		}
	})
	return d
}

// emulatorOnly skips tests that need the emulator's instruments.
func emulatorOnly(t *testing.T, d *Device, why string) {
	if !d.Emulated() {
		t.Skipf("needs the emulator: %s", why)
	}
}

// holdDevice keeps every queue of the device from starting more work until
// the returned function is called. On the simulated driver it first runs
// one kernel: the kernels load on first use, and ROCr's loader copies them
// to the GPU with blit kernels that a held GPU would never run.
func holdDevice(t *testing.T, d *Device) func() {
	t.Helper()
	if d.Emulated() {
		return d.machine().Hold()
	}
	loadKernels(t, d)
	return holdSimulatedGPU(t)
}

// loadKernels runs one kernel to completion, so that the kernels are loaded
// before the simulated GPU is held.
func loadKernels(t *testing.T, d *Device) {
	t.Helper()
	w, err := d.FromFloat32(1, 1, []float32{2})
	require.NoError(t, err)
	v, err := d.DefaultTask().Mul(w, w)
	require.NoError(t, err)
	_, err = v.Float32s()
	require.NoError(t, err)
	require.NoError(t, v.Free())
	require.NoError(t, w.Free())
}

// busy keeps tk's kernel timeline busy for a while, so that work
// submitted behind it is still pending when the host reaches the next
// crossing, as on a GPU behind a fast host. On the emulator it holds
// every queue for a moment, on the simulated driver every command
// processor; on hardware it queues long kernels ahead.
func busy(t *testing.T, d *Device, tk *Task) {
	t.Helper()
	if d.Policy() == WaitAlways {
		return // every op is waited for: nothing can be pending
	}
	switch {
	case d.Emulated():
		release := d.machine().Hold()
		go func() { time.Sleep(50 * time.Millisecond); release() }()
		return
	case suiteOn() == onSimulatedDriver:
		// The kernels load through the GPU (ROCr's blit kernels), so they
		// load first; the hold is longer than the emulator's because the
		// real libraries' host side is slower (race builds, shared CPUs).
		loadKernels(t, d)
		release := holdSimulatedGPU(t)
		go func() { time.Sleep(250 * time.Millisecond); release() }()
		return
	}
	scratch, err := d.Empty(4096, 4096, Float32)
	require.NoError(t, err)
	for i := 0; i < 200; i++ {
		require.NoError(t, tk.Fill(scratch, float64(i)))
	}
	require.NoError(t, scratch.Free())
}

var (
	randMatrix   = testcheck.RandMatrix
	requireClose = testcheck.RequireClose
)

// suiteTarget is where this test process runs the tests that use openStrict.
type suiteTarget int

const (
	// onEmulator: the default, with the hazard checker and random delays.
	onEmulator suiteTarget = iota
	// onHardware: ROCSYNC_GPU=1, a real AMD (or, with ROCSYNC_BACKEND=cuda,
	// NVIDIA) GPU.
	onHardware
	// onSimulatedDriver: a simulated-driver child, Debian's real
	// ROCr and HIP (5.2.3 unless ROCSYNC_KFDSIM_ROCM names another) over the simulated kernel driver (hsa/kfdsim)
	// with simblas as rocBLAS.
	onSimulatedDriver
)

func (s suiteTarget) String() string {
	return [...]string{"emulator", "hardware", "simulated driver"}[s]
}

// suiteOn says where openStrict opens its devices in this process.
func suiteOn() suiteTarget {
	switch {
	case kfdsim.IsChild():
		return onSimulatedDriver
	case testenv.OnGPU():
		return onHardware
	}
	return onEmulator
}

var suiteHIP struct {
	once    sync.Once
	version int
	err     error
}

// hipRuntimeVersion is the version of the HIP runtime the process loads
// (hipRuntimeGetVersion), looked up once.
func hipRuntimeVersion(t *testing.T) int {
	t.Helper()
	suiteHIP.once.Do(func() {
		var lib *hip.Lib
		if lib, suiteHIP.err = hip.Open(); suiteHIP.err == nil {
			suiteHIP.version, suiteHIP.err = lib.RuntimeVersion()
		}
	})
	require.NoError(t, suiteHIP.err, "hipRuntimeGetVersion")
	return suiteHIP.version
}

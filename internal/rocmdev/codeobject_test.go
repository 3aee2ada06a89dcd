package rocmdev_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

const hip523 = 50_221_153 // hipRuntimeGetVersion of HIP 5.2.3

// open makes one emulated device (hazard checker and random delays on) over
// the given runtimes.
func open(t *testing.T, m *emu.Machine, rt rocmdev.Runtimes, p syncstate.Policy) *rocmdev.Device {
	t.Helper()
	require.NoError(t, m.HSA().Init())
	devs, err := rocmdev.Open(rt, func(int) driver.DeviceConfig {
		return driver.DeviceConfig{Policy: p, Stats: new(syncstate.Stats)}
	})
	require.NoError(t, err)
	require.Len(t, devs, 1)
	t.Cleanup(func() {
		require.NoError(t, devs[0].Close())
		require.Empty(t, m.Hazards(), "hazard checker fired")
	})
	return devs[0].(*rocmdev.Device)
}

func strictMachine(hipVersion int) *emu.Machine {
	return emu.New(emu.Options{HIPVersion: hipVersion, Hazards: true, MaxDelay: 20 * time.Microsecond, Seed: 3})
}

func runtimes(m *emu.Machine) rocmdev.Runtimes {
	return rocmdev.Runtimes{HSA: m.HSA(), HIP: m.HIP(), BLAS: m.BLAS()}
}

// runEveryKernel launches all 26 kernels on one task and checks each result
// bit for bit against the CPU reference.
func runEveryKernel(t *testing.T, d *rocmdev.Device) {
	t.Helper()
	task, err := d.NewTask(syncstate.Sinks{})
	require.NoError(t, err)
	defer func() { require.NoError(t, task.Close()) }()
	const n = 300
	for _, dt := range kernels.AllDTypes() {
		size := uint64(n * dt.Size())
		a, b, want, got := make([]byte, size), make([]byte, size), make([]byte, size), make([]byte, size)
		for i := 0; i < n; i++ {
			x, y := float64(i)*0.37-40, 1.5+float64(i%7)
			if dt == kernels.F32 {
				*(*uint32)(unsafe.Pointer(&a[i*4])) = math.Float32bits(float32(x))
				*(*uint32)(unsafe.Pointer(&b[i*4])) = math.Float32bits(float32(y))
			} else {
				*(*uint64)(unsafe.Pointer(&a[i*8])) = math.Float64bits(x)
				*(*uint64)(unsafe.Pointer(&b[i*8])) = math.Float64bits(y)
			}
		}
		pa, err := d.Malloc(size)
		require.NoError(t, err)
		pb, err := d.Malloc(size)
		require.NoError(t, err)
		pout, err := d.Malloc(size)
		require.NoError(t, err)
		require.NoError(t, d.CopyHtoD(pa, unsafe.Pointer(&a[0]), size))
		require.NoError(t, d.CopyHtoD(pb, unsafe.Pointer(&b[0]), size))
		// What the host wrote enters the kernels' GPU: below the op path,
		// the caller asks the queue for the system-scope acquire an op
		// would (syncstate.Acquirer).
		if acq, ok := task.Timeline(driver.LaneKernel).(syncstate.Acquirer); ok {
			acq.AcquireSystem()
		}
		for _, op := range kernels.AllOps() {
			const alpha = -2.5
			ticket, err := driver.LaunchBuiltin(d, task, new(driver.DispatchOp), op, dt, kernels.Args{Out: uint64(pout), A: uint64(pa), B: uint64(pb), Alpha: alpha, N: n})
			require.NoError(t, err, "%s %s", op, dt)
			require.NoError(t, task.Timeline(driver.LaneKernel).WaitHost(ticket))
			require.NoError(t, d.CopyDtoH(unsafe.Pointer(&got[0]), pout, size))
			kernels.RefBytes(op, dt, want, a, b, alpha)
			require.True(t, bytes.Equal(got, want), "%s %s: device result differs from the reference", op, dt)
		}
		for _, p := range []driver.DevicePtr{pa, pb, pout} {
			require.NoError(t, d.Free(p))
		}
	}
}

// On HIP 5.2, hipModuleLoadData refuses the v5 code objects: Unified must
// load v4 into HIP and still run every kernel. The old code loaded v5 and
// failed with hipErrorSharedObjectInitFailed.
func TestUnifiedOnHIP52RunsEveryKernel(t *testing.T) {
	m := strictMachine(hip523)
	d := open(t, m, runtimes(m), syncstate.Unified)
	runEveryKernel(t, d)
	hsaV, hipV := d.CodeObjectVersions()
	// ROCr 5.2 reports library version 1.5, shared with 5.0 and 5.1, which
	// refuse v5: v4 is the version all three load.
	require.Equal(t, kernels.CodeObjectV4, hsaV)
	require.Equal(t, kernels.CodeObjectV4, hipV)
}

func TestCodeObjectVersionPerRelease(t *testing.T) {
	for _, tc := range []struct {
		hipVersion int
		policy     syncstate.Policy
		hsa, hip   kernels.CodeObjectVersion
	}{
		{hip523, syncstate.DeviceSide, kernels.CodeObjectV4, 0},
		{50_300_000, syncstate.Unified, kernels.CodeObjectV5, kernels.CodeObjectV5},
		{0, syncstate.Unified, kernels.CodeObjectV5, kernels.CodeObjectV5},
		{0, syncstate.DeviceSide, kernels.CodeObjectV5, 0},
	} {
		m := strictMachine(tc.hipVersion)
		d := open(t, m, runtimes(m), tc.policy)
		runEveryKernel(t, d)
		hsaV, hipV := d.CodeObjectVersions()
		require.Equal(t, tc.hsa, hsaV, "HIP %d %v: HSA", tc.hipVersion, tc.policy)
		require.Equal(t, tc.hip, hipV, "HIP %d %v: HIP", tc.hipVersion, tc.policy)
	}
}

// Runtimes that cannot report their version: hsa.Runtime alone hides
// BuildVersion, and hipNoVersion's hipRuntimeGetVersion fails (hip.Runtime
// has RuntimeVersion since device matching needs it), so rocmdev tries v5
// first.
type (
	hipNoVersion struct {
		hip.Runtime
		loads []kernels.CodeObjectVersion
	}
	hsaNoVersion struct {
		hsa.Runtime
		loads  []kernels.CodeObjectVersion
		failAs error // when set, every load fails with it
	}
)

func (h *hipNoVersion) RuntimeVersion() (int, error) {
	return 0, &hip.Error{Code: hip.ErrorNotSupported}
}

func (h *hipNoVersion) ModuleLoadData(d int, image []byte) (hip.Module, error) {
	v, _ := kernels.ReadCodeObjectVersion(image)
	h.loads = append(h.loads, v)
	return h.Runtime.ModuleLoadData(d, image)
}

func (h *hsaNoVersion) CodeObjectReaderCreateFromMemory(code []byte) (hsa.CodeObjectReader, error) {
	v, _ := kernels.ReadCodeObjectVersion(code)
	h.loads = append(h.loads, v)
	return h.Runtime.CodeObjectReaderCreateFromMemory(code)
}

func (h *hsaNoVersion) ExecutableLoadAgentCodeObject(e hsa.Executable, a hsa.Agent, r hsa.CodeObjectReader) error {
	if h.failAs != nil {
		return h.failAs
	}
	return h.Runtime.ExecutableLoadAgentCodeObject(e, a, r)
}

// HIP 5.2 with no version to go by: v5 is refused with
// hipErrorSharedObjectInitFailed and the v4 object loads instead.
func TestHIPLoadFallsBackToV4(t *testing.T) {
	m := strictMachine(hip523)
	h := &hipNoVersion{Runtime: m.HIP()}
	rt := runtimes(m)
	rt.HIP = h
	d := open(t, m, rt, syncstate.Unified)
	runEveryKernel(t, d)
	require.Equal(t, []kernels.CodeObjectVersion{kernels.CodeObjectV5, kernels.CodeObjectV4}, h.loads)
	_, hipV := d.CodeObjectVersions()
	require.Equal(t, kernels.CodeObjectV4, hipV)
}

// ROCr 5.1 with no version to go by: its loader refuses v5 as an invalid
// code object and the v4 object loads instead.
func TestHSALoadFallsBackToV4(t *testing.T) {
	m := strictMachine(50_100_000)
	h := &hsaNoVersion{Runtime: m.HSA()}
	rt := runtimes(m)
	rt.HSA = h
	d := open(t, m, rt, syncstate.DeviceSide)
	runEveryKernel(t, d)
	require.Equal(t, []kernels.CodeObjectVersion{kernels.CodeObjectV5, kernels.CodeObjectV4}, h.loads)
	hsaV, _ := d.CodeObjectVersions()
	require.Equal(t, kernels.CodeObjectV4, hsaV)
}

// Only a refusal of the code object falls back; any other error is
// returned at once, after one attempt.
func TestLoadDoesNotFallBackOnOtherErrors(t *testing.T) {
	m := emu.New(emu.Options{})
	other := &hsa.Error{Func: "hsa_executable_load_agent_code_object", Status: hsa.StatusErrorOutOfResources}
	h := &hsaNoVersion{Runtime: m.HSA(), failAs: other}
	rt := runtimes(m)
	rt.HSA = h
	d := open(t, m, rt, syncstate.DeviceSide)
	task, err := d.NewTask(syncstate.Sinks{})
	require.NoError(t, err)
	defer task.Close()
	_, err = driver.LaunchBuiltin(d, task, new(driver.DispatchOp), kernels.Fill, kernels.F32, kernels.Args{N: 0})
	require.ErrorIs(t, err, other)
	require.Equal(t, []kernels.CodeObjectVersion{kernels.CodeObjectV5}, h.loads)

	// Both versions refused: the error names both.
	m2 := emu.New(emu.Options{})
	refused := &hsa.Error{Func: "hsa_executable_load_agent_code_object", Status: hsa.StatusErrorInvalidCodeObject}
	h2 := &hsaNoVersion{Runtime: m2.HSA(), failAs: refused}
	rt2 := runtimes(m2)
	rt2.HSA = h2
	d2 := open(t, m2, rt2, syncstate.DeviceSide)
	task2, err := d2.NewTask(syncstate.Sinks{})
	require.NoError(t, err)
	defer task2.Close()
	_, err = driver.LaunchBuiltin(d2, task2, new(driver.DispatchOp), kernels.Fill, kernels.F32, kernels.Args{N: 0})
	require.ErrorIs(t, err, refused)
	require.Contains(t, err.Error(), "code object v5")
	require.Contains(t, err.Error(), "code object v4")
	require.Equal(t, []kernels.CodeObjectVersion{kernels.CodeObjectV5, kernels.CodeObjectV4}, h2.loads)
	require.False(t, errors.Is(err, other))
}

// A GPU with no code object of its own runs its family's generic v6 object
// where the release's ROCr loads generic objects (library version 1.15,
// ROCm 6.4), under the HSA path and through HIP alike, and the choice is
// logged at debug level; an earlier release refuses it, naming the
// generic. A GPU that rocBLAS supports has an object of its own.
func TestGenericCodeObjectPerRelease(t *testing.T) {
	for _, tc := range []struct {
		isa        string
		hipVersion int
		policy     syncstate.Policy
		object     string // the code object's processor in the debug log; "" when refused
		version    kernels.CodeObjectVersion
	}{
		{"gfx1152", 60_400_000, syncstate.DeviceSide, "gfx11-generic", kernels.CodeObjectV6},
		{"gfx1152", 60_400_000, syncstate.Unified, "gfx11-generic", kernels.CodeObjectV6},
		{"gfx1036", 70_000_000, syncstate.DeviceSide, "gfx10-3-generic", kernels.CodeObjectV6},
		{"gfx909", 60_400_000, syncstate.Unified, "gfx9-generic", kernels.CodeObjectV6},
		{"gfx1102", 0, syncstate.Unified, "gfx1102", kernels.CodeObjectV5},             // RX 7600: its own object
		{"gfx1151", 60_100_000, syncstate.DeviceSide, "gfx1151", kernels.CodeObjectV5}, // Strix Halo
		{"gfx906", 50_300_000, syncstate.DeviceSide, "gfx906", kernels.CodeObjectV5},   // MI50
		{"gfx1152", 60_100_000, syncstate.DeviceSide, "", 0},                           // ROCm 6.1: no v6
	} {
		m := emu.New(emu.Options{ISA: tc.isa, HIPVersion: tc.hipVersion, Hazards: true, MaxDelay: 20 * time.Microsecond, Seed: 3})
		var buf bytes.Buffer
		log := zerolog.New(&buf).Level(zerolog.DebugLevel)
		rt := runtimes(m)
		rt.Log = &log
		d := open(t, m, rt, tc.policy)
		if tc.object == "" {
			_, err := d.Builtin(kernels.Neg, kernels.F32)
			require.ErrorIs(t, err, kernels.ErrUnsupportedTarget, tc.isa)
			require.ErrorContains(t, err, kernels.GenericTarget(tc.isa))
			continue
		}
		runEveryKernel(t, d)
		hsaV, hipV := d.CodeObjectVersions()
		require.Equal(t, tc.version, hsaV, "%s HIP %d %v", tc.isa, tc.hipVersion, tc.policy)
		runtimesLogged := []string{"hsa"}
		if tc.policy == syncstate.Unified {
			require.Equal(t, tc.version, hipV, "%s HIP %d %v", tc.isa, tc.hipVersion, tc.policy)
			runtimesLogged = append(runtimesLogged, "hip")
		}
		for _, r := range runtimesLogged {
			line := fmt.Sprintf(`"level":"debug","gpu":0,"isa":%q,"runtime":%q,"code_object":%q,"version":%q,"generic":%v`,
				d.Target(), r, tc.object, tc.version.String(), tc.object != tc.isa)
			require.Contains(t, buf.String(), line)
		}
	}
}

package rocsync

import (
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// openEmu opens every emulated GPU with the checker and delays on.
func openEmu(t *testing.T, p Policy, e EmulatorOptions) []*Device {
	t.Helper()
	nop := zerolog.Nop()
	e.HazardChecker, e.MaxDelay, e.Seed = true, 30e3, 11
	devs, err := OpenAll(Options{Backend: Emulator, Policy: p, Logger: &nop, Emulator: e})
	require.NoError(t, err)
	return devs
}

// hsa_shut_down balances hsa_init once the last device of a runtime
// closes, and not before; a second Close changes nothing.
func TestHSAShutDownWhenLastDeviceCloses(t *testing.T) {
	devs := openEmu(t, DeviceSide, EmulatorOptions{Devices: 2})
	h := devs[0].machine.HSA()
	x, err := devs[0].FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	_, err = devs[0].DefaultTask().Mul(x, x)
	require.NoError(t, err)
	require.Equal(t, 1, h.InitCount())
	require.NoError(t, devs[0].Close())
	require.Equal(t, 1, h.InitCount(), "shut down while gpu1 is open")
	require.NoError(t, devs[1].Close())
	require.Equal(t, 0, h.InitCount(), "hsa_init not balanced by hsa_shut_down")
	require.NoError(t, devs[1].Close())
	require.Equal(t, 0, h.InitCount())

	// Open of one device closes the others at once: they must not
	// shut the runtime down under it.
	nop := zerolog.Nop()
	d, err := Open(Options{Backend: Emulator, Device: 1, Logger: &nop, Emulator: EmulatorOptions{Devices: 3}})
	require.NoError(t, err)
	require.Equal(t, 1, d.machine.HSA().InitCount())
	y, err := d.FromFloat32(1, 2, []float32{1, 2})
	require.NoError(t, err)
	z, err := d.DefaultTask().Mul(y, y)
	require.NoError(t, err)
	got, err := z.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4}, got)
	require.NoError(t, d.Close())
	require.Equal(t, 0, d.machine.HSA().InitCount())
}

// Unified launches pass no dynamic LDS: HIP adds the kernel's static LDS
// (its group segment size) itself. With kernels that use 40 KiB of static
// LDS, passing it again as sharedMemBytes makes 80 KiB, over the 64 KiB
// limit, and the launch fails.
func TestUnifiedPassesNoDynamicLDS(t *testing.T) {
	d := openEmu(t, Unified, EmulatorOptions{KernelGroupSegmentSize: 40 << 10})[0]
	defer func() { require.NoError(t, d.Close()) }()
	x, err := d.FromFloat32(1, 3, []float32{1, 2, 3})
	require.NoError(t, err)
	y, err := d.DefaultTask().Mul(x, x)
	require.NoError(t, err)
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9}, got)
	require.Zero(t, d.machine.HIP().MaxDynamicSharedMem())
	require.Empty(t, d.Hazards())
}

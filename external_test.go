package rocsync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
)

// foreignStream is a HIP stream of the user's own on the emulator's GPU 0,
// standing for a producer or consumer outside rocsync.
func foreignStream(t *testing.T, d *Device) (hip.Runtime, hip.Stream) {
	t.Helper()
	h, _, ok := rocmLibraries(d)
	require.True(t, ok)
	s, err := h.StreamCreate(0, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.StreamDestroy(s) })
	return h, s
}

// A foreign stream consumes x (written by rocsync's kernel) and produces y
// (last read by rocsync's kernel), bracketed by ExportTo and ImportFrom:
// rocsync then reads y and overwrites x, and every result equals the CPU
// reference with the hazard checker and random delays on, under every
// policy; nobody waited on the host for the foreign work.
func TestForeignStreamHandshake(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			h, fs := foreignStream(t, d)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 16
			x, err := tk.Full(n, n, Float32, 3) // the kernel queue writes x
			require.NoError(t, err)
			y, err := tk.Full(n, n, Float32, 1)
			require.NoError(t, err)
			z, err := tk.Scale(5, y) // the kernel queue reads y
			require.NoError(t, err)
			for range 3 {
				require.NoError(t, tk.ExportTo(uintptr(fs), In(x), Out(y)))
				require.NoError(t, h.MemcpyDtoDAsync(hip.DevicePtr(y.ptr), hip.DevicePtr(x.ptr), uint64(n*n*4), fs))
				require.NoError(t, tk.ImportFrom(uintptr(fs), In(x), Out(y)))
				require.NoError(t, tk.ScaleInto(x, 2, x)) // overwrites what the foreign stream read
			}
			// y holds x before the third doubling: 3·2·2
			w, err := tk.Scale(0.5, y)
			require.NoError(t, err)
			gotW, err := w.Float32s()
			require.NoError(t, err)
			gotX, err := x.Float32s()
			require.NoError(t, err)
			gotZ, err := z.Float32s()
			require.NoError(t, err)
			for i := range gotW {
				require.Equal(t, float32(6), gotW[i], "y/2, element %d", i)
				require.Equal(t, float32(24), gotX[i], "x, element %d", i)
				require.Equal(t, float32(5), gotZ[i], "z, element %d", i)
			}
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.NoError(t, h.StreamSynchronize(fs))
			require.Empty(t, d.Hazards())
		})
	}
}

// Leaving out either half of the handshake is a race the hazard checker
// reports: without ExportTo the foreign stream reads x while rocsync's
// kernel may still write it; without ImportFrom rocsync's kernel reads y
// while the foreign stream may still write it.
func TestForeignStreamWithoutHandshakeIsARace(t *testing.T) {
	for _, omit := range []string{"ExportTo", "ImportFrom"} {
		t.Run("without "+omit, func(t *testing.T) {
			d := openOpPath(t, DeviceBridge)
			h, fs := foreignStream(t, d)
			tk := d.DefaultTask()
			const n = 8
			x, err := tk.Full(n, n, Float32, 3)
			require.NoError(t, err)
			y, err := d.Empty(n, n, Float32)
			require.NoError(t, err)
			if omit != "ExportTo" {
				require.NoError(t, tk.ExportTo(uintptr(fs), In(x), Out(y)))
			}
			d.machine().Quiesce() // the kernel finishes, unobserved by the host
			require.NoError(t, h.MemcpyDtoDAsync(hip.DevicePtr(y.ptr), hip.DevicePtr(x.ptr), uint64(n*n*4), fs))
			d.machine().Quiesce() // the foreign copy finishes, unobserved by the host (ordered for Go's race detector)
			if omit != "ImportFrom" {
				require.NoError(t, tk.ImportFrom(uintptr(fs), In(x), Out(y)))
			}
			_, err = tk.Scale(2, y)
			require.NoError(t, err)
			require.NoError(t, d.Synchronize())
			require.NotEmpty(t, d.Hazards(), "the checker must see the foreign access rocsync was not told of")
		})
	}
}

// Misuse is a typed error, and nothing is submitted.
func TestForeignStreamHandshakeErrors(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	require.ErrorIs(t, tk.ExportTo(0), ErrInvalid)
	require.ErrorIs(t, tk.ImportFrom(0, F32(1)), ErrInvalid)
	require.ErrorIs(t, tk.ImportFrom(0, In((*Array)(nil))), ErrNilArray)
	other := openOpPath(t, DeviceSide)
	require.ErrorIs(t, other.DefaultTask().ExportTo(0, In(x)), ErrDeviceMismatch)
	require.NoError(t, x.Free())
	require.ErrorIs(t, tk.ExportTo(0, In(x)), ErrFreed)
}

// A foreign stream handle the runtime refuses is ErrInvalid and changes
// nothing: the import's Out operand keeps its contents (it was ErrFault,
// and the array was poisoned for good), and the task goes on.
func TestForeignStreamTheRuntimeRefusesChangesNothing(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(1, 2, []float32{1, 2})
	require.NoError(t, err)
	const bogus = uintptr(0xdeadbeef) // no stream of the runtime's
	err = tk.ImportFrom(bogus, Out(x))
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "the foreign stream")
	require.ErrorIs(t, tk.ExportTo(bogus, In(x)), ErrInvalid)
	got, err := x.Float32s()
	require.NoError(t, err, "a refused handshake poisoned its operand")
	require.Equal(t, []float32{1, 2}, got)
	y, err := tk.Add(x, x)
	require.NoError(t, err)
	got, err = y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{2, 4}, got)
}

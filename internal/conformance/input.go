package conformance

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
)

func BadInput(t *testing.T, be *Backend) {
	o := rocsync.Options{Backend: be.Options.Backend, LogLevel: rocsync.LogOff, Emulator: rocsync.EmulatorOptions{Devices: 2, HazardChecker: true}}
	devs, err := rocsync.OpenAll(o)
	require.NoError(t, err)
	defer func() {
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	}()
	d := devs[0]
	tk := d.DefaultTask()
	other := d // with one GPU the mixed-device case cannot be built
	if len(devs) > 1 {
		other = devs[1]
	}
	a, _ := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	b, _ := d.FromFloat32(3, 3, make([]float32, 9))
	c64, _ := d.FromFloat64(2, 2, []float64{1, 2, 3, 4})
	onOther, _ := other.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	freed, _ := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, freed.Free())
	orig, _ := a.Float32s()

	cases := []struct {
		name string
		kind error
		call func() error
	}{
		{"shape", rocsync.ErrShape, func() error { _, err := tk.Mul(a, b); return err }},
		{"matmul shape", rocsync.ErrShape, func() error { _, err := tk.MatMul(a, b, false, false); return err }},
		{"dtype", rocsync.ErrDType, func() error { _, err := tk.Add(a, c64); return err }},
		{"use after free", rocsync.ErrFreed, func() error { _, err := tk.Mul(freed, a); return err }},
		{"read after free", rocsync.ErrFreed, func() error { _, err := freed.Float32s(); return err }},
		{"double free", rocsync.ErrFreed, func() error { return freed.Free() }},
		{"nil array", rocsync.ErrNilArray, func() error { _, err := tk.Mul(nil, a); return err }},
		{"nil free", rocsync.ErrNilArray, func() error { var z *rocsync.Array; return z.Free() }},
		{"mixed devices", rocsync.ErrDeviceMismatch, func() error { _, err := tk.Add(a, onOther); return err }},
		{"bad slice", rocsync.ErrShape, func() error { _, err := d.FromFloat32(2, 3, []float32{1}); return err }},
		{"wrong read dtype", rocsync.ErrDType, func() error { return a.CopyToFloat64(make([]float64, 4)) }},
		{"gemm output aliases an input", rocsync.ErrInvalid, func() error { return tk.MatMulInto(a, a, a, false, false) }},
		{"negative shape", rocsync.ErrShape, func() error { _, err := d.Empty(-1, 4, rocsync.Float32); return err }},
		{"overflowing shape", rocsync.ErrShape, func() error { _, err := d.Empty(1<<40, 1<<40, rocsync.Float32); return err }},
		{"nil second operand", rocsync.ErrNilArray, func() error { return tk.AXPYInto(a, 2, a, nil) }},
		{"closed task", rocsync.ErrClosed, func() error {
			t2, err := d.NewTask()
			if err != nil {
				return err
			}
			if err := t2.Close(); err != nil {
				return err
			}
			if err := t2.Close(); err != nil { // a second Close returns nil, as rocsync.Device.Close does
				return fmt.Errorf("second Close: %v", err)
			}
			_, err = t2.Neg(a)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.kind == rocsync.ErrDeviceMismatch && other == d {
				t.Skip("one GPU: no second device to mix")
			}
			err := c.call()
			require.Error(t, err)
			require.ErrorIs(t, err, c.kind)
			var e *rocsync.Error
			require.True(t, errors.As(err, &e), "%T", err)
		})
	}
	// Nothing the user handed over was touched.
	got, err := a.Float32s()
	require.NoError(t, err)
	require.Equal(t, orig, got)
	require.Empty(t, d.Hazards())
}

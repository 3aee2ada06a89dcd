package rocsync

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
)

func quietEmulator(t *testing.T, o Options) *Device {
	t.Helper()
	o.Backend = Emulator
	o.LogLevel = LogOff
	d, err := Open(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// Every error names the function the user called and its operands as the
// user wrote them, has the right kind for errors.Is, and is an *Error
// itself (not merely wrapping one) for errors.As and type switches.
func TestErrorMessages(t *testing.T) {
	d := quietEmulator(t, Options{})
	tk := d.DefaultTask()
	a23, err := d.Empty(2, 3, Float32)
	require.NoError(t, err)
	b23, err := d.Empty(2, 3, Float32)
	require.NoError(t, err)
	b32, err := d.Empty(3, 2, Float32)
	require.NoError(t, err)
	c22, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	f64, err := d.Empty(2, 3, Float64)
	require.NoError(t, err)
	freed, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	require.NoError(t, freed.Free())

	other := quietEmulator(t, Options{}) // a second Open of gpu0
	foreign, err := other.Empty(2, 3, Float32)
	require.NoError(t, err)

	closed, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	require.NoError(t, err)
	ctk := closed.DefaultTask()
	cx, err := closed.Empty(2, 2, Float32)
	require.NoError(t, err)
	require.NoError(t, closed.Close())

	second, err := d.NewTask()
	require.NoError(t, err)
	require.NoError(t, second.Close())

	last := func(_ any, err error) error { return err }
	cases := []struct {
		name string
		err  error
		op   string
		kind error
		want []string
	}{
		{"MatMul says MatMul", last(tk.MatMul(a23, b23, false, false)), "MatMul", ErrShape,
			[]string{"rocsync: MatMul: shape mismatch: op(a) is 2x3, op(b) is 2x3"}},
		{"MatMulInto says MatMul", tk.MatMulInto(c22, a23, b23, false, false), "MatMul", ErrShape,
			[]string{"rocsync: MatMul: shape mismatch"}},
		{"Gemm says Gemm", tk.Gemm(false, false, 1, a23, b23, 0, c22), "Gemm", ErrShape,
			[]string{"rocsync: Gemm: shape mismatch"}},
		{"Float32s says Float32s", last(f64.Float32s()), "Float32s", ErrDType,
			[]string{"rocsync: Float32s: dtype mismatch: array is float64"}},
		{"Float64s says Float64s", last(a23.Float64s()), "Float64s", ErrDType,
			[]string{"rocsync: Float64s: dtype mismatch"}},
		{"Float32s of a freed array", last(freed.Float32s()), "Float32s", ErrFreed,
			[]string{"rocsync: Float32s: array already freed"}},
		{"Add on a closed device says Add", last(ctk.Add(cx, cx)), "Add", ErrClosed,
			[]string{"rocsync: Add: closed"}},
		{"Full on a closed device says Full", last(ctk.Full(2, 2, Float32, 1)), "Full", ErrClosed,
			[]string{"rocsync: Full: closed"}},
		{"MatMul on a closed device says MatMul", last(ctk.MatMul(cx, cx, false, false)), "MatMul", ErrClosed,
			[]string{"rocsync: MatMul: closed"}},
		{"Add(a 2x3, b 3x2) names a and b", last(tk.Add(a23, b32)), "Add", ErrShape,
			[]string{"rocsync: Add: shape mismatch: a is 2x3, b is 3x2"}},
		{"AXPY names x and y", last(tk.AXPY(2, a23, b32)), "AXPY", ErrShape,
			[]string{"rocsync: AXPY: shape mismatch: x is 2x3, y is 3x2"}},
		{"ReLUGrad names a and grad", last(tk.ReLUGrad(a23, b32)), "ReLUGrad", ErrShape,
			[]string{"rocsync: ReLUGrad: shape mismatch: a is 2x3, grad is 3x2"}},
		{"Add of two dtypes names a and b", last(tk.Add(a23, f64)), "Add", ErrDType,
			[]string{"rocsync: Add: dtype mismatch: a is float32, b is float64"}},
		{"AddInto names the output", tk.AddInto(c22, a23, b23), "Add", ErrShape,
			[]string{"rocsync: Add: shape mismatch: out is 2x2, a is 2x3"}},
		{"ScaleInto names the output", tk.ScaleInto(c22, 2, a23), "Scale", ErrShape,
			[]string{"rocsync: Scale: shape mismatch: out is 2x2, a is 2x3"}},
		{"two Opens of gpu0 are told apart", last(tk.Add(foreign, a23)), "Add", ErrDeviceMismatch,
			[]string{"Array(2x3 float32 on gpu0) belongs to " + other.String() + ", the task to " + d.String(),
				"each Open makes a separate device"}},
		{"ParsePolicy", last(ParsePolicy("Fastest")), "ParsePolicy", ErrInvalid,
			[]string{`rocsync: ParsePolicy: invalid argument: "Fastest"`, "DeviceSide"}},
		{"ParseLogLevel", last(ParseLogLevel("loud")), "ParseLogLevel", ErrInvalid,
			[]string{`rocsync: ParseLogLevel: invalid argument: unknown log level "loud"`}},
		{"a closed task", last(second.Add(a23, a23)), "Add", ErrClosed,
			[]string{"rocsync: Add: closed: task is closed"}},
		{"Synchronize on a closed task", second.Synchronize(), "Synchronize", ErrClosed,
			[]string{"rocsync: Synchronize: closed"}},
		{"a nil operand", last(tk.Add(a23, nil)), "Add", ErrNilArray, []string{"rocsync: Add: nil array"}},
		{"a nil task", last((*Task)(nil).Add(a23, a23)), "Add", ErrInvalid, []string{"rocsync: Add: invalid argument: nil task"}},
		{"Free twice", freed.Free(), "Free", ErrFreed, []string{"rocsync: Free: array already freed: double free"}},
		{"bad shape", last(d.Empty(0, 3, Float32)), "Empty", ErrShape, []string{"0x3: dimensions must be positive"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Error(t, c.err)
			e, ok := c.err.(*Error)
			require.True(t, ok, "%T is not an *Error: %v", c.err, c.err)
			require.Equal(t, c.op, e.Op)
			require.ErrorIs(t, c.err, c.kind)
			var as *Error
			require.ErrorAs(t, c.err, &as)
			for _, w := range c.want {
				require.Contains(t, c.err.Error(), w)
			}
		})
	}
	require.NotEqual(t, d.String(), other.String(), "two Opens of one GPU have different names")
}

// Running out of device memory is ErrOutOfMemory, wrapping the runtime's
// error (hipErrorOutOfMemory from the emulator), after the cache and the
// pending frees were given back; it is not ErrUnavailable.
func TestOutOfMemoryKind(t *testing.T) {
	d := quietEmulator(t, Options{Emulator: EmulatorOptions{MemoryPerDevice: 1 << 20}})
	x, err := d.Empty(256, 512, Float32) // 512 KiB
	require.NoError(t, err)
	_, err = d.Empty(256, 512, Float32) // the other 512 KiB
	require.NoError(t, err)
	_, err = d.Empty(1, 1, Float32)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.NotErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorOutOfMemory})
	require.ErrorContains(t, err, "rocsync: Empty: out of device memory: allocating 1x1 float32")
	_, err = d.DefaultTask().Add(x, x)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.ErrorContains(t, err, "rocsync: Add: out of device memory")
	require.NoError(t, x.Free())
	_, err = d.Empty(1, 1, Float32)
	require.NoError(t, err, "freed memory is found again")
}

// A driver's out-of-memory error is recognised by its kind, whatever the
// runtime's words (each driver's classification is tested beside it:
// TestOutOfMemoryClassifiesHIPAndHSA, TestOutOfMemoryClassifiesCUDA).
func TestOutOfMemoryIsTheDriversKind(t *testing.T) {
	raw := &hip.Error{Func: "hipMalloc", Code: hip.ErrorOutOfMemory}
	require.True(t, outOfMemory(driver.WithKind(raw, driver.ErrOutOfMemory)))
	require.False(t, outOfMemory(raw), "the driver classifies, not the front")
	require.False(t, outOfMemory(driver.WithKind(raw, driver.ErrNoDevice)))
	require.Equal(t, raw.Error(), driver.WithKind(raw, driver.ErrOutOfMemory).Error(), "the kind leaves the text alone")
}

// A second Close returns nil, for devices and tasks alike, and so does a
// task's Close after its device's; other calls on them return ErrClosed.
func TestCloseTwiceIsNil(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	require.NoError(t, err)
	tk, err := d.NewTask()
	require.NoError(t, err)
	require.NoError(t, tk.Close())
	require.NoError(t, tk.Close(), "a task's second Close")
	_, err = tk.Full(1, 1, Float32, 0)
	require.ErrorIs(t, err, ErrClosed)

	kept, err := d.NewTask()
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "a device's second Close")
	require.NoError(t, kept.Close(), "a task's Close after its device's")
	require.NoError(t, d.DefaultTask().Close())
	_, err = kept.Full(1, 1, Float32, 0)
	require.ErrorIs(t, err, ErrClosed)

	require.ErrorIs(t, (*Task)(nil).Close(), ErrInvalid)
	require.ErrorIs(t, (*Device)(nil).Close(), ErrInvalid)
}

// Errors of failed device work that surface at Synchronize and Close are
// *Error values too, naming those calls, with ErrFault's kind and the
// cause inside.
func TestJoinedErrorsAreErrors(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff,
		Emulator: EmulatorOptions{FaultInjector: func(op string) bool { return op == "rocsync_mul_f32" }}})
	require.NoError(t, err)
	tk, err := d.NewTask()
	require.NoError(t, err)
	x, err := d.FromFloat32(1, 2, []float32{1, 2})
	require.NoError(t, err)
	_, err = tk.Mul(x, x)
	require.NoError(t, err)
	for _, c := range []struct {
		op  string
		err error
	}{{"Synchronize", tk.Synchronize()}, {"Synchronize", d.Synchronize()}, {"Close", tk.Close()}, {"Close", d.Close()}} {
		e, ok := c.err.(*Error)
		require.True(t, ok, "%s: %T %v", c.op, c.err, c.err)
		require.Equal(t, c.op, e.Op)
		require.ErrorIs(t, c.err, ErrFault)
		require.ErrorContains(t, c.err, "MEMORY_FAULT")
	}
	require.NoError(t, d.Close(), "closed already")
}

// On a real GPU (ROCSYNC_GPU=1; ROCSYNC_BACKEND=cuda for NVIDIA), asking
// for far more memory than the GPU has is ErrOutOfMemory wrapping the
// runtime's own out-of-memory error, and the device stays usable.
func TestOutOfMemoryOnGPU(t *testing.T) {
	if suiteOn() != onHardware {
		t.Skip("needs ROCSYNC_GPU=1 and a GPU")
	}
	d := openStrict(t, DeviceSide)
	_, err := d.Empty(1<<17, 1<<20, Float32) // 512 GiB
	require.ErrorIs(t, err, ErrOutOfMemory)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "Empty", e.Op)
	if d.Backend() == "cuda" {
		require.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorOutOfMemory})
	} else {
		require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorOutOfMemory})
	}
	t.Log(err)
	x, err := d.FromFloat32(1, 2, []float32{1, 2})
	require.NoError(t, err)
	y, err := d.DefaultTask().Add(x, x)
	require.NoError(t, err)
	vals, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{2, 4}, vals)
}

// What the guide says under "Free what you make": an array dropped
// without Free keeps its device memory however often the collector runs,
// so a loop that makes a new array per iteration runs out of device
// memory; freeing it, or writing into one array, does not.
func TestDroppedArraysKeepTheirMemory(t *testing.T) {
	d := quietEmulator(t, Options{Emulator: EmulatorOptions{MemoryPerDevice: 1 << 20}})
	tk := d.DefaultTask()
	x, err := d.Empty(128, 256, Float32) // 128 KiB
	require.NoError(t, err)
	kept := func(free bool) error {
		for range 16 {
			y, err := tk.Scale(2, x)
			if err != nil {
				return err
			}
			if free {
				if err := y.Free(); err != nil {
					return err
				}
			}
			runtime.GC()
		}
		return nil
	}
	require.NoError(t, kept(true), "freed arrays give their memory back")
	require.ErrorIs(t, kept(false), ErrOutOfMemory, "dropped arrays keep theirs")
	require.NoError(t, d.Close())
}

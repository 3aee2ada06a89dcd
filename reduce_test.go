package rocsync

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
)

// sumRef is the CPU reference of a reduction of a row-major matrix, in
// float64 (the kernels' order of additions differs; the values used are
// small integers, so float32 sums are exact).
func sumRef(r Reduction, rows, cols int, v []float32) []float32 {
	var out []float64
	switch r {
	case SumAll:
		out = make([]float64, 1)
	case SumRows:
		out = make([]float64, rows)
	case SumCols:
		out = make([]float64, cols)
	}
	for i := range rows {
		for j := range cols {
			x := float64(v[i*cols+j])
			switch r {
			case SumAll:
				out[0] += x
			case SumRows:
				out[i] += x
			case SumCols:
				out[j] += x
			}
		}
	}
	res := make([]float32, len(out))
	for i, x := range out {
		res[i] = float32(x)
	}
	return res
}

func sumShape(r Reduction, rows, cols int) (int, int) {
	switch r {
	case SumRows:
		return rows, 1
	case SumCols:
		return 1, cols
	}
	return 1, 1
}

// Sum of every kind, over shapes that need the workspace (more than one
// slice per output) and shapes that do not, under every policy, with the
// hazard checker, random delays and the zero check on: each equals the
// reference, and the workspace is reused (no new one per launch) and
// still zero after the last.
func TestSum(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			d.reduce.check = true
			tk, err := d.NewTask()
			require.NoError(t, err)
			for _, sh := range [][2]int{{3, 5}, {64, 300}, {300, 64}, {1, 10000}} {
				rows, cols := sh[0], sh[1]
				vals := seq(rows*cols, func(i int) float32 { return float32(i%7) - 3 })
				in, err := d.FromFloat32(rows, cols, vals)
				require.NoError(t, err)
				for _, r := range kernels.AllReductions() {
					or, oc := sumShape(r, rows, cols)
					out, err := d.Empty(or, oc, Float32)
					require.NoError(t, err)
					require.NoError(t, tk.Sum(out, in, r))
					got, err := out.Float32s()
					require.NoError(t, err)
					require.Equal(t, sumRef(r, rows, cols, vals), got, "%v of %dx%d", r, rows, cols)
				}
			}
			ws := d.reduce.buf
			require.NotNil(t, ws, "a shape with several slices per output uses the workspace")
			raw := make([]byte, ws.size)
			require.NoError(t, d.drv.CopyDtoH(ptrOf(raw), ws.ptr, ws.size))
			require.NoError(t, kernels.CheckZeroed(raw))
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// Bad arguments to Sum are typed errors.
func TestSumErrors(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	in, err := d.Empty(4, 6, Float32)
	require.NoError(t, err)
	wrong, err := d.Empty(4, 6, Float32)
	require.NoError(t, err)
	f64, err := d.Empty(1, 1, Float64)
	require.NoError(t, err)
	require.ErrorIs(t, tk.Sum(wrong, in, SumAll), ErrShape)
	require.ErrorIs(t, tk.Sum(wrong, in, SumRows), ErrShape)
	require.ErrorIs(t, tk.Sum(f64, in, SumAll), ErrDType)
	require.ErrorIs(t, tk.Sum(in, in, SumAll), ErrInvalid)
	require.ErrorIs(t, tk.Sum(nil, in, SumAll), ErrNilArray)
	require.ErrorIs(t, tk.Sum(f64, in, Reduction(9)), ErrInvalid)
}

// The zero check fires: a workspace dirtied behind rocsync's back fails the
// next reduction with ErrFault wrapping kernels.ErrWorkspaceNotZero, before
// anything is submitted.
func TestSumZeroCheckFires(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	d.reduce.check = true
	tk := d.DefaultTask()
	in, err := d.FromFloat32(1, 10000, seq(10000, func(int) float32 { return 1 }))
	require.NoError(t, err)
	out, err := d.Empty(1, 1, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.Sum(out, in, SumAll))
	got, err := out.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{10000}, got)
	ws := d.reduce.buf
	require.NotNil(t, ws)
	dirty := []byte{1}
	require.NoError(t, d.drv.CopyHtoD(ws.ptr+8, ptrOf(dirty), 1))
	err = tk.Sum(out, in, SumAll)
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, err, kernels.ErrWorkspaceNotZero)
}

func ptrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// The reduction's declared read and write of the workspace are what order
// two reductions on different queues: a Sum submitted without declaring
// the workspace (the same Dispatch, built by hand) is a race the hazard
// checker reports. The first reduction finishes before the second starts
// (Quiesce), so only the checker sees the race, not Go's race detector.
func TestSumUndeclaredWorkspaceIsARace(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	a, err := d.NewTask()
	require.NoError(t, err)
	b, err := d.NewTask()
	require.NoError(t, err)
	in, err := d.FromFloat32(1, 10000, seq(10000, func(int) float32 { return 1 }))
	require.NoError(t, err)
	out1, err := d.Empty(1, 1, Float32)
	require.NoError(t, err)
	out2, err := d.Empty(1, 1, Float32)
	require.NoError(t, err)
	require.NoError(t, a.Sum(out1, in, SumAll)) // declares the workspace
	d.machine().Quiesce()
	k, err := d.drv.(driver.Reducer).Reduction(SumAll, Float32)
	require.NoError(t, err)
	shape, err := SumAll.Shape(1, 10000)
	require.NoError(t, err)
	ws := d.reduce.buf
	args := kernels.ReduceArgs{Out: uint64(out2.ptr), In: uint64(in.ptr), Workspace: uint64(ws.ptr), Rows: 1, Cols: 10000}
	op := &b.ops.dispatch
	op.Kernel = k
	args.Encode(op.Args[:])
	op.Geometry = Geometry{Dims: 1, Grid: [3]uint32{shape.Workgroups() * kernels.ReduceWorkgroupSize, 1, 1},
		Workgroup: [3]uint32{kernels.ReduceWorkgroupSize, 1, 1}}
	_, err = b.submit("Sum without its workspace", op, append(b.operands[:0], access{&in.buffer, in, Read}, access{&out2.buffer, out2, Write}))
	require.NoError(t, err)
	_ = b.Synchronize()
	_ = a.Synchronize()
	require.NotEmpty(t, d.Hazards(), "the checker must see the undeclared workspace access")
}

// 10⁴ reductions reuse one workspace, never memset after it was zeroed at
// allocation, and the zero check passes before every one of them.
func TestSumZeroCheckOver10kLaunches(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, CheckReductionWorkspace: true,
		Emulator: EmulatorOptions{HazardChecker: true}})
	require.NoError(t, err)
	defer d.Close()
	tk := d.DefaultTask()
	in, err := d.FromFloat32(1, 5000, seq(5000, func(i int) float32 { return float32(i % 3) }))
	require.NoError(t, err)
	out, err := d.Empty(1, 1, Float32)
	require.NoError(t, err)
	var ws *buffer
	for i := range 10000 {
		require.NoError(t, tk.Sum(out, in, SumAll), "launch %d", i)
		if i == 0 {
			ws = d.reduce.buf
			require.NotNil(t, ws)
		}
		require.Same(t, ws, d.reduce.buf, "launch %d replaced the workspace", i)
	}
	got, err := out.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{4999}, got)
	require.Empty(t, d.Hazards())
}

// One fault does not disable large Sums for good: a Sum whose input
// failed (it never ran: the workspace is still zero), and a reduction
// kernel that itself faulted (the workspace may be dirty), leave later
// Sums of healthy inputs, on new tasks, correct, with the zero check on
// and the hazard checker clean.
func TestSumRecoversAfterAFault(t *testing.T) {
	for _, faulted := range []string{"rocsync_mul_f32", "rocsync_sum_all_f32"} {
		for _, p := range allPolicies {
			t.Run(faulted+"/"+p.String(), func(t *testing.T) {
				d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff, CheckReductionWorkspace: true,
					Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 7}})
				require.NoError(t, err)
				defer d.Close() // reports the faulted queue
				tk, err := d.NewTask()
				require.NoError(t, err)
				in, err := d.FromFloat32(1, 10000, seq(10000, func(int) float32 { return 1 }))
				require.NoError(t, err)
				out, err := d.Empty(1, 1, Float32)
				require.NoError(t, err)
				faultOn(d, faulted)
				x, err := tk.Mul(in, in)
				if err == nil {
					err = tk.Sum(out, x, SumAll)
				}
				if err == nil {
					_, err = out.Float32s()
				}
				require.ErrorIs(t, err, ErrFault)
				d.machine().SetFaultInjector(nil)
				require.ErrorIs(t, tk.Synchronize(), ErrFault)
				require.ErrorIs(t, tk.Close(), ErrFault)
				for range 2 {
					tk2, err := d.NewTask()
					require.NoError(t, err)
					out2, err := d.Empty(1, 1, Float32)
					require.NoError(t, err)
					require.NoError(t, tk2.Sum(out2, in, SumAll))
					got, err := out2.Float32s()
					require.NoError(t, err)
					require.Equal(t, []float32{10000}, got)
					require.NoError(t, tk2.Close())
				}
				require.Empty(t, d.Hazards())
			})
		}
	}
}

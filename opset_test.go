package rocsync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/userkernel"
)

// The open op set's program, on the emulator with
// the hazard checker and random delays, under every policy: one chain
// that
//  1. uploads host data into an existing array (x);
//  2. runs SAXPY compiled from OpenCL source (y = 2x + y);
//  3. makes the user's own rocBLAS call on the raw stream of a library
//     call (c = y·b);
//  4. runs a host function in the middle (e = c/2 + i, computed on the
//     host from c);
//  5. runs rocsync's own kernel on the host function's output (g = 3e);
//  6. runs reductions, one through the zeroed workspace, with the zero
//     check on (s = the row sums of g, total = the sum of g);
//  7. downloads y, c, e, g, s and total asynchronously.
//
// Every result equals the CPU reference (the row sums within float32
// rounding: the kernels add in another order), and the checker finds no
// race.
func TestOpSetAcceptance(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			k := loadSAXPY(t, d)
			blas := d.machine().BLAS()
			h, err := blas.CreateHandle(0)
			require.NoError(t, err)
			defer blas.DestroyHandle(h)
			runOpSetProgram(t, d, k, func(stream uintptr, n int, c, y, b *Array) error {
				if err := blas.SetStream(h, hip.Stream(stream)); err != nil {
					return err
				}
				m := int32(n)
				return blas.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, m, m, m, 1,
					hip.DevicePtr(b.ptr), m, hip.DevicePtr(y.ptr), m, 0, hip.DevicePtr(c.ptr), m)
			})
			require.Empty(t, d.Hazards())
		})
	}
}

// userSgemm is the user's own BLAS call, made in a LibraryCall on the raw
// stream: column-major cᵀ = bᵀ·yᵀ on n×n float32 arrays, which is
// row-major c = y·b.
type userSgemm func(stream uintptr, n int, c, y, b *Array) error

// runOpSetProgram is the open op set's program on d, with the SAXPY
// kernel k (OpenCL source, loaded for d) and the user's BLAS call: every
// result is checked against the CPU reference, and the reduction
// workspace's zero check is on.
func runOpSetProgram(t *testing.T, d *Device, k *Kernel, gemm userSgemm) {
	tk, err := d.NewTask()
	require.NoError(t, err)
	const n = 96 // SumAll's 9216 elements take three slices: the workspace is used
	hostX := seq(n*n, func(i int) float32 { return float32(i%11) - 5 })
	hostB := seq(n*n, func(i int) float32 { return float32((i*7)%5) - 2 })

	// CPU reference, row-major.
	wantY := make([]float32, n*n)
	for i := range wantY {
		wantY[i] = 2*hostX[i] + 1
	}
	wantC := make([]float32, n*n)
	for r := range n {
		for c := range n {
			var s float32
			for k := range n {
				s += wantY[r*n+k] * hostB[k*n+c]
			}
			wantC[r*n+c] = s
		}
	}
	wantE := make([]float32, n*n)
	wantG := make([]float32, n*n)
	for i := range wantE {
		wantE[i] = wantC[i]/2 + float32(i)
		wantG[i] = 3 * wantE[i]
	}
	wantS := make([]float64, n)
	var wantTotal float64
	for i, v := range wantG {
		wantS[i/n] += float64(v)
		wantTotal += float64(v)
	}

	// 1. Upload into existing arrays.
	x, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	b, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.UploadFloat32(x, hostX))
	require.NoError(t, tk.UploadFloat32(b, hostB))
	// 2. SAXPY from OpenCL source, over y written by rocsync's kernel.
	y, err := tk.Full(n, n, Float32, 1)
	require.NoError(t, err)
	require.NoError(t, tk.Launch(k, userkernel.Grid1D(n*n, 64), InOut(y), In(x), F32(2), U32(n*n)))
	// 3. The user's own BLAS call on the raw stream.
	c, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.LibraryCall([]Arg{In(y), In(b), Out(c)}, func(stream uintptr) error {
		return gemm(stream, n, c, y, b)
	}))
	// 4. A host function in the middle of the chain.
	e, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.HostFunc([]Arg{In(c), Out(e)}, func(h *HostAccess) error {
		vals, err := h.Float32s(c)
		if err != nil {
			return err
		}
		for i := range vals {
			vals[i] = vals[i]/2 + float32(i)
		}
		return h.SetFloat32s(e, vals)
	}))
	// 5. Back on the GPU, after the host function.
	g, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.ScaleInto(g, 3, e))
	// 6. A reduction, through the device's zeroed workspace.
	d.reduce.check = true
	s, err := d.Empty(n, 1, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.Sum(s, g, SumRows))
	total, err := d.Empty(1, 1, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.Sum(total, g, SumAll))
	require.NotNil(t, d.reduce.buf, "SumAll used the workspace")
	// 7. Asynchronous downloads.
	var gotY, gotC, gotE, gotG [n * n]float32
	var gotS [n]float32
	var gotTotal [1]float32
	var pends []*Pending
	for _, dl := range []struct {
		a   *Array
		dst []float32
	}{{y, gotY[:]}, {c, gotC[:]}, {e, gotE[:]}, {g, gotG[:]}, {s, gotS[:]}, {total, gotTotal[:]}} {
		pd, err := tk.DownloadFloat32(dl.a, dl.dst)
		require.NoError(t, err)
		pends = append(pends, pd)
	}
	for _, pd := range pends {
		require.NoError(t, pd.Wait(context.Background()))
	}
	require.Equal(t, wantY, gotY[:], "SAXPY")
	require.Equal(t, wantC, gotC[:], "the user's BLAS call")
	require.Equal(t, wantE, gotE[:], "the host function")
	require.Equal(t, wantG, gotG[:], "the kernel after the host function")
	for i, v := range gotS {
		require.InEpsilon(t, wantS[i], float64(v), 1e-5, "row sum %d", i)
	}
	require.InEpsilon(t, wantTotal, float64(gotTotal[0]), 1e-5, "the sum of g")
	require.NoError(t, tk.Close())
	require.NoError(t, d.Synchronize())
}

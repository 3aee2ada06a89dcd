package rocsync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/userkernel"
)

// The op path on an NVIDIA GPU: ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda.

// saxpyPTX is SAXPY as PTX, for the CUDA backend without clang: the same
// signature as saxpySource.
const saxpyPTX = `.version 7.0
.target sm_80
.address_size 64

.visible .entry saxpy(
	.param .u64 saxpy_param_0,
	.param .u64 saxpy_param_1,
	.param .f32 saxpy_param_2,
	.param .u32 saxpy_param_3
)
{
	.reg .pred %p<2>;
	.reg .f32 %f<5>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [saxpy_param_0];
	ld.param.u64 %rd2, [saxpy_param_1];
	ld.param.f32 %f1, [saxpy_param_2];
	ld.param.u32 %r2, [saxpy_param_3];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r1, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r1, %r2;
	@%p1 bra $L__BB0_2;
	cvta.to.global.u64 %rd3, %rd2;
	mul.wide.u32 %rd4, %r1, 4;
	add.s64 %rd5, %rd3, %rd4;
	ld.global.f32 %f2, [%rd5];
	cvta.to.global.u64 %rd6, %rd1;
	add.s64 %rd7, %rd6, %rd4;
	ld.global.f32 %f3, [%rd7];
	fma.rn.f32 %f4, %f2, %f1, %f3;
	st.global.f32 [%rd7], %f4;
$L__BB0_2:
	ret;
}
`

func openCUDAOpPath(t *testing.T, p Policy) *Device {
	t.Helper()
	if !testenv.OnCUDA() {
		t.Skip("set ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda to run on an NVIDIA GPU")
	}
	d, err := Open(Options{Backend: CUDA, Policy: p, LogLevel: LogOff,
		KernelBuilder: userkernel.NewBuilder(userkernel.Options{CacheDir: t.TempDir()})})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

// The PTX is what the CUDA tests load; its signature must match the
// OpenCL one, which this checks without a GPU.
func TestSAXPYPTXSignature(t *testing.T) {
	src, err := userkernel.PTX([]byte(saxpyPTX))
	require.NoError(t, err)
	img, err := userkernel.NewBuilder(userkernel.Options{NoDiskCache: true}).Build(src, userkernel.Device{ISA: "sm_90"})
	require.NoError(t, err)
	k, err := img.Kernel("saxpy")
	require.NoError(t, err)
	require.Len(t, k.Params, 4)
	block := make([]byte, k.ArgsSize)
	args := []userkernel.Arg{userkernel.Buffer(0x1000, userkernel.ReadWrite), userkernel.Buffer(0x2000, userkernel.Read),
		userkernel.Float32(2), userkernel.Uint32(64)}
	require.NoError(t, k.Pack(block, userkernel.Grid1D(64, 64), args))
	args[2] = userkernel.Float64(2)
	require.ErrorIs(t, k.Pack(block, userkernel.Grid1D(64, 64), args), userkernel.ErrKernelArgs)
}

func TestCUDAUserKernelSAXPY(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openCUDAOpPath(t, p)
			src, err := userkernel.PTX([]byte(saxpyPTX))
			require.NoError(t, err)
			k, err := d.LoadKernel(src, "saxpy")
			require.NoError(t, err)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 1 << 16
			xs := seq(n, func(i int) float32 { return float32(i%17) - 8 })
			x, err := d.FromFloat32(1, n, xs)
			require.NoError(t, err)
			y, err := tk.Full(1, n, Float32, 0.5)
			require.NoError(t, err)
			for range 3 {
				require.NoError(t, tk.Launch(k, userkernel.Grid1D(n, 256), InOut(y), In(x), F32(2), U32(n)))
			}
			require.ErrorIs(t, tk.Launch(k, userkernel.Grid1D(n, 256), InOut(y), In(x), F64(2), U32(n)), userkernel.ErrKernelArgs)
			got, err := y.Float32s()
			require.NoError(t, err)
			for i := range got {
				want := float32(0.5)
				for range 3 {
					want = 2*xs[i] + want
				}
				require.Equal(t, want, got[i], "element %d", i)
			}
			require.NoError(t, tk.Close())
		})
	}
}

// A library call makes the user's own cuBLAS call on the raw CUstream,
// ordered after rocsync's kernels and before the read-back.
func TestCUDALibraryCall(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openCUDAOpPath(t, p)
			blas, err := cublas.Open()
			require.NoError(t, err)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 64
			a, err := tk.Full(n, n, Float32, 2)
			require.NoError(t, err)
			b, err := tk.Full(n, n, Float32, 3)
			require.NoError(t, err)
			c, err := d.Empty(n, n, Float32)
			require.NoError(t, err)
			var h cublas.Handle
			err = tk.LibraryCall([]Arg{In(a), In(b), Out(c)}, func(stream uintptr) error {
				if h == 0 {
					if h, err = blas.Create(); err != nil {
						return err
					}
				}
				if err := blas.SetStream(h, cuda.Stream(stream)); err != nil {
					return err
				}
				return blas.Sgemm(h, cublas.OpN, cublas.OpN, n, n, n, 1, cuda.DevicePtr(a.ptr), n, cuda.DevicePtr(b.ptr), n,
					0, cuda.DevicePtr(c.ptr), n)
			})
			require.NoError(t, err)
			require.NoError(t, tk.ScaleInto(c, 0.5, c))
			got, err := c.Float32s()
			require.NoError(t, err)
			for i, v := range got {
				require.Equal(t, float32(2*3*n)/2, v, "element %d", i)
			}
			require.NoError(t, tk.Close())
			require.NoError(t, tk.Device().Synchronize())
			require.NoError(t, d.DefaultTask().LibraryCall(nil, func(uintptr) error { return blas.Destroy(h) }))
		})
	}
}

// Uploads, device copies and asynchronous downloads on the GPU.
func TestCUDACopies(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openCUDAOpPath(t, p)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 256
			acc, want := uploadAndAccumulate(t, d, tk, n)
			got, pend := copyAndDownload(t, d, tk, acc)
			require.NoError(t, pend.Wait(context.Background()))
			require.Equal(t, want, got)
			require.NoError(t, tk.Close())
		})
	}
}

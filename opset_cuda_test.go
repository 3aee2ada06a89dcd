package rocsync

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cudadev"
	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/userkernel"
)

// The open op set's program on an NVIDIA GPU, from OpenCL source, on
// a machine that may have no compiler: the kernel is compiled here (with
// clang) into a kernel cache carried to the GPU machine, where the
// Builder finds no clang and loads the cache's prebuilt entry for the
// GPU's architecture (verified; a missing or corrupt one is an
// ErrNoCompiler error, never loaded).
//
// Fill the cache here (the targets default to sm_90, the H100):
//
//	ROCSYNC_FILL_KERNEL_CACHE=$PWD/.gpubin/kcache ROCSYNC_FILL_TARGETS=sm_90 \
//	    go test -count=1 -run TestFillKernelCache -v .
//
// and run there, the cache private to the user that runs the test:
//
//	chmod -R go= .gpubin/kcache
//	ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda NCCL_NVLS_ENABLE=0 ROCSYNC_KERNEL_CACHE=$PWD/.gpubin/kcache \
//	    .gpubin/root.test -test.run 'TestOpSetAcceptanceCUDA' -test.v

// TestFillKernelCache compiles the acceptance program's OpenCL SAXPY for
// each target in $ROCSYNC_FILL_TARGETS (comma-separated, default sm_90)
// into the cache at $ROCSYNC_FILL_KERNEL_CACHE, and checks that a Builder
// without a compiler loads each from there.
func TestFillKernelCache(t *testing.T) {
	dir := os.Getenv("ROCSYNC_FILL_KERNEL_CACHE")
	if dir == "" {
		t.Skip("set ROCSYNC_FILL_KERNEL_CACHE to a directory to fill it")
	}
	targets := os.Getenv("ROCSYNC_FILL_TARGETS")
	if targets == "" {
		targets = "sm_90"
	}
	src, err := userkernel.OpenCL(saxpySource)
	require.NoError(t, err)
	for _, isa := range strings.Split(targets, ",") {
		dev := userkernel.Device{ISA: strings.TrimSpace(isa)}
		_, err := userkernel.NewBuilder(userkernel.Options{CacheDir: dir}).Build(src, dev)
		require.NoError(t, err, "compiling for %s", dev.ISA)
		noCompiler := userkernel.NewBuilder(userkernel.Options{CacheDir: dir, Clang: "/nonexistent/clang", LLD: "/nonexistent/ld.lld"})
		img, err := noCompiler.Build(src, dev)
		require.NoError(t, err, "loading %s without a compiler", dev.ISA)
		_, err = img.Kernel("saxpy")
		require.NoError(t, err)
		require.Equal(t, uint64(1), noCompiler.Stats().PrebuiltHits)
		t.Logf("%s: prebuilt entry in %s", dev.ISA, dir)
	}
}

// TestOpSetAcceptanceCUDA runs the acceptance program (upload, OpenCL
// SAXPY, the user's own cuBLAS call on the raw CUstream, a host function
// mid-chain, reductions with the workspace zero check, asynchronous
// downloads) under every policy on the GPU, equal to the CPU reference.
// The kernel comes from $ROCSYNC_KERNEL_CACHE (prebuilt, when the machine
// has no clang). The hazard checker is the emulator's: TestOpSetAcceptance
// runs the same program with it.
func TestOpSetAcceptanceCUDA(t *testing.T) {
	if !testenv.OnCUDA() {
		t.Skip("set ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda to run on an NVIDIA GPU")
	}
	blas, err := cublas.Open()
	require.NoError(t, err)
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			builder := userkernel.NewBuilder(userkernel.Options{}) // $ROCSYNC_KERNEL_CACHE
			d, err := Open(Options{Backend: CUDA, Policy: p, LogLevel: LogOff, KernelBuilder: builder})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			src, err := userkernel.OpenCL(saxpySource)
			require.NoError(t, err)
			k, err := d.LoadKernel(src, "saxpy")
			if errors.Is(err, userkernel.ErrNoCompiler) {
				t.Fatalf("no compiler and no prebuilt SAXPY for this GPU in %q (fill it with TestFillKernelCache): %v", builder.CacheDir(), err)
			}
			require.NoError(t, err)
			s := builder.Stats()
			t.Logf("kernel from %s: compiles %d, disk hits %d, prebuilt hits %d", builder.CacheDir(), s.Compiles, s.DiskHits, s.PrebuiltHits)
			var h cublas.Handle
			runOpSetProgram(t, d, k, func(stream uintptr, n int, c, y, b *Array) error {
				if h == 0 {
					if h, err = blas.Create(); err != nil {
						return err
					}
				}
				if err := blas.SetStream(h, cuda.Stream(stream)); err != nil {
					return err
				}
				return blas.Sgemm(h, cublas.OpN, cublas.OpN, n, n, n, 1, cuda.DevicePtr(b.ptr), n, cuda.DevicePtr(y.ptr), n,
					0, cuda.DevicePtr(c.ptr), n)
			})
			require.NoError(t, d.DefaultTask().LibraryCall(nil, func(uintptr) error { return blas.Destroy(h) }))
		})
	}
}

// A host function in the middle of a GPU chain on the GPU: kernel →
// host function → kernel → library call, under DeviceSide. With 64-bit
// stream memory operations (an H100) the GPU ops after the function wait
// for it on the device (cuStreamWaitValue64 on the word its host lane
// publishes): no boundary host wait; without them, boundary waits.
func TestHostFuncMidChainCUDA(t *testing.T) {
	d := openCUDAOpPath(t, DeviceSide)
	support := d.drv.(*cudadev.Device).HostWaitsOnDevice()
	t.Logf("streams wait for host lanes on the device: %v", support == nil)
	tk, err := d.NewTask()
	require.NoError(t, err)
	const n = 1 << 16
	x, err := tk.Full(1, n, Float32, 3)
	require.NoError(t, err)
	y, err := d.Empty(1, n, Float32)
	require.NoError(t, err)
	for it := range 10 {
		require.NoError(t, tk.ScaleInto(x, 2, x))
		require.NoError(t, tk.HostFunc([]Arg{In(x), Out(y)}, func(h *HostAccess) error {
			v, err := h.Float32s(x)
			if err != nil {
				return err
			}
			for i := range v {
				v[i]++
			}
			return h.SetFloat32s(y, v)
		}))
		require.NoError(t, tk.AddInto(x, x, y), "iteration %d", it) // x = 2x + (2x+1), on the kernel stream after the function
	}
	got, err := x.Float32s()
	require.NoError(t, err)
	want := float32(3)
	for range 10 {
		want = 2*want + (2*want + 1)
	}
	for i, v := range got {
		require.Equal(t, want, v, "element %d", i)
	}
	s := tk.Stats()
	t.Logf("boundary host waits %d, device waits %d", s.HostWaitsFor(ReasonBoundary), s.DeviceWaits)
	if support == nil {
		require.Zero(t, s.HostWaitsFor(ReasonBoundary), "the kernels after the host functions waited on the device")
	} else {
		require.NotZero(t, s.HostWaitsFor(ReasonBoundary))
	}
	require.NoError(t, tk.Close())
}

// On CUDA the HSA form of the handshake is a typed ErrUnavailable error,
// and nothing is poisoned.
func TestSignalHandshakeUnavailableOnCUDA(t *testing.T) {
	d := openCUDAOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := tk.Full(4, 4, Float32, 1)
	require.NoError(t, err)
	_, err = tk.ExportSignal(In(x))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, tk.ImportSignal(1, Out(x)), ErrUnavailable)
	require.ErrorIs(t, tk.ReleaseSignal(1), ErrUnavailable)
	require.NoError(t, x.Err())
}

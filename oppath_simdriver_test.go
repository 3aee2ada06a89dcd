//go:build linux && (amd64 || arm64)

package rocsync

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/userkernel"
)

// opSetProgram is the open op set's program on any ROCm device (the emulator's or
// Debian's real ROCr and HIP over the simulated driver): uploads into
// existing arrays, SAXPY compiled from OpenCL for the device's target, a
// gemm the user makes directly with rocBLAS on the task's raw HIP stream,
// and an asynchronous download, compared with the CPU reference.
func opSetProgram(t *testing.T, d *Device) {
	t.Helper()
	k := loadSAXPY(t, d)
	_, blas, ok := rocmLibraries(d)
	require.True(t, ok, "a ROCm device")
	require.NotNil(t, blas, "rocBLAS is loaded")
	tk, err := d.NewTask()
	require.NoError(t, err)
	defer func() { require.NoError(t, tk.Close()) }()

	const n = 16
	xs := seq(n*n, func(i int) float32 { return float32(i%17) - 8 })
	ys := seq(n*n, func(i int) float32 { return float32(i%5) - 2 })
	x, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	y, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	c, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	require.NoError(t, tk.UploadFloat32(x, xs))
	require.NoError(t, tk.UploadFloat32(y, ys))
	require.NoError(t, tk.Launch(k, userkernel.Grid1D(n*n, 64), InOut(y), In(x), F32(2), U32(n*n)))

	h, err := blas.CreateHandle(0)
	require.NoError(t, err)
	defer func() { require.NoError(t, blas.DestroyHandle(h)) }()
	// Column-major sgemm of the row-major buffers y and x computes
	// cᵀ = yᵀ·xᵀ, that is c = x·y in row-major order.
	require.NoError(t, tk.LibraryCall([]Arg{In(y), In(x), Out(c)}, func(stream uintptr) error {
		if err := blas.SetStream(h, hip.Stream(stream)); err != nil {
			return err
		}
		return blas.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, n, n, n, 1,
			hip.DevicePtr(y.ptr), n, hip.DevicePtr(x.ptr), n, 0, hip.DevicePtr(c.ptr), n)
	}))
	gotY := make([]float32, n*n)
	gotC := make([]float32, n*n)
	pendY, err := tk.DownloadFloat32(y, gotY)
	require.NoError(t, err)
	pendC, err := tk.DownloadFloat32(c, gotC)
	require.NoError(t, err)
	require.NoError(t, pendY.Wait(context.Background()))
	require.NoError(t, pendC.Wait(context.Background()))

	wantY := make([]float32, n*n)
	for i := range wantY {
		wantY[i] = 2*xs[i] + ys[i]
	}
	require.Equal(t, wantY, gotY, "SAXPY")
	wantC := make([]float32, n*n)
	for i := range n {
		for j := range n {
			var s float32 // small integers: exact in float32 in any order
			for l := range n {
				s += xs[i*n+l] * wantY[l*n+j]
			}
			wantC[i*n+j] = s
		}
	}
	require.Equal(t, wantC, gotC, "the user's gemm on the raw stream")
}

// The same program on the emulator, with the hazard checker and random
// delays on, under the policies the simulated driver runs it with.
func TestOpSetProgramOnEmulator(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			opSetProgram(t, d)
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// inWholeSimulatedChild reports whether the test runs in its child over
// the simulated driver (simblas loaded); in the parent it runs that child
// and, where the simulated driver is required, fails the test if the child
// skipped any part of the program.
func inWholeSimulatedChild(t *testing.T) bool {
	if kfdsim.InChild(t) {
		return true
	}
	parentOfSimulatedDriver(t)
	out := kfdsim.Run(t, simulatedSuiteRuns[0].gpus, t.Name(), kfdsim.Options{Release: simRelease(t), Env: simblasEnv(t)})
	logChildSummary(t, out)
	if os.Getenv(kfdsim.EnvRequired) == "1" && strings.Contains(out, "--- SKIP") {
		t.Fatalf("the child skipped part of the program (no clang for OpenCL?):\n%s", out)
	}
	return false
}

// The open op set's program on Debian's real ROCr and HIP 5.2.3 over the
// simulated driver (gfx90a): SAXPY is compiled at run time for gfx90a in
// the code-object version HIP 5.2.3 loads, and the simulated GPU runs it
// through the Go reference the Executor finds by the kernel's name (its
// signature read from the loaded code object's metadata note, every
// operand range checked with kfdsim_gpu_access). Without the reference the
// dispatch faults its queue, as any kernel the simulated GPU cannot run.
func TestUserKernelsAndCopiesOnSimulatedDriver(t *testing.T) {
	if !inWholeSimulatedChild(t) {
		return
	}
	e, err := kfdsim.RegisterExecutor("")
	require.NoError(t, err)
	defer e.Close()
	refs := &userkernel.References{}
	require.NoError(t, refs.Register("saxpy", saxpyReference))
	builder := userkernel.NewBuilder(userkernel.Options{CacheDir: t.TempDir()})
	open := func(t *testing.T, p Policy) *Device {
		devs, err := OpenAll(Options{Backend: ROCm, Policy: p, KernelBuilder: builder, LogLevel: LogOff})
		require.NoError(t, err)
		require.Len(t, devs, 1)
		t.Cleanup(func() { _ = devs[0].Close() })
		return devs[0]
	}

	t.Run("WithoutReferenceFaults", func(t *testing.T) {
		e.UseReferences(nil)
		d := open(t, DeviceSide)
		k := loadSAXPY(t, d)
		x, err := d.FromFloat32(1, 64, make([]float32, 64))
		require.NoError(t, err)
		y, err := d.FromFloat32(1, 64, make([]float32, 64))
		require.NoError(t, err)
		before := e.Stats().Unknown
		require.NoError(t, d.DefaultTask().Launch(k, userkernel.Grid1D(64, 64), InOut(y), In(x), F32(1), U32(64)))
		_, err = y.Float32s()
		require.ErrorIs(t, err, ErrFault)
		require.Equal(t, before+1, e.Stats().Unknown)
	})

	e.UseReferences(refs)
	for _, p := range []Policy{DeviceSide, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			d := open(t, p)
			before := e.Stats()
			opSetProgram(t, d)
			after := e.Stats()
			require.Greater(t, after.Runs, before.Runs)
			require.Equal(t, before.Unknown, after.Unknown, "the executor ran every kernel")
			require.Equal(t, before.Faults, after.Faults)
		})
	}
	require.Equal(t, uint64(1), builder.Stats().Compiles, "compiled once, loaded on each device from the builder's cache")

	// A reference that reaches past its buffer goes through
	// kfdsim_gpu_access like the GPU would: the VM fault is raised, the
	// queue faults, and the output is poisoned instead of the Go process
	// touching memory the GPU has no mapping for.
	t.Run("OutOfBoundsReferenceIsAVMFault", func(t *testing.T) {
		bad := &userkernel.References{}
		require.NoError(t, bad.Register("saxpy", func(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
			_, err := mem.Bytes(args[1].Ptr()+1<<40, 4, false)
			require.ErrorIs(t, err, kfdsim.ErrVMFault)
			return err
		}))
		e.UseReferences(bad)
		defer e.UseReferences(refs)
		d := open(t, DeviceSide)
		k := loadSAXPY(t, d)
		x, err := d.FromFloat32(1, 64, make([]float32, 64))
		require.NoError(t, err)
		y, err := d.FromFloat32(1, 64, make([]float32, 64))
		require.NoError(t, err)
		before := e.Stats().Faults
		require.NoError(t, d.DefaultTask().Launch(k, userkernel.Grid1D(64, 64), InOut(y), In(x), F32(1), U32(64)))
		_, err = y.Float32s()
		require.ErrorIs(t, err, ErrFault)
		// The executor counts the fault when the reference returns, after
		// the thunk has raised it and ROCr has already failed the queue
		// (which is what woke the read-back): wait for the count, which
		// must reach exactly one more fault.
		require.Eventually(t, func() bool { return e.Stats().Faults >= before+1 }, 10*time.Second, time.Millisecond)
		require.Equal(t, before+1, e.Stats().Faults)
	})
}

// The open op set's program, the one TestOpSetAcceptance runs on the
// emulator, as one child process over Debian's real ROCr and HIP 5.2.3 on
// the simulated driver (gfx90a), under every policy: upload, SAXPY
// compiled from OpenCL at run time, the user's own rocBLAS sgemm on the
// raw HIP stream (simblas: a gemm kernel the simulated GPU runs, launched
// through HIP's real stream machinery), a host function mid-chain (its
// GPU successors wait on an HSA signal the lane completes, or on the host
// where HIP 5.2.3 refuses stream memory operations on signals), rocsync's
// kernel after it, SumRows and SumAll through the zeroed workspace with
// the zero check on, and asynchronous downloads, equal to the CPU
// reference. The hazard checker is the emulator's; here the simulated GPU
// checks every access against ROCr's mappings instead.
func TestOpSetAcceptanceOnSimulatedDriver(t *testing.T) {
	if !inWholeSimulatedChild(t) {
		return
	}
	e, err := kfdsim.RegisterExecutor("")
	require.NoError(t, err)
	defer e.Close()
	refs := &userkernel.References{}
	require.NoError(t, refs.Register("saxpy", saxpyReference))
	e.UseReferences(refs)
	builder := userkernel.NewBuilder(userkernel.Options{CacheDir: t.TempDir()})
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			devs, err := OpenAll(Options{Backend: ROCm, Policy: p, KernelBuilder: builder, LogLevel: LogOff})
			require.NoError(t, err)
			require.Len(t, devs, 1)
			d := devs[0]
			defer func() { require.NoError(t, d.Close()) }()
			k := loadSAXPY(t, d)
			_, blas, ok := rocmLibraries(d)
			require.True(t, ok)
			require.NotNil(t, blas, "rocBLAS (simblas) is loaded")
			h, err := blas.CreateHandle(0)
			require.NoError(t, err)
			defer func() {
				// The task whose stream the handle was bound to is closed.
				require.NoError(t, blas.SetStream(h, 0))
				require.NoError(t, blas.DestroyHandle(h))
			}()
			before := e.Stats()
			runOpSetProgram(t, d, k, func(stream uintptr, n int, c, y, b *Array) error {
				if err := blas.SetStream(h, hip.Stream(stream)); err != nil {
					return err
				}
				m := int32(n)
				return blas.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, m, m, m, 1,
					hip.DevicePtr(b.ptr), m, hip.DevicePtr(y.ptr), m, 0, hip.DevicePtr(c.ptr), m)
			})
			after := e.Stats()
			require.Greater(t, after.Runs, before.Runs)
			require.Equal(t, before.Unknown, after.Unknown, "the simulated GPU ran every kernel")
			require.Equal(t, before.Faults, after.Faults)
			t.Logf("%v: %v", p, d.Stats())
		})
	}
	require.Equal(t, uint64(1), builder.Stats().Compiles, "compiled once, then from the builder's cache")
}

// The HSA form of the handshake on Debian's real ROCr and HIP 5.2.3 over
// the simulated driver: the exported signal is completed by ROCr's own
// marker packet on the simulated command processor, the foreign signal is
// a real hsa_signal_t the test's goroutine completes, and rocsync's queue
// waits for it with a real barrier-AND packet. Every policy with an HSA
// queue; results equal the reference.
func TestSignalHandshakeOnSimulatedDriver(t *testing.T) {
	if !kfdsim.InChild(t) {
		parentOfSimulatedDriver(t)
		out := kfdsim.Run(t, simulatedSuiteRuns[0].gpus, t.Name(), kfdsim.Options{Release: simRelease(t), Env: simblasEnv(t)})
		logChildSummary(t, out)
		return
	}
	e, err := kfdsim.RegisterExecutor("")
	require.NoError(t, err)
	defer e.Close()
	for _, p := range signalPolicies {
		t.Run(p.String(), func(t *testing.T) {
			devs, err := OpenAll(Options{Backend: ROCm, Policy: p, LogLevel: LogOff})
			require.NoError(t, err)
			require.Len(t, devs, 1)
			d := devs[0]
			defer func() { require.NoError(t, d.Close()) }()
			before := e.Stats()
			signalBracket(t, d)
			require.Equal(t, before.Faults, e.Stats().Faults)
		})
	}
}

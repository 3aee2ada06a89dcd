package rocsync_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/userkernel"
)

// On the emulator a user kernel needs no compiler: without one (and
// without a cached build) its signature comes from the OpenCL source's
// declaration, and its Go reference reads its arguments as typed slices
// and scalars. Launches are checked against that signature as against a
// compiled one's, under every policy, with the hazard checker on.
func TestUserKernelOnTheEmulatorWithoutACompiler(t *testing.T) {
	refs := &userkernel.References{}
	require.NoError(t, refs.Register("saxpy", func(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
		n := min(int(args[3].Uint32()), int(g.Grid[0]))
		y, err := userkernel.Slice[float32](mem, args[0], n)
		if err != nil {
			return err
		}
		x, err := userkernel.Slice[float32](mem, args[1], n)
		if err != nil {
			return err
		}
		a := args[2].Float32()
		for i := range y {
			y[i] += a * x[i]
		}
		return nil
	}))
	src, err := userkernel.OpenCL(`
kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}`)
	require.NoError(t, err)
	for _, p := range []rocsync.Policy{rocsync.WaitAlways, rocsync.SkipSameQueue, rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge} {
		t.Run(p.String(), func(t *testing.T) {
			b := userkernel.NewBuilder(userkernel.Options{NoDiskCache: true, Clang: filepath.Join(t.TempDir(), "no-clang")})
			dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, Policy: p, LogLevel: rocsync.LogOff, KernelBuilder: b,
				Emulator: rocsync.EmulatorOptions{KernelReferences: refs, HazardChecker: true}})
			require.NoError(t, err)
			defer func() { require.NoError(t, dev.Close()) }()
			saxpy, err := dev.LoadKernel(src, "saxpy")
			require.NoError(t, err)
			require.EqualValues(t, 1, b.Stats().Declared)
			require.Zero(t, b.Stats().Compiles)

			tk := dev.DefaultTask()
			x, err := dev.FromFloat32(1, 4, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			y, err := tk.Full(1, 4, rocsync.Float32, 10)
			require.NoError(t, err)
			require.NoError(t, tk.Launch(saxpy, userkernel.Grid1D(4, 64), rocsync.InOut(y), rocsync.In(x), rocsync.F32(2), rocsync.U32(4)))
			z, err := tk.Mul(y, x) // rocsync's kernel after the user's
			require.NoError(t, err)
			got, err := z.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{12, 28, 48, 72}, got)

			err = tk.Launch(saxpy, userkernel.Grid1D(4, 64), rocsync.InOut(y), rocsync.In(x), rocsync.F32(2), rocsync.F32(4))
			require.ErrorIs(t, err, userkernel.ErrKernelArgs)
			require.EqualError(t, err, "rocsync: Launch: invalid argument: saxpy: userkernel: kernel saxpy argument 3 (n): kind mismatch: want 4-byte integer scalar (uint), got float32 4")
			require.NoError(t, dev.Synchronize())
			require.Empty(t, dev.Hazards())
		})
	}
}

// A kernel cache that cannot be used does not stop LoadKernel, and the
// device's log says so once: with the default builder, whose Stats the
// user cannot reach, nothing else would tell them that every process
// compiles its kernels again.
func TestLoadKernelLogsAnUnusableKernelCacheOnce(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notADir, nil, 0o600))
	b := userkernel.NewBuilder(userkernel.Options{CacheDir: notADir, Clang: filepath.Join(t.TempDir(), "no-clang")})
	var log bytes.Buffer
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogWarn, LogWriter: &log, KernelBuilder: b})
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	for _, name := range []string{"one", "two"} {
		src, err := userkernel.OpenCL("kernel void " + name + "(global float* y) { y[get_global_id(0)] = 1; }")
		require.NoError(t, err)
		_, err = dev.LoadKernel(src, name)
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, b.Stats().CacheErrors)
	require.Equal(t, 1, strings.Count(log.String(), "the kernel cache cannot be used"), "log:\n%s", log.String())
	require.Contains(t, log.String(), notADir)
}

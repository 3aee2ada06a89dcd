package rocsync_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// copyRefs is a user kernel copy(y, x, n) whose x is not declared const,
// as OpenCL code often leaves its inputs, and a kernel inc(y, x, n) whose
// reference writes y and then fails.
func copyRefs(t *testing.T) *userkernel.References {
	refs := &userkernel.References{}
	read := func(args []userkernel.Arg, mem userkernel.Memory) (y, x []float32, err error) {
		n := int(args[2].Uint32())
		if y, err = userkernel.Slice[float32](mem, args[0], n); err != nil {
			return nil, nil, err
		}
		x, err = userkernel.Slice[float32](mem, args[1], n)
		return y, x, err
	}
	require.NoError(t, refs.Register("copy", func(_ userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
		y, x, err := read(args, mem)
		copy(y, x)
		return err
	}))
	require.NoError(t, refs.Register("inc", func(_ userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
		y, x, err := read(args, mem)
		if err != nil {
			return err
		}
		for i := range y {
			y[i] = x[i] + 1
		}
		return errors.New("the reference fails after writing")
	}))
	return refs
}

const copySources = `kernel void copy(global float* y, global float* x, uint n) { size_t i = get_global_id(0); if (i < n) y[i] = x[i]; }
kernel void inc(global float* y, global float* x, uint n) { size_t i = get_global_id(0); if (i < n) y[i] = x[i] + 1; }`

func openCopyKernels(t *testing.T) (*rocsync.Device, *rocsync.Kernel, *rocsync.Kernel) {
	b := userkernel.NewBuilder(userkernel.Options{NoDiskCache: true, Clang: filepath.Join(t.TempDir(), "no-clang")})
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff, KernelBuilder: b,
		Emulator: rocsync.EmulatorOptions{KernelReferences: copyRefs(t), HazardChecker: true, MaxDelay: 50 * time.Microsecond, Seed: 3}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	src, err := userkernel.OpenCL(copySources)
	require.NoError(t, err)
	cp, err := dev.LoadKernel(src, "copy")
	require.NoError(t, err)
	inc, err := dev.LoadKernel(src, "inc")
	require.NoError(t, err)
	return dev, cp, inc
}

// Two tasks whose kernels only read a shared input declared non-const
// (passed In) are not a race: the emulator records a write only where the
// reference changed the bytes. It recorded one wherever the metadata
// allowed it, and reported write/write hazards on the input.
func TestKernelsReadingANonConstInputAreNoRace(t *testing.T) {
	dev, cp, _ := openCopyKernels(t)
	x, err := dev.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	var ys []*rocsync.Array
	for range 2 {
		tk, err := dev.NewTask()
		require.NoError(t, err)
		y, err := dev.Empty(1, 4, rocsync.Float32)
		require.NoError(t, err)
		require.NoError(t, tk.Launch(cp, userkernel.Grid1D(4, 64), rocsync.Out(y), rocsync.In(x), rocsync.U32(4)))
		ys = append(ys, y)
	}
	for _, y := range ys {
		got, err := y.Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{1, 2, 3, 4}, got)
	}
	require.Empty(t, dev.Hazards())

	// The checker still sees a write that is one: an In argument the
	// kernel does write (y, passed In by mistake) races with a read of
	// it on another task.
	tk1, err := dev.NewTask()
	require.NoError(t, err)
	tk2, err := dev.NewTask()
	require.NoError(t, err)
	z, err := dev.FromFloat32(1, 4, []float32{9, 9, 9, 9})
	require.NoError(t, err)
	require.NoError(t, tk1.Launch(cp, userkernel.Grid1D(4, 64), rocsync.In(z), rocsync.In(x), rocsync.U32(4)))
	rocsync.QuiesceEmulator(dev) // the write done, unobserved: only the checker sees the race
	require.NoError(t, tk2.Launch(cp, userkernel.Grid1D(4, 64), rocsync.Out(ys[0]), rocsync.In(z), rocsync.U32(4)))
	require.NoError(t, dev.Synchronize())
	require.NotEmpty(t, dev.Hazards(), "a kernel that writes what it was given In races with a reader")
}

// After a user kernel's reference fails, the recovery the guide gives (a
// new task, then rewriting the poisoned output) is no race with the failed
// dispatch: the host learned of the failure from the queue, after the
// dispatch's last access. The checker reported the rewrite and its
// read-back as unordered with it.
func TestRecoveryAfterAFailedReferenceIsNoRace(t *testing.T) {
	dev, _, inc := openCopyKernels(t)
	x, err := dev.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := dev.Empty(1, 4, rocsync.Float32)
	require.NoError(t, err)
	t1, err := dev.NewTask()
	require.NoError(t, err)
	require.NoError(t, t1.Launch(inc, userkernel.Grid1D(4, 64), rocsync.Out(y), rocsync.In(x), rocsync.U32(4)))
	require.ErrorIs(t, t1.Synchronize(), rocsync.ErrFault)
	_ = t1.Close()
	t2, err := dev.NewTask()
	require.NoError(t, err)
	require.NoError(t, t2.Fill(y, 7))
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{7, 7, 7, 7}, got)
	got, err = x.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2, 3, 4}, got)
	require.Empty(t, dev.Hazards())
}

// A kernel with char, short, uchar and ushort parameters launches with
// I8, I16, U8 and U16, and its reference reads them back signed or
// unsigned; a scalar of another width is refused. (Such a kernel loaded,
// and no argument could launch it.)
func TestNarrowIntegerArguments(t *testing.T) {
	refs := &userkernel.References{}
	require.NoError(t, refs.Register("narrow", func(_ userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
		y, err := userkernel.Slice[int32](mem, args[0], 4)
		if err != nil {
			return err
		}
		y[0], y[1], y[2], y[3] = args[1].Int32(), args[2].Int32(), int32(args[3].Uint32()), int32(args[4].Uint32())
		return nil
	}))
	b := userkernel.NewBuilder(userkernel.Options{NoDiskCache: true, Clang: filepath.Join(t.TempDir(), "no-clang")})
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff, KernelBuilder: b,
		Emulator: rocsync.EmulatorOptions{KernelReferences: refs, HazardChecker: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	src, err := userkernel.OpenCL(`kernel void narrow(global int* y, char c, short s, uchar uc, ushort us) {
	y[0] = c; y[1] = s; y[2] = uc; y[3] = us; }`)
	require.NoError(t, err)
	k, err := dev.LoadKernel(src, "narrow")
	require.NoError(t, err)
	y, err := dev.NewBuffer(16)
	require.NoError(t, err)
	tk := dev.DefaultTask()
	require.NoError(t, tk.Launch(k, userkernel.Grid1D(1, 64), rocsync.Out(y), rocsync.I8(-3), rocsync.I16(-300), rocsync.U8(250), rocsync.U16(60000)))
	raw, err := y.Bytes()
	require.NoError(t, err)
	got := make([]int32, 4)
	for i := range got {
		got[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	require.Equal(t, []int32{-3, -300, 250, 60000}, got)
	err = tk.Launch(k, userkernel.Grid1D(1, 64), rocsync.Out(y), rocsync.I32(-3), rocsync.I16(1), rocsync.U8(1), rocsync.U16(1))
	require.ErrorIs(t, err, userkernel.ErrKernelArgs)
	require.ErrorContains(t, err, "1-byte integer scalar")
	require.Empty(t, dev.Hazards())
}

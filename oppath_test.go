package rocsync

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/userkernel"
)

const saxpySource = `
kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}`

// saxpyReference is the emulator's stand-in for the compiled SAXPY: it
// reads its arguments from the packed kernarg block, as the GPU would.
func saxpyReference(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
	n := min(args[3].Uint64(), uint64(g.Grid[0]))
	a := float32(args[2].Float64())
	y, err := mem.Bytes(args[0].Ptr(), n*4, true)
	if err != nil {
		return err
	}
	x, err := mem.Bytes(args[1].Ptr(), n*4, false)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	for i := uint64(0); i < n; i++ {
		xi := math.Float32frombits(le.Uint32(x[4*i:]))
		yi := math.Float32frombits(le.Uint32(y[4*i:]))
		le.PutUint32(y[4*i:], math.Float32bits(a*xi+yi))
	}
	return nil
}

var allPolicies = []Policy{DeviceSide, SkipSameQueue, WaitAlways, Unified, DeviceBridge}

// openOpPath opens the emulator with the hazard checker and random delays,
// SAXPY's reference registered and a private kernel cache.
func openOpPath(t *testing.T, p Policy) *Device {
	t.Helper()
	refs := &userkernel.References{}
	require.NoError(t, refs.Register("saxpy", saxpyReference))
	d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		KernelBuilder: userkernel.NewBuilder(userkernel.Options{CacheDir: t.TempDir()}),
		Emulator:      EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 3, KernelReferences: refs}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func loadSAXPY(t *testing.T, d *Device) *Kernel {
	t.Helper()
	src, err := userkernel.OpenCL(saxpySource)
	require.NoError(t, err)
	k, err := d.LoadKernel(src, "saxpy")
	if errors.Is(err, userkernel.ErrNoCompiler) {
		t.Skip("no clang for OpenCL:", err)
	}
	require.NoError(t, err)
	return k
}

var (
	seq = testcheck.Seq
	b2f = testcheck.B2F
)

// uploadAndAccumulate uploads 20 host patterns in turn into an n×n array
// x, overwriting each host slice as soon as its upload returns, and
// accumulates acc += 2x after each; it returns acc and the CPU reference.
func uploadAndAccumulate(t *testing.T, d *Device, tk *Task, n int) (*Array, []float32) {
	t.Helper()
	x, err := d.Empty(n, n, Float32)
	require.NoError(t, err)
	acc, err := tk.Full(n, n, Float32, 0)
	require.NoError(t, err)
	want := make([]float32, n*n)
	for it := range 20 {
		host := seq(n*n, func(i int) float32 { return float32(i%7 + it) })
		require.NoError(t, tk.UploadFloat32(x, host)) // waits for the AXPY reading x before
		for i := range host {
			host[i] = -1 // the caller may reuse its slice at once
			want[i] += 2 * float32(i%7+it)
		}
		require.NoError(t, tk.AXPYInto(acc, 2, x, acc))
	}
	return acc, want
}

// copyAndDownload copies src on the device and starts an asynchronous
// download of the copy; the caller waits on the returned Pending.
func copyAndDownload(t *testing.T, d *Device, tk *Task, src *Array) ([]float32, *Pending) {
	t.Helper()
	cp, err := d.Empty(src.Rows(), src.Cols(), Float32)
	require.NoError(t, err)
	require.NoError(t, tk.CopyBuffer(cp, src))
	got := make([]float32, cp.Rows()*cp.Cols())
	pend, err := tk.DownloadFloat32(cp, got)
	require.NoError(t, err)
	return got, pend
}

// SAXPY compiled from OpenCL runs through the op path between rocsync's
// own kernels and a gemm, under every policy, with the hazard checker and
// random delays on, and equals the CPU reference.
func TestUserKernelSAXPY(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			k := loadSAXPY(t, d)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 32 * 32
			xs := seq(n, func(i int) float32 { return float32(i%17) - 8 })
			x, err := d.FromFloat32(32, 32, xs)
			require.NoError(t, err)
			y, err := tk.Full(32, 32, Float32, 0.5) // rocsync's kernel writes y
			require.NoError(t, err)
			for range 3 {
				require.NoError(t, tk.Launch(k, userkernel.Grid1D(n, 64), InOut(y), In(x), F32(2), U32(n)))
			}
			id, err := d.FromFloat32(32, 32, seq(n, func(i int) float32 { return b2f(i/32 == i%32) }))
			require.NoError(t, err)
			z, err := tk.MatMul(y, id, false, false) // the library stream reads y
			require.NoError(t, err)
			got, err := z.Float32s()
			require.NoError(t, err)
			for i := range got {
				want := float32(0.5)
				for range 3 {
					want = 2*xs[i] + want
				}
				require.Equal(t, want, got[i], "element %d", i)
			}
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// Declaring SAXPY's output as read-only leaves its write out of y's sync
// state: the gemm reading y on the library stream is not ordered after it,
// and the hazard checker reports the race.
func TestUserKernelMissingWriteIsARace(t *testing.T) {
	d := openOpPath(t, DeviceBridge)
	k := loadSAXPY(t, d)
	tk := d.DefaultTask()
	const n = 16 * 16
	x, err := d.FromFloat32(16, 16, seq(n, func(i int) float32 { return float32(i) }))
	require.NoError(t, err)
	y, err := d.FromFloat32(16, 16, seq(n, func(int) float32 { return 1 }))
	require.NoError(t, err)
	require.NoError(t, tk.Launch(k, userkernel.Grid1D(n, 64), In(y), In(x), F32(2), U32(n)))
	d.machine().Quiesce() // let it finish, unobserved by the host (and ordered for Go's race detector)
	_, err = tk.MatMul(y, x, false, false)
	require.NoError(t, err)
	require.NoError(t, d.Synchronize())
	require.NotEmpty(t, d.Hazards(), "the checker must see the undeclared write")
}

// A wrong argument is a typed error before anything is submitted, and the
// kernel's buffers keep what they held.
func TestUserKernelWrongArguments(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	k := loadSAXPY(t, d)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	require.NoError(t, err)
	y, err := d.FromFloat32(1, 64, seq(64, func(int) float32 { return 3 }))
	require.NoError(t, err)
	g := userkernel.Grid1D(64, 64)
	cases := map[string][]Arg{
		"too few":         {InOut(y), In(x), F32(2)},
		"scalar type":     {InOut(y), In(x), F64(2), U32(64)},
		"scalar size":     {InOut(y), In(x), F32(2), U64(64)},
		"buffer for int":  {InOut(y), In(x), F32(2), In(x)},
		"write to const":  {InOut(y), InOut(x), F32(2), U32(64)},
		"scalar for ptr":  {U64(1), In(x), F32(2), U32(64)},
		"nil array":       {InOut((*Array)(nil)), In(x), F32(2), U32(64)},
		"zero Arg":        {InOut(y), {}, F32(2), U32(64)},
		"too many":        {InOut(y), In(x), F32(2), U32(64), U32(1)},
		"other type kind": {InOut(y), In(x), I32(2), U32(64)},
	}
	for name, args := range cases {
		err := tk.Launch(k, g, args...)
		require.Error(t, err, name)
		var e *Error
		require.ErrorAs(t, err, &e, name)
		if name == "nil array" {
			require.ErrorIs(t, err, ErrNilArray, name)
			continue
		}
		require.ErrorIs(t, err, ErrInvalid, name)
		require.ErrorIs(t, err, userkernel.ErrKernelArgs, name)
	}
	err = tk.Launch(k, userkernel.Grid1D(64, 2048), InOut(y), In(x), F32(2), U32(64))
	require.ErrorIs(t, err, userkernel.ErrGeometry)
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, seq(64, func(int) float32 { return 3 }), got)
	require.Empty(t, d.Hazards())
}

// A library call gets the raw HIP stream: the user's own rocBLAS call on
// it is ordered after rocsync's kernel that wrote its input and before the
// read-back, under every policy.
func TestLibraryCallRawStream(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 8
			a, err := tk.Full(n, n, Float32, 2) // HSA queue (the stream under Unified)
			require.NoError(t, err)
			b, err := tk.Full(n, n, Float32, 3)
			require.NoError(t, err)
			c, err := d.Empty(n, n, Float32)
			require.NoError(t, err)
			blas := d.machine().BLAS()
			h, err := blas.CreateHandle(0)
			require.NoError(t, err)
			defer blas.DestroyHandle(h)
			err = tk.LibraryCall([]Arg{In(a), In(b), Out(c)}, func(stream uintptr) error {
				if err := blas.SetStream(h, hip.Stream(stream)); err != nil {
					return err
				}
				return blas.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, n, n, n, 1,
					hip.DevicePtr(a.ptr), n, hip.DevicePtr(b.ptr), n, 0, hip.DevicePtr(c.ptr), n)
			})
			require.NoError(t, err)
			require.NoError(t, tk.ScaleInto(c, 0.5, c)) // back on the kernel queue
			got, err := c.Float32s()
			require.NoError(t, err)
			for i, v := range got {
				require.Equal(t, float32(2*3*n)/2, v, "element %d", i)
			}
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// Leaving out a declared read, or the declared write, of a library call
// makes the hazard checker report a race.
func TestLibraryCallMissingAccessIsARace(t *testing.T) {
	for _, drop := range []string{"read", "write"} {
		t.Run(drop, func(t *testing.T) {
			d := openOpPath(t, DeviceBridge)
			tk := d.DefaultTask()
			const n = 8
			a, err := tk.Full(n, n, Float32, 2)
			require.NoError(t, err)
			c, err := d.Empty(n, n, Float32)
			require.NoError(t, err)
			blas := d.machine().BLAS()
			h, err := blas.CreateHandle(0)
			require.NoError(t, err)
			defer blas.DestroyHandle(h)
			ops := []Arg{In(a), Out(c)}
			if drop == "read" {
				ops = ops[1:]
			} else {
				ops = ops[:1]
			}
			d.machine().Quiesce() // the kernel finishes, unobserved by the host
			require.NoError(t, tk.LibraryCall(ops, func(stream uintptr) error {
				if err := blas.SetStream(h, hip.Stream(stream)); err != nil {
					return err
				}
				return blas.Sgemm(h, rocblas.OperationNone, rocblas.OperationNone, n, n, n, 1,
					hip.DevicePtr(a.ptr), n, hip.DevicePtr(a.ptr), n, 0, hip.DevicePtr(c.ptr), n)
			}))
			d.machine().Quiesce()
			require.NoError(t, tk.ScaleInto(c, 2, c))
			require.NoError(t, d.Synchronize())
			require.NotEmpty(t, d.Hazards(), "the checker must see the undeclared %s", drop)
		})
	}
}

// An error from a library call's function is an ErrFault error that
// poisons what the call writes, and not what it reads.
func TestLibraryCallErrorPoisons(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	a, err := tk.Full(4, 4, Float32, 1)
	require.NoError(t, err)
	c, err := d.Empty(4, 4, Float32)
	require.NoError(t, err)
	cause := errors.New("rocfft: plan failed")
	err = tk.LibraryCall([]Arg{In(a), Out(c)}, func(uintptr) error { return cause })
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, c.Err(), cause)
	require.NoError(t, a.Err())
	_, err = c.Float32s()
	require.ErrorIs(t, err, ErrFault)
	_, err = a.Float32s()
	require.NoError(t, err)
	// Overwriting c recovers it.
	require.NoError(t, tk.Fill(c, 2))
	require.NoError(t, c.Err())

	require.ErrorIs(t, tk.LibraryCall([]Arg{In(a)}, nil), ErrInvalid)
	require.ErrorIs(t, tk.LibraryCall([]Arg{F32(1)}, func(uintptr) error { return nil }), ErrInvalid)
}

// A Buffer is tracked like an array; an array's Buffer is the same memory
// and sync state.
func TestBufferBasics(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	_, err := d.NewBuffer(0)
	require.ErrorIs(t, err, ErrShape)
	b, err := d.NewBuffer(64)
	require.NoError(t, err)
	require.Equal(t, 64, b.Size())
	x, err := d.FromFloat32(4, 4, seq(16, func(i int) float32 { return float32(i) }))
	require.NoError(t, err)
	xb := x.Buffer()
	require.Equal(t, 64, xb.Size())
	raw, err := xb.Bytes()
	require.NoError(t, err)
	require.Equal(t, float32(5), math.Float32frombits(binary.LittleEndian.Uint32(raw[20:])))
	require.NoError(t, xb.Free())
	_, err = x.Float32s()
	require.ErrorIs(t, err, ErrFreed)
	require.ErrorIs(t, x.Free(), ErrFreed)
	require.NoError(t, b.Free())
	require.ErrorIs(t, b.Free(), ErrFreed)
	var nb *Buffer
	require.ErrorIs(t, nb.Free(), ErrNilArray)
	require.Zero(t, nb.Size())
}

// A user kernel launch, after its first, allocates nothing.
func TestUserKernelLaunchAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	d := openOpPath(t, Unified)
	k := loadSAXPY(t, d)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(1, 256, make([]float32, 256))
	require.NoError(t, err)
	y, err := d.FromFloat32(1, 256, make([]float32, 256))
	require.NoError(t, err)
	g := userkernel.Grid1D(256, 64)
	launch := func() {
		if err := tk.Launch(k, g, InOut(y), In(x), F32(1), U32(256)); err != nil {
			panic(err)
		}
	}
	// Warm-up: the emulated stream's argument buffers grow to the
	// launches in flight at once.
	for range 100 {
		launch()
	}
	require.NoError(t, d.Synchronize())
	allocs := testing.AllocsPerRun(50, launch)
	require.NoError(t, d.Synchronize())
	// The emulator's own work per launch (its HIP command, its queue
	// goroutine) allocates; rocsync's part must not add to the emulator's
	// cost of a built-in kernel.
	base := testing.AllocsPerRun(50, func() {
		if err := tk.AXPYInto(y, 1, x, y); err != nil {
			panic(err)
		}
	})
	require.NoError(t, d.Synchronize())
	require.LessOrEqual(t, allocs, base, "a user kernel launch allocates more than a built-in one")
}

// Uploads into an existing array and asynchronous downloads are ordered
// with kernels and gemms under every policy, reuse their staging memory
// once the copies completed, and equal the CPU reference.
func TestUploadDownload(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 16
			acc, want := uploadAndAccumulate(t, d, tk, n)
			got, pend := copyAndDownload(t, d, tk, acc)
			called := make(chan error, 1)
			pend.Then(func(err error) { called <- err })
			require.NoError(t, pend.Wait(context.Background()))
			require.NoError(t, <-called)
			require.Equal(t, want, got)
			slots, _ := d.Staged()
			require.LessOrEqual(t, slots, maxStaging, "staging memory is reused once its copies complete")
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// Copies' misuse is a typed error.
func TestCopyErrors(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	y, err := d.Empty(2, 2, Float64)
	require.NoError(t, err)
	require.ErrorIs(t, tk.UploadFloat32(x, make([]float32, 3)), ErrShape)
	require.ErrorIs(t, tk.UploadFloat64(x, make([]float64, 4)), ErrDType)
	require.ErrorIs(t, tk.Upload(nil, nil), ErrNilArray)
	require.ErrorIs(t, tk.CopyBuffer(x, y), ErrShape)
	require.ErrorIs(t, tk.CopyBuffer(x, x), ErrInvalid)
	_, err = tk.DownloadFloat32(y, make([]float32, 4))
	require.ErrorIs(t, err, ErrDType)
	// A download of a poisoned array fails at once.
	cause := errors.New("library failed")
	require.ErrorIs(t, tk.LibraryCall([]Arg{Out(x)}, func(uintptr) error { return cause }), ErrFault)
	_, err = tk.DownloadFloat32(x, make([]float32, 4))
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, err, cause)
}

// Each kind of copy, submitted without declaring what it reads or writes,
// is a race the hazard checker reports.
func TestCopyMissingAccessIsARace(t *testing.T) {
	for _, dir := range []driver.CopyDirection{driver.HostToDevice, driver.DeviceToHost, driver.DeviceToDevice} {
		op := &driver.CopyOp{Direction: dir}
		t.Run(op.Kind().String(), func(t *testing.T) {
			d := openOpPath(t, DeviceBridge)
			tk := d.DefaultTask()
			x, err := tk.Full(4, 4, Float32, 1) // written on the kernel queue
			require.NoError(t, err)
			y, err := d.Empty(4, 4, Float32)
			require.NoError(t, err)
			require.NoError(t, tk.ScaleInto(y, 2, x)) // read on the kernel queue
			// The last op writes x again: a later dispatch recycling the
			// first one's signal would let the host learn of the first
			// write (an acquire), and the copy would be ordered after it
			// by chance. Nothing learns of the last op before the copy.
			require.NoError(t, tk.ScaleInto(x, 1, x))
			d.machine().Quiesce()
			slot, err := d.staging.take(d, "test", 64)
			require.NoError(t, err)
			op.Host, op.Size = slot.p, 64
			op.Dst, op.Src = x.ptr, x.ptr
			if dir == driver.DeviceToDevice {
				op.Dst = y.ptr // write-after-read on y, read-after-write on x
			}
			f, err := tk.submit("copy without operands", op, nil)
			require.NoError(t, err)
			d.staging.put(slot, f)
			require.NoError(t, d.Synchronize())
			require.NotEmpty(t, d.Hazards(), "the checker must see the undeclared access")
		})
	}
}

// A second device (a second run) loads the compiled kernel from the disk
// cache without compiling; an unknown kernel name is a typed error.
func TestLoadKernelDiskCacheAndErrors(t *testing.T) {
	dir := t.TempDir()
	src, err := userkernel.OpenCL(saxpySource)
	require.NoError(t, err)
	var builders []*userkernel.Builder
	for range 2 {
		b := userkernel.NewBuilder(userkernel.Options{CacheDir: dir})
		builders = append(builders, b)
		d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, KernelBuilder: b})
		require.NoError(t, err)
		_, err = d.LoadKernel(src, "saxpy")
		if errors.Is(err, userkernel.ErrNoCompiler) {
			t.Skip("no clang for OpenCL:", err)
		}
		require.NoError(t, err)
		if b.Stats().Declared > 0 {
			// Without clang the emulator takes the kernel's declaration,
			// and the disk cache holds compiled builds only.
			require.NoError(t, d.Close())
			t.Skip("no clang for OpenCL: the emulator took the kernel's declaration")
		}
		_, err = d.LoadKernel(src, "saxpy") // loaded once per device
		require.NoError(t, err)
		_, err = d.LoadKernel(src, "sxapy")
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorIs(t, err, userkernel.ErrNoKernel)
		require.NoError(t, d.Close())
	}
	require.Equal(t, uint64(1), builders[0].Stats().Compiles)
	require.Equal(t, uint64(0), builders[1].Stats().Compiles, "the second run compiles nothing")
	require.Equal(t, uint64(1), builders[1].Stats().DiskHits)
}

// On the emulator, a user kernel without a registered reference faults
// its queue when it runs, like a kernel the GPU cannot execute: the
// launch's output is poisoned and the read-back reports the fault.
func TestUserKernelWithoutReferenceFaults(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff,
		KernelBuilder: userkernel.NewBuilder(userkernel.Options{CacheDir: t.TempDir()})})
	require.NoError(t, err)
	defer d.Close()
	k := loadSAXPY(t, d)
	tk, err := d.NewTask()
	require.NoError(t, err)
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	require.NoError(t, err)
	y, err := d.FromFloat32(1, 64, make([]float32, 64))
	require.NoError(t, err)
	require.NoError(t, tk.Launch(k, userkernel.Grid1D(64, 64), InOut(y), In(x), F32(1), U32(64)))
	_, err = y.Float32s()
	require.ErrorIs(t, err, ErrFault)
	_, err = x.Float32s()
	require.NoError(t, err, "what the kernel only read is sound")
}

// A user kernel that fails on the emulator fails its launch under every
// policy, HSA queues included, with the kernel and the cause in the error:
// a missing reference (userkernel.ErrNoReference), the reference's own
// error, or a panic in it, which must not take the process down.
func TestUserKernelFailureNamesKernelAndCause(t *testing.T) {
	boom := errors.New("boom in the reference")
	cases := []struct {
		name string
		ref  userkernel.ReferenceFunc
		is   error
		text string
	}{
		{"missing", nil, userkernel.ErrNoReference, "no reference"},
		{"error", func(userkernel.Geometry, []userkernel.Arg, userkernel.Memory) error { return boom }, boom, "boom"},
		{"panic", func(_ userkernel.Geometry, args []userkernel.Arg, _ userkernel.Memory) error {
			_ = args[len(args)+1] // index out of range
			return nil
		}, userkernel.ErrReferencePanic, "index out of range"},
	}
	for _, p := range allPolicies {
		for _, c := range cases {
			t.Run(p.String()+"/"+c.name, func(t *testing.T) {
				refs := &userkernel.References{}
				if c.ref != nil {
					require.NoError(t, refs.Register("saxpy", c.ref))
				}
				d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
					KernelBuilder: userkernel.NewBuilder(userkernel.Options{CacheDir: t.TempDir()}),
					Emulator:      EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 3, KernelReferences: refs}})
				require.NoError(t, err)
				t.Cleanup(func() { _ = d.Close() })
				k := loadSAXPY(t, d)
				y, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
				require.NoError(t, err)
				x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
				require.NoError(t, err)
				if err = d.DefaultTask().Launch(k, userkernel.Grid1D(4, 64), InOut(y), In(x), F32(2), U32(4)); err == nil {
					_, err = y.Float32s()
				}
				require.ErrorIs(t, err, ErrFault)
				require.ErrorIs(t, err, c.is)
				require.ErrorContains(t, err, "saxpy")
				require.ErrorContains(t, err, c.text)
			})
		}
	}
}

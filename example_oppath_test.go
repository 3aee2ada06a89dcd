package rocsync_test

import (
	"context"
	"fmt"
	"os"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/backends"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/userkernel"
)

// A user kernel from OpenCL C, compiled at run time for the device (and
// cached on disk), launched between rocsync's own ops: its arguments are
// checked against the kernel's metadata, and the buffers' accesses order
// it. The emulator cannot run GPU code, so it runs SAXPY as the Go
// reference registered for the kernel's name, which reads its arguments
// as typed slices and scalars; a GPU runs the compiled code. The emulator
// needs no compiler: without clang it reads the kernel's signature from
// its declaration.
func Example_userKernel() {
	refs := &userkernel.References{}
	_ = refs.Register("saxpy", func(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
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
	})
	cache, _ := os.MkdirTemp("", "rocsync-example-")
	defer os.RemoveAll(cache)
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff,
		KernelBuilder: userkernel.NewBuilder(userkernel.Options{CacheDir: cache}),
		Emulator:      rocsync.EmulatorOptions{KernelReferences: refs}})
	if err != nil {
		panic(err)
	}
	defer dev.Close()

	src, _ := userkernel.OpenCL(`
kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}`)
	saxpy, err := dev.LoadKernel(src, "saxpy")
	if err != nil {
		fmt.Println(err)
		return
	}
	t := dev.DefaultTask()
	x, _ := dev.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	y, _ := t.Full(1, 4, rocsync.Float32, 10) // rocsync's kernel writes y
	err = t.Launch(saxpy, userkernel.Grid1D(4, 64), rocsync.InOut(y), rocsync.In(x), rocsync.F32(2), rocsync.U32(4))
	fmt.Println(err)
	vals, _ := y.Float32s()
	fmt.Println(vals)

	// A mistake is a typed error, not a GPU fault: n is a uint, not a float.
	err = t.Launch(saxpy, userkernel.Grid1D(4, 64), rocsync.InOut(y), rocsync.In(x), rocsync.F32(2), rocsync.F32(4))
	fmt.Println(err)
	// Output:
	// <nil>
	// [12 14 16 18]
	// rocsync: Launch: invalid argument: saxpy: userkernel: kernel saxpy argument 3 (n): kind mismatch: want 4-byte integer scalar (uint), got float32 4
}

// A library call runs the user's own function on the task's raw HIP
// stream (a CUstream on CUDA), ordered after the work that wrote what it
// reads and recorded as the writer of what it writes. Here it is a rocBLAS
// call through the task's handle; it could be rocFFT, MIOpen or any
// library that takes a stream.
func Example_libraryCall() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	_, blas, _ := backends.ROCmLibraries(dev)
	handle, _ := t.BLASHandle()

	a, _ := t.Full(2, 2, rocsync.Float32, 2) // rocsync's kernel on the HSA queue
	b, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	c, _ := dev.Empty(2, 2, rocsync.Float32)
	err = t.LibraryCall([]rocsync.Arg{rocsync.In(a), rocsync.In(b), rocsync.Out(c)}, func(stream uintptr) error {
		// Column-major c = a·b: the handle is bound to stream already.
		return blas.Sgemm(rocblas.Handle(handle), rocblas.OperationNone, rocblas.OperationNone, 2, 2, 2, 1,
			hip.DevicePtr(a.Buffer().Pointer()), 2, hip.DevicePtr(b.Buffer().Pointer()), 2, 0, hip.DevicePtr(c.Buffer().Pointer()), 2)
	})
	fmt.Println(err)
	vals, _ := c.Float32s()
	fmt.Println(vals)
	// Output:
	// <nil>
	// [6 6 14 14]
}

// Uploads into an existing array and downloads are ordered ops that do
// not block the submitting goroutine: the data goes through pinned
// staging memory, and a download's completion can be waited for (or be
// called back by, with Then).
func Example_uploadDownload() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()

	x, _ := dev.Empty(1, 4, rocsync.Float32)
	host := []float32{1, 2, 3, 4}
	_ = t.UploadFloat32(x, host) // returns once host is staged: it may be reused
	host[0] = 100
	_ = t.ScaleInto(x, 10, x) // ordered after the upload
	out := make([]float32, 4)
	pending, _ := t.DownloadFloat32(x, out)
	fmt.Println(pending.Wait(context.Background()), out)
	// Output:
	// <nil> [10 20 30 40]
}

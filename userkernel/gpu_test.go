package userkernel

import (
	"bytes"
	"errors"
	"math"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/cuda"
)

// testdata/saxpy_sm_80.ptx is SAXPY compiled by the Builder, for GPU
// machines without clang; TestTestdataPTXIsFresh keeps it equal to what the
// Builder produces.
const saxpyPTXFile = "testdata/saxpy_sm_80.ptx"

func TestTestdataPTXIsFresh(t *testing.T) {
	b := newBuilder(t)
	img, err := b.Build(saxpy(t), sm80)
	if err != nil {
		t.Fatal(err)
	}
	want := img.Code[:len(img.Code)-1] // without the NUL
	if os.Getenv("USERKERNEL_UPDATE_TESTDATA") == "1" {
		if err := os.WriteFile(saxpyPTXFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(saxpyPTXFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run USERKERNEL_UPDATE_TESTDATA=1 go test -run TestTestdataPTXIsFresh ./userkernel", saxpyPTXFile)
	}
}

// On an NVIDIA GPU (ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda), SAXPY from OpenCL
// (or its committed PTX, where the machine has no clang) runs with the
// argument block Pack writes, and equals the CPU result bit for bit.
func TestGPUSAXPYOnCUDA(t *testing.T) {
	if os.Getenv("ROCSYNC_GPU") != "1" || os.Getenv("ROCSYNC_BACKEND") != "cuda" {
		t.Skip("set ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda to run on an NVIDIA GPU")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lib, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	dev, err := lib.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	major, minor, err := lib.ComputeCapability(dev)
	if err != nil {
		t.Fatal(err)
	}
	arch := "sm_" + itoa(major) + itoa(minor)
	b := NewBuilder(Options{CacheDir: t.TempDir()})
	img, err := b.Build(saxpy(t), Device{ISA: arch})
	if errors.Is(err, ErrNoCompiler) {
		text, rerr := os.ReadFile(saxpyPTXFile)
		if rerr != nil {
			t.Fatal(rerr)
		}
		src, perr := PTX(text)
		if perr != nil {
			t.Fatal(perr)
		}
		img, err = b.Build(src, Device{ISA: arch})
		t.Logf("no clang here: using %s for %s", saxpyPTXFile, arch)
	}
	if err != nil {
		t.Fatal(err)
	}
	k, err := img.Kernel("saxpy")
	if err != nil {
		t.Fatal(err)
	}

	ctx, err := lib.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Release()
	if err := ctx.MakeCurrent(); err != nil {
		t.Fatal(err)
	}
	mod, err := ctx.ModuleLoadData(img.Code)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.ModuleUnload(mod)
	fn, err := ctx.ModuleGetFunction(mod, k.Name)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 20
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i)*0.5, float32(n-i)
	}
	dx, err := ctx.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.MemFree(dx)
	dy, err := ctx.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.MemFree(dy)
	if err := ctx.MemcpyHtoD(dx, unsafe.Pointer(&x[0]), 4*n); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemcpyHtoD(dy, unsafe.Pointer(&y[0]), 4*n); err != nil {
		t.Fatal(err)
	}
	offsets := make([]int, len(k.Params))
	for i, p := range k.Params {
		offsets[i] = int(p.Offset)
	}
	pb, err := cuda.NewParamBlock(int(k.ArgsSize), offsets)
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Free()
	const a = float32(1.5)
	// The last 1000 items are a partial block on AMD; CUDA needs whole
	// blocks, and Pack says so.
	if err := k.Pack(pb.Bytes(), Grid1D(n-1000, 256), nil); !errors.Is(err, ErrGeometry) {
		t.Fatalf("partial block: %v", err)
	}
	g := Grid1D(n, 256)
	args := []Arg{Buffer(uint64(dy), ReadWrite), Buffer(uint64(dx), Read), Float32(a), Uint32(n)}
	if err := k.Pack(pb.Bytes(), g, args); err != nil {
		t.Fatal(err)
	}
	grid := cuda.Dim3{X: g.Grid[0] / g.Workgroup[0], Y: 1, Z: 1}
	block := cuda.Dim3{X: g.Workgroup[0], Y: 1, Z: 1}
	if err := ctx.LaunchKernel(fn, grid, block, 0, 0, pb.Params()); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := ctx.MemcpyDtoH(unsafe.Pointer(&got[0]), dy, 4*n); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		// The source has FP_CONTRACT on by default, so the GPU may fuse:
		// compare against both roundings.
		plain := a*x[i] + y[i]
		fused := float32(math.FMA(float64(a), float64(x[i]), float64(y[i])))
		if got[i] != plain && got[i] != fused {
			t.Fatalf("y[%d] = %v, want %v (or fused %v)", i, got[i], plain, fused)
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

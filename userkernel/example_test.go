package userkernel_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// Compile a SAXPY from OpenCL C for an MI250 (gfx90a) whose runtime is
// HIP 5.2 (which loads code object v4), check a launch against the
// kernel's own metadata and pack its argument block. No GPU is needed:
// only clang-22 and ld.lld-22.
func Example() {
	src, err := userkernel.OpenCL(`
kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}`)
	if err != nil {
		panic(err)
	}
	cacheDir, _ := os.MkdirTemp("", "rocsync-example-")
	defer os.RemoveAll(cacheDir)
	builder := userkernel.NewBuilder(userkernel.Options{CacheDir: cacheDir})

	hip52 := func(v kernels.CodeObjectVersion) bool { return kernels.HIPAccepts(50_203_000, v) }
	img, err := builder.Build(src, userkernel.Device{ISA: "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", Accepts: hip52})
	if err != nil {
		panic(err)
	}
	k, err := img.Kernel("saxpy")
	if err != nil {
		panic(err)
	}
	fmt.Println("built for", img.Target)
	for _, p := range k.Params {
		fmt.Printf("  %d %-2s %-6s %-6s offset %2d size %d read-only %v\n", p.Index, p.Name, p.TypeName, p.Kind, p.Offset, p.Size, p.ReadOnly)
	}

	const n = 1 << 20
	y, x := uint64(0x7f10_0000_0000), uint64(0x7f20_0000_0000) // device addresses
	args := []userkernel.Arg{
		userkernel.Buffer(y, userkernel.ReadWrite),
		userkernel.Buffer(x, userkernel.Read),
		userkernel.Float32(2),
		userkernel.Uint32(n),
	}
	block := make([]byte, k.ArgsSize)
	if err := k.Pack(block, userkernel.Grid1D(n, 256), args); err != nil {
		panic(err)
	}
	fmt.Printf("kernarg block (%d bytes): %x\n", len(block), block)
	for _, a := range k.Accesses(nil, args) {
		fmt.Printf("  argument %d: %#x %s\n", a.Index, a.Ptr, a.Access)
	}

	// A mistake is a typed error, before anything reaches the GPU.
	args[1] = userkernel.Buffer(x, userkernel.Write)
	err = k.Pack(block, userkernel.Grid1D(n, 256), args)
	var argErr *userkernel.ArgError
	fmt.Println(errors.Is(err, userkernel.ErrKernelArgs), errors.As(err, &argErr) && argErr.Name == "x")
	fmt.Println(err)
	// Output:
	// built for gfx90a/v4
	//   0 y  float* buffer offset  0 size 8 read-only false
	//   1 x  float* buffer offset  8 size 8 read-only true
	//   2 a  float  scalar offset 16 size 4 read-only false
	//   3 n  uint   scalar offset 20 size 4 read-only false
	// kernarg block (24 bytes): 00000000107f000000000000207f00000000004000001000
	//   argument 0: 0x7f1000000000 read-write
	//   argument 1: 0x7f2000000000 read
	// true true
	// userkernel: kernel saxpy argument 1 (x): access mismatch: want read (the kernel declares the buffer read-only), got write
}

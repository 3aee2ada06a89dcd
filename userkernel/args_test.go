package userkernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/kernels"
)

func saxpyKernels(t *testing.T) map[string]*Signature {
	b := newBuilder(t)
	src := saxpy(t)
	return map[string]*Signature{
		"gfx90a/v5": buildKernel(t, b, src, Device{ISA: "gfx90a", Accepts: acceptOnly(kernels.CodeObjectV5)}, "saxpy"),
		"gfx90a/v4": buildKernel(t, b, src, Device{ISA: "gfx90a", Accepts: acceptOnly(kernels.CodeObjectV4)}, "saxpy"),
		"sm_80":     buildKernel(t, b, src, Device{ISA: "sm_80"}, "saxpy"),
	}
}

func TestPackSAXPY(t *testing.T) {
	for name, k := range saxpyKernels(t) {
		t.Run(name, func(t *testing.T) {
			block := bytes.Repeat([]byte{0xEE}, 64) // stale bytes must not survive
			args := []Arg{Buffer(0x7f00_0000_1000, ReadWrite), Buffer(0x7f00_0000_2000, Read), Float32(2.5), Uint32(1000)}
			if err := k.Pack(block, Grid1D(1024, 256), args); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 24)
			le := binary.LittleEndian
			le.PutUint64(want[0:], 0x7f00_0000_1000)
			le.PutUint64(want[8:], 0x7f00_0000_2000)
			le.PutUint32(want[16:], math.Float32bits(2.5))
			le.PutUint32(want[20:], 1000)
			if !bytes.Equal(block[:24], want) {
				t.Errorf("block %x, want %x", block[:24], want)
			}
			if !bytes.Equal(block[24:], bytes.Repeat([]byte{0xEE}, 40)) {
				t.Error("Pack wrote past ArgsSize")
			}
			acc := k.Accesses(nil, args)
			if len(acc) != 2 || acc[0] != (BufferAccess{0, 0x7f00_0000_1000, ReadWrite}) || acc[1] != (BufferAccess{1, 0x7f00_0000_2000, Read}) {
				t.Errorf("accesses %+v", acc)
			}
			back, err := k.Unpack(nil, block)
			if err != nil {
				t.Fatal(err)
			}
			wantX := Read // from .is_const; PTX does not record const-ness
			if k.Target.Family == NVIDIA {
				wantX = ReadWrite
			}
			if back[0].Ptr() != 0x7f00_0000_1000 || back[1].Access() != wantX || back[2].Float64() != 2.5 || back[3].Uint64() != 1000 {
				t.Errorf("Unpack gave %v", back)
			}
		})
	}
}

// Every mistake is an *ArgError naming the kernel, the argument and what
// was wanted; nothing is written.
func TestArgErrors(t *testing.T) {
	y, x := Buffer(0x1000, ReadWrite), Buffer(0x2000, Read)
	cases := []struct {
		name    string
		args    []Arg
		problem ArgProblem
		index   int
		amdOnly bool // PTX records neither names nor const-ness
	}{
		{"too few", []Arg{y, x, Float32(1)}, ArgCount, -1, false},
		{"too many", []Arg{y, x, Float32(1), Uint32(1), Uint32(2)}, ArgCount, -1, false},
		{"scalar for buffer", []Arg{Uint64(0x1000), x, Float32(1), Uint32(1)}, ArgKind, 0, false},
		{"buffer for scalar", []Arg{y, x, Buffer(0x3000, Read), Uint32(1)}, ArgKind, 2, false},
		{"int for float", []Arg{y, x, Int32(1), Uint32(1)}, ArgKind, 2, false},
		{"float for int", []Arg{y, x, Float32(1), Float32(1)}, ArgKind, 3, false},
		{"zero Arg", []Arg{y, x, {}, Uint32(1)}, ArgKind, 2, false},
		{"float64 for float", []Arg{y, x, Float64(1), Uint32(1)}, ArgSize, 2, false},
		{"uint64 for uint", []Arg{y, x, Float32(1), Uint64(1)}, ArgSize, 3, false},
		{"write to const", []Arg{y, Buffer(0x2000, Write), Float32(1), Uint32(1)}, ArgAccess, 1, true},
		{"read-write to const", []Arg{y, Buffer(0x2000, ReadWrite), Float32(1), Uint32(1)}, ArgAccess, 1, true},
		{"no access", []Arg{Buffer(0x1000, 0), x, Float32(1), Uint32(1)}, ArgAccess, 0, false},
		{"null buffer", []Arg{Buffer(0, ReadWrite), x, Float32(1), Uint32(1)}, ArgNullBuffer, 0, false},
	}
	for name, k := range saxpyKernels(t) {
		for _, c := range cases {
			if c.amdOnly && k.Target.Family != AMD {
				continue
			}
			block := bytes.Repeat([]byte{0xEE}, 24)
			err := k.Pack(block, Grid1D(256, 64), c.args)
			var ae *ArgError
			if !errors.Is(err, ErrKernelArgs) || !errors.As(err, &ae) {
				t.Errorf("%s %s: %v, want an *ArgError", name, c.name, err)
				continue
			}
			if ae.Kernel != "saxpy" || ae.Problem != c.problem || ae.Index != c.index || ae.Want == "" || ae.Got == "" {
				t.Errorf("%s %s: %+v, want problem %v at %d", name, c.name, ae, c.problem, c.index)
			}
			if k.Target.Family == AMD && c.index >= 0 && ae.Name != []string{"y", "x", "a", "n"}[c.index] {
				t.Errorf("%s %s: name %q", name, c.name, ae.Name)
			}
			if !bytes.Equal(block, bytes.Repeat([]byte{0xEE}, 24)) {
				t.Errorf("%s %s: a refused launch wrote the block", name, c.name)
			}
			if cerr := k.Check(Grid1D(256, 64), c.args); cerr == nil || cerr.Error() != err.Error() {
				t.Errorf("%s %s: Check says %v, Pack %v", name, c.name, cerr, err)
			}
		}
		var ae *ArgError
		if err := k.Pack(make([]byte, 8), Grid1D(256, 64), []Arg{y, x, Float32(1), Uint32(1)}); !errors.As(err, &ae) || ae.Problem != ArgBlock {
			t.Errorf("%s: short block: %v", name, err)
		}
	}
}

// A buffer the compiler found write-only may not be declared Read: the
// write would be hidden from the ordering layer.
func TestWriteOnlyBufferNeedsWrite(t *testing.T) {
	b := newBuilder(t)
	src, err := OpenCL(`kernel void fill(global float* restrict out, float v) { out[get_global_id(0)] = v; }`)
	if err != nil {
		t.Fatal(err)
	}
	k := buildKernel(t, b, src, Device{ISA: "gfx90a"}, "fill")
	if !k.Params[0].WriteOnly {
		t.Skipf("the compiler did not record write_only: %+v", k.Params[0])
	}
	block := make([]byte, k.ArgsSize)
	var ae *ArgError
	if err := k.Pack(block, Grid1D(64, 64), []Arg{Buffer(0x1000, Read), Float32(1)}); !errors.As(err, &ae) || ae.Problem != ArgAccess {
		t.Errorf("Read on a write-only buffer: %v", err)
	}
	for _, acc := range []Access{Write, ReadWrite} {
		if err := k.Pack(block, Grid1D(64, 64), []Arg{Buffer(0x1000, acc), Float32(1)}); err != nil {
			t.Errorf("%v: %v", acc, err)
		}
	}
}

func TestGeometry(t *testing.T) {
	b := newBuilder(t)
	src, err := OpenCL(saxpySource + `
kernel __attribute__((reqd_work_group_size(64, 2, 1))) void fixed(global float* y) { y[get_global_id(0)] = 1.0f; }`)
	if err != nil {
		t.Fatal(err)
	}
	amd := buildKernel(t, b, src, Device{ISA: "gfx90a"}, "saxpy")
	fixed := buildKernel(t, b, src, Device{ISA: "gfx90a"}, "fixed")
	nv := buildKernel(t, b, src, Device{ISA: "sm_80"}, "saxpy")
	if fixed.ReqdWorkgroupSize != [3]uint32{64, 2, 1} || fixed.MaxWorkgroupSize != 128 {
		t.Fatalf("fixed: reqd %v max %d", fixed.ReqdWorkgroupSize, fixed.MaxWorkgroupSize)
	}
	args := []Arg{Buffer(0x1000, ReadWrite), Buffer(0x2000, Read), Float32(1), Uint32(1)}
	block := make([]byte, 64)
	for _, c := range []struct {
		k  *Signature
		g  Geometry
		ok bool
	}{
		{amd, Grid1D(1000, 256), true}, // a partial last workgroup is fine on AMD
		{amd, Grid1D(1024, 512), false},
		{amd, Grid2D(64, 64, 16, 32), false}, // 512 work-items
		{amd, Grid2D(64, 64, 16, 16), true},
		{amd, Grid1D(0, 64), false},
		{amd, Grid1D(64, 0), false},
		{amd, Geometry{Dims: 0, Grid: [3]uint32{1, 1, 1}, Workgroup: [3]uint32{1, 1, 1}}, false},
		{amd, Geometry{Dims: 4}, false},
		{amd, Geometry{Dims: 1, Grid: [3]uint32{64, 2, 0}, Workgroup: [3]uint32{64, 1, 0}}, false},
		{amd, Grid3D([3]uint32{8, 8, 8}, [3]uint32{4, 4, 4}), true},
		{fixed, Grid2D(128, 4, 64, 2), true},
		{fixed, Grid1D(128, 64), false},
		{nv, Grid1D(1024, 256), true},
		{nv, Grid1D(1000, 256), false}, // CUDA runs whole blocks
		{nv, Grid2D(64, 65536*2, 1, 1), false},
	} {
		k := c.k
		a := args
		if k == fixed {
			a = args[:1]
		}
		err := k.Pack(block, c.g, a)
		if c.ok && err != nil {
			t.Errorf("%s %+v: %v", k.Target, c.g, err)
		}
		var ge *GeometryError
		if !c.ok && (!errors.Is(err, ErrGeometry) || !errors.As(err, &ge) || ge.Kernel != k.Name) {
			t.Errorf("%s %+v: %v, want a *GeometryError", k.Target, c.g, err)
		}
	}
}

// Hidden arguments (hipcc's code objects have them) are filled from the
// geometry; a service rocsync does not provide makes the kernel
// unsupported instead of faulting.
func TestHiddenArguments(t *testing.T) {
	meta := kernels.KernelMeta{
		Name: "h", Symbol: "h.kd", KernargSegmentSize: 64, KernargSegmentAlign: 8, MaxFlatWorkgroupSize: 1024,
		Args: []kernels.ArgMeta{
			{Name: "p", Offset: 0, Size: 8, ValueKind: "global_buffer", AddressSpace: "global"},
			{Offset: 8, Size: 4, ValueKind: "hidden_block_count_x"},
			{Offset: 12, Size: 4, ValueKind: "hidden_block_count_y"},
			{Offset: 16, Size: 2, ValueKind: "hidden_group_size_x"},
			{Offset: 18, Size: 2, ValueKind: "hidden_group_size_y"},
			{Offset: 20, Size: 2, ValueKind: "hidden_remainder_x"},
			{Offset: 24, Size: 8, ValueKind: "hidden_global_offset_x"},
			{Offset: 32, Size: 2, ValueKind: "hidden_grid_dims"},
			{Offset: 40, Size: 8, ValueKind: "hidden_none"},
		},
	}
	k := amdKernel(&meta, Target{Family: AMD, Arch: "gfx90a", CodeObject: 5})
	block := bytes.Repeat([]byte{0xEE}, 64)
	if err := k.Pack(block, Grid2D(1000, 6, 256, 3), []Arg{Buffer(0x1000, ReadWrite)}); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	got := []uint64{uint64(le.Uint32(block[8:])), uint64(le.Uint32(block[12:])), uint64(le.Uint16(block[16:])),
		uint64(le.Uint16(block[18:])), uint64(le.Uint16(block[20:])), le.Uint64(block[24:]), uint64(le.Uint16(block[32:])), le.Uint64(block[40:])}
	want := []uint64{3, 2, 256, 3, 1000 % 256, 0, 2, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("hidden %d = %d, want %d (block %x)", i, got[i], want[i], block)
		}
	}
	meta.Args = append(meta.Args, kernels.ArgMeta{Offset: 48, Size: 8, ValueKind: "hidden_hostcall_buffer"})
	img := &Image{Kernels: []*Signature{amdKernel(&meta, k.Target)}}
	if _, err := img.Kernel("h"); !errors.Is(err, ErrUnsupportedKernel) {
		t.Errorf("hostcall kernel: %v", err)
	}
	if _, err := img.Kernel("nope"); !errors.Is(err, ErrNoKernel) {
		t.Errorf("missing kernel: %v", err)
	}
}

// PTX from nvcc declares pointers as plain .u64 and may carry launch
// bounds.
func TestPTXFromNVCC(t *testing.T) {
	ptx := `.version 7.8
.target sm_80
.address_size 64
.visible .entry axpy(
	.param .u64 axpy_param_0,
	.param .f64 axpy_param_1,
	.param .u32 axpy_param_2
)
.maxntid 128, 1, 1
{
	ret;
}
.entry fixed(.param .align 8 .b8 fixed_param_0[16])
.reqntid 32, 2
{
	ret;
}`
	src, err := PTX([]byte(ptx))
	if err != nil {
		t.Fatal(err)
	}
	img, err := src.pickPrebuilt(Device{ISA: "sm_90"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := img.Kernel("axpy")
	if err != nil {
		t.Fatal(err)
	}
	if k.Params[0].Kind != ParamBufferOrScalar || k.Params[1].Offset != 8 || k.Params[2].Offset != 16 || k.ArgsSize != 24 || k.MaxWorkgroupSize != 128 {
		t.Errorf("axpy: %+v", k)
	}
	block := make([]byte, 24)
	for _, first := range []Arg{Buffer(0x1000, ReadWrite), Uint64(0x1000), Int64(7)} {
		if err := k.Pack(block, Grid1D(128, 128), []Arg{first, Float64(2), Uint32(3)}); err != nil {
			t.Errorf("%v as .u64: %v", first, err)
		}
	}
	if err := k.Pack(block, Grid1D(128, 128), []Arg{Uint32(1), Float64(2), Uint32(3)}); !errors.Is(err, ErrKernelArgs) {
		t.Errorf("uint32 as .u64: %v", err)
	}
	if err := k.Pack(block, Grid1D(256, 256), []Arg{Uint64(1), Float64(2), Uint32(3)}); !errors.Is(err, ErrGeometry) {
		t.Errorf(".maxntid 128 with 256: %v", err)
	}
	if _, err := img.Kernel("fixed"); !errors.Is(err, ErrUnsupportedKernel) {
		t.Errorf("struct parameter: %v", err)
	}
	if fixed := img.Kernels[1]; fixed.ReqdWorkgroupSize != [3]uint32{32, 2, 1} {
		t.Errorf(".reqntid: %v", fixed.ReqdWorkgroupSize)
	}
}

// The per-launch host cost: checking and packing a loaded kernel's launch
// allocates nothing.
func TestPackAllocatesNothing(t *testing.T) {
	for name, k := range saxpyKernels(t) {
		block := make([]byte, k.ArgsSize)
		args := []Arg{Buffer(0x1000, ReadWrite), Buffer(0x2000, Read), Float32(2), Uint32(1 << 20)}
		acc := make([]BufferAccess, 0, 4)
		allocs := testing.AllocsPerRun(1000, func() {
			if err := k.Pack(block, Grid1D(1<<20, 256), args); err != nil {
				t.Fatal(err)
			}
			acc = k.Accesses(acc[:0], args)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per launch, want 0", name, allocs)
		}
	}
}

// Unoptimised code keeps hidden arguments for runtime services (the queue
// pointer in v5, the multigrid sync argument in v4) that -O3 removes when
// unused; such a kernel is refused by name, before any launch.
func TestUnoptimisedKernelNamesTheServiceItNeeds(t *testing.T) {
	b := newBuilder(t)
	src, err := OpenCL(saxpySource, "-O0")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []kernels.CodeObjectVersion{kernels.CodeObjectV5, kernels.CodeObjectV4} {
		img, err := b.Build(src, Device{ISA: "gfx90a", Accepts: acceptOnly(v)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = img.Kernel("saxpy")
		if !errors.Is(err, ErrUnsupportedKernel) || !strings.Contains(err.Error(), "hidden_") {
			t.Errorf("%s -O0: %v, want ErrUnsupportedKernel naming a hidden argument", v, err)
		}
	}
}

// A .maxntid whose product passes 2^32 bounds nothing below the hardware's
// maximum: the product is not taken modulo 2^32 (65536·65536 would be 0).
func TestPTXMaxntidProductOverflow(t *testing.T) {
	ptx := `.version 7.8
.target sm_80
.address_size 64
.visible .entry big(.param .u32 big_param_0)
.maxntid 65536, 65536, 1
{
	ret;
}`
	src, err := PTX([]byte(ptx))
	if err != nil {
		t.Fatal(err)
	}
	img, err := src.pickPrebuilt(Device{ISA: "sm_90"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := img.Kernel("big")
	if err != nil {
		t.Fatal(err)
	}
	if k.MaxWorkgroupSize != 1024 {
		t.Fatalf("MaxWorkgroupSize %d, want the hardware's 1024", k.MaxWorkgroupSize)
	}
	if err := k.Pack(make([]byte, k.ArgsSize), Grid1D(256, 256), []Arg{Uint32(1)}); err != nil {
		t.Fatalf("a 256-item workgroup: %v", err)
	}
}

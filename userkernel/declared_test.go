package userkernel

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/kernels"
)

// noCompiler is a Builder that finds no clang, as on a machine without it.
func noCompiler(t testing.TB) *Builder {
	return NewBuilder(Options{NoDiskCache: true, Clang: filepath.Join(t.TempDir(), "no-clang")})
}

// emulated is what an emulator device reports.
var emulated = Device{ISA: "gfx90a", Emulated: true}

// The declarations give the signature clang's metadata gives: names,
// types, offsets (each parameter at its alignment), sizes, kinds, classes,
// and read-only buffers.
func TestDeclarationGivesTheSignature(t *testing.T) {
	src, err := OpenCL(`
// A comment mentioning kernel void fake(int x)
/* kernel void fake2(float y) */
#define N 4
float helper(float v) { return v * 2; }
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void mixed(
	__global float* restrict out, constant int* table, const uint n,
	double d, char c, long l, float4 v, global const unsigned int* idx) {
	out[0] = helper(d);
}
kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}`)
	require.NoError(t, err)
	img, err := noCompiler(t).Build(src, emulated)
	require.NoError(t, err)
	require.True(t, IsDeclaredImage(img.Code))
	require.Len(t, img.Kernels, 2)

	k, err := img.Kernel("saxpy")
	require.NoError(t, err)
	require.Equal(t, "saxpy.kd", k.Symbol)
	require.Equal(t, []Param{
		{Index: 0, Name: "y", Offset: 0, Size: 8, Kind: ParamBuffer, TypeName: "float*"},
		{Index: 1, Name: "x", Offset: 8, Size: 8, Kind: ParamBuffer, TypeName: "float*", ReadOnly: true},
		{Index: 2, Name: "a", Offset: 16, Size: 4, Kind: ParamScalar, Class: ClassFloat, TypeName: "float"},
		{Index: 3, Name: "n", Offset: 20, Size: 4, Kind: ParamScalar, Class: ClassInteger, TypeName: "uint"},
	}, k.Params)
	require.EqualValues(t, 24, k.ExplicitArgsSize)
	require.EqualValues(t, 24, k.ArgsSize)

	m, err := img.Kernel("mixed")
	require.NoError(t, err)
	type at struct {
		off, size uint32
		kind      ParamKind
		class     ScalarClass
		ro        bool
		typ       string
	}
	var got []at
	for _, p := range m.Params {
		got = append(got, at{p.Offset, p.Size, p.Kind, p.Class, p.ReadOnly, p.TypeName})
	}
	require.Equal(t, []at{
		{0, 8, ParamBuffer, 0, false, "float*"},
		{8, 8, ParamBuffer, 0, true, "int*"}, // constant memory
		{16, 4, ParamScalar, ClassInteger, false, "uint"},
		{24, 8, ParamScalar, ClassFloat, false, "double"},
		{32, 1, ParamScalar, ClassInteger, false, "char"},
		{40, 8, ParamScalar, ClassInteger, false, "long"},
		{48, 16, ParamScalar, ClassOther, false, "float4"},
		{64, 8, ParamBuffer, 0, true, "uint*"},
	}, got)

	// The image reads back as the emulator loads it.
	ks, err := ReadDeclaredImage(img.Code)
	require.NoError(t, err)
	require.Len(t, ks, 2)
	require.Equal(t, k.Params, ks[1].Params)
	require.Equal(t, m.Params, ks[0].Params)
	require.Equal(t, k.ArgsSize, ks[1].ArgsSize)
}

// Where clang is found, the declared signature is the one the compiled
// code object's metadata gives (explicit arguments).
func TestDeclarationMatchesTheCompilersMetadata(t *testing.T) {
	src, err := OpenCL(`
kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}
kernel void mixed(global float* out, constant int* table, const uint n, double d, long l, global const ulong* idx, short s, float f) {
	if (n) out[0] = d + table[0] + l + idx[0] + s + f;
}
kernel void constptr(global float* const z, global const float* const x) { z[0] = x[0]; }
__attribute__((reqd_work_group_size(64, 1, 1))) kernel void fixed(global float* y) { y[get_global_id(0)] = 1; }
kernel __attribute__((amdgpu_flat_work_group_size(1, 512))) void wide(global float* y) { y[get_global_id(0)] = 1; }`)
	require.NoError(t, err)
	b := newBuilder(t) // skips without clang
	dev := Device{ISA: "gfx90a", Accepts: acceptOnly(kernels.CodeObjectV5)}
	built, err := b.Build(src, dev)
	require.NoError(t, err)
	declared, err := noCompiler(t).Build(src, Device{ISA: dev.ISA, Accepts: dev.Accepts, Emulated: true})
	require.NoError(t, err)
	require.True(t, IsDeclaredImage(declared.Code))
	for _, name := range []string{"saxpy", "mixed", "constptr", "fixed", "wide"} {
		want, err := built.Kernel(name)
		require.NoError(t, err)
		got, err := declared.Kernel(name)
		require.NoError(t, err)
		require.Equal(t, want.Params, got.Params, name)
		require.Equal(t, want.ExplicitArgsSize, got.ExplicitArgsSize, name)
		require.Equal(t, want.Symbol, got.Symbol, name)
		// The same workgroup limits, so that the emulator without a
		// compiler refuses the launches the GPU would.
		require.Equal(t, want.MaxWorkgroupSize, got.MaxWorkgroupSize, name)
		require.Equal(t, want.ReqdWorkgroupSize, got.ReqdWorkgroupSize, name)
	}
}

// A real GPU never gets a declared image: without a compiler its build is
// ErrNoCompiler, as before.
func TestDeclaredImageOnlyForAnEmulator(t *testing.T) {
	_, err := noCompiler(t).Build(saxpy(t), Device{ISA: "gfx90a"})
	require.ErrorIs(t, err, ErrNoCompiler)
	_, err = noCompiler(t).Build(saxpy(t), Device{ISA: "sm_90", Emulated: true})
	require.ErrorIs(t, err, ErrNoCompiler)
}

// What the parser cannot read is a typed error that says so, beside why
// no compiler was found; declarations given with WithDeclarations are used
// instead of the source's own.
func TestDeclarationErrors(t *testing.T) {
	for name, text := range map[string]string{
		"typedef":        "typedef struct { float a; } pair;\nkernel void k(global pair* p) {}",
		"private ptr":    "kernel void k(float* p) {}",
		"no kernel":      "float f(float x) { return x; }",
		"non-void":       "kernel int k(int x) {}",
		"image":          "kernel void k(read_only image2d_t img) {}",
		"unbalanced":     "kernel void k(global float* p {}",
		"pointer to ptr": "kernel void k(global float** p) {}",
		"size_t":         "kernel void k(global float* p, size_t n) {}",
		"reqd 0":         "__attribute__((reqd_work_group_size(0, 1, 1))) kernel void k(global float* p) {}",
		"reqd macro":     "__attribute__((reqd_work_group_size(WG, 1, 1))) kernel void k(global float* p) {}",
	} {
		t.Run(name, func(t *testing.T) {
			src, err := OpenCL(text)
			require.NoError(t, err)
			_, err = noCompiler(t).Build(src, emulated)
			require.ErrorIs(t, err, ErrNoCompiler)
			require.ErrorIs(t, err, ErrDeclaration)
		})
	}
	// A macro hides the declaration; the user declares it.
	src, err := OpenCL("#define K(name) kernel void name(global float* y, float a) { y[0] = a; }\nK(fill)")
	require.NoError(t, err)
	_, err = noCompiler(t).Build(src, emulated)
	require.ErrorIs(t, err, ErrDeclaration)
	_, err = WithDeclarations(src, "kernel void fill(global float y, float a);")
	require.ErrorIs(t, err, ErrDeclaration, "a global value parameter")
	declared, err := WithDeclarations(src, "kernel void fill(global float* y, float a);")
	require.NoError(t, err)
	require.NotEqual(t, src.ID(), declared.ID())
	img, err := noCompiler(t).Build(declared, emulated)
	require.NoError(t, err)
	k, err := img.Kernel("fill")
	require.NoError(t, err)
	require.Len(t, k.Params, 2)
	require.Equal(t, "y", k.Params[0].Name)

	// A pointer to local memory (dynamic LDS) is a kernel rocsync cannot
	// launch, as with the compiler's metadata.
	src, err = OpenCL("kernel void k(global float* y, local float* scratch) {}")
	require.NoError(t, err)
	img, err = noCompiler(t).Build(src, emulated)
	require.NoError(t, err)
	_, err = img.Kernel("k")
	require.ErrorIs(t, err, ErrUnsupportedKernel)
	require.False(t, errors.Is(err, ErrNoCompiler))
}

// Without a compiler the declaration gives what clang would: a pointer
// that is itself const still writes its data, an AMD kernel takes at most
// 256 work-items unless an attribute says otherwise, and
// reqd_work_group_size is the only shape it takes. (The parser read the
// first as read-only data, and took 1024 work-items and any shape.)
func TestDeclarationReadsConstPointersAndWorkgroupAttributes(t *testing.T) {
	src, err := OpenCL(`
kernel void constptr(global float* const z, global const float* x) { z[0] = x[0]; }
__attribute__((reqd_work_group_size(64, 2, 1))) kernel void fixed(global float* y) { y[0] = 1; }
kernel __attribute__((amdgpu_flat_work_group_size(1, 512))) void wide(global float* y) { y[0] = 1; }
kernel void plain(global float* y) { y[0] = 1; }`)
	require.NoError(t, err)
	img, err := noCompiler(t).Build(src, emulated)
	require.NoError(t, err)
	k, err := img.Kernel("constptr")
	require.NoError(t, err)
	require.False(t, k.Params[0].ReadOnly, "z writes its data")
	require.True(t, k.Params[1].ReadOnly, "x only reads it")
	for name, want := range map[string]struct {
		max  uint32
		reqd [3]uint32
	}{"fixed": {128, [3]uint32{64, 2, 1}}, "wide": {512, [3]uint32{}}, "plain": {256, [3]uint32{}}} {
		k, err := img.Kernel(name)
		require.NoError(t, err)
		require.Equal(t, want.max, k.MaxWorkgroupSize, name)
		require.Equal(t, want.reqd, k.ReqdWorkgroupSize, name)
	}
}

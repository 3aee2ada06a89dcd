package userkernel

import (
	"errors"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/kernels"
)

func TestCompileSAXPYForGfx90a(t *testing.T) {
	b := newBuilder(t)
	src := saxpy(t)
	for _, v := range []kernels.CodeObjectVersion{kernels.CodeObjectV5, kernels.CodeObjectV4} {
		t.Run(v.String(), func(t *testing.T) {
			img, err := b.Build(src, Device{ISA: "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", Accepts: acceptOnly(v)})
			if err != nil {
				t.Fatal(err)
			}
			if want := (Target{Family: AMD, Arch: "gfx90a", CodeObject: v}); img.Target != want {
				t.Fatalf("target %v, want %v", img.Target, want)
			}
			if got, err := kernels.ReadCodeObjectVersion(img.Code); err != nil || got != v {
				t.Fatalf("ELF says code object %v (%v), want %v", got, err, v)
			}
			k, err := img.Kernel("saxpy.kd")
			if err != nil {
				t.Fatal(err)
			}
			if k.Name != "saxpy" || k.Symbol != "saxpy.kd" {
				t.Errorf("name %q symbol %q", k.Name, k.Symbol)
			}
			want := []Param{
				{Index: 0, Name: "y", Offset: 0, Size: 8, Kind: ParamBuffer, TypeName: "float*"},
				{Index: 1, Name: "x", Offset: 8, Size: 8, Kind: ParamBuffer, TypeName: "float*", ReadOnly: true},
				{Index: 2, Name: "a", Offset: 16, Size: 4, Kind: ParamScalar, Class: ClassFloat, TypeName: "float"},
				{Index: 3, Name: "n", Offset: 20, Size: 4, Kind: ParamScalar, Class: ClassInteger, TypeName: "uint"},
			}
			if len(k.Params) != len(want) {
				t.Fatalf("params %+v", k.Params)
			}
			for i := range want {
				if k.Params[i] != want[i] {
					t.Errorf("param %d = %+v, want %+v", i, k.Params[i], want[i])
				}
			}
			// -O3 leaves no hidden arguments: the prelude reads the
			// geometry from the dispatch packet.
			if k.ArgsSize != 24 || len(k.hidden) != 0 {
				t.Errorf("ArgsSize %d, %d hidden args; want 24, 0", k.ArgsSize, len(k.hidden))
			}
			if k.MaxWorkgroupSize != 256 || k.ReqdWorkgroupSize != [3]uint32{} {
				t.Errorf("max workgroup %d reqd %v", k.MaxWorkgroupSize, k.ReqdWorkgroupSize)
			}
		})
	}
}

func TestCompileSAXPYForSM80(t *testing.T) {
	b := newBuilder(t)
	img, err := b.Build(saxpy(t), Device{ISA: "sm_80"})
	if err != nil {
		t.Fatal(err)
	}
	if img.Target != (Target{Family: NVIDIA, Arch: "sm_80"}) || img.Code[len(img.Code)-1] != 0 {
		t.Fatalf("target %v, NUL-terminated %v", img.Target, img.Code[len(img.Code)-1] == 0)
	}
	if !strings.Contains(string(img.Code), ".target sm_80") {
		t.Fatal("PTX does not target sm_80")
	}
	k, err := img.Kernel("saxpy")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []ParamKind{ParamBuffer, ParamBuffer, ParamScalar, ParamScalar}
	offsets := []uint32{0, 8, 16, 20}
	classes := []ScalarClass{ClassAny, ClassAny, ClassFloat, ClassInteger}
	for i, p := range k.Params {
		if p.Kind != kinds[i] || p.Offset != offsets[i] || p.Class != classes[i] {
			t.Errorf("param %d = %+v", i, p)
		}
	}
	if len(k.Params) != 4 || k.ArgsSize != 24 || k.Symbol != "" {
		t.Errorf("%d params, ArgsSize %d, symbol %q", len(k.Params), k.ArgsSize, k.Symbol)
	}
}

// A kernel using all three dimensions and every work-item function
// compiles on both targets without device libraries.
func TestWorkItemPreludeCompiles(t *testing.T) {
	b := newBuilder(t)
	src, err := OpenCL(`
kernel void all3(global ulong* out) {
	size_t i = get_global_id(0) + get_global_id(1) * get_global_size(0) +
	           get_global_id(2) * get_global_size(0) * get_global_size(1);
	out[i] = get_local_id(2) + get_group_id(1) + get_local_size(0) + get_num_groups(2);
}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, isa := range []string{"gfx90a", "gfx1100", "sm_80", "sm_90"} {
		if _, err := b.Build(src, Device{ISA: isa}); err != nil {
			t.Errorf("%s: %v", isa, err)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	b := newBuilder(t)
	bad, _ := OpenCL("kernel void k(global float* y) { y[0] = undeclared; }")
	_, err := b.Build(bad, Device{ISA: "gfx90a"})
	var ce *CompileError
	if !errors.Is(err, ErrCompile) || !errors.As(err, &ce) || !strings.Contains(ce.Output, "undeclared") {
		t.Fatalf("want a CompileError naming the identifier, got %v", err)
	}
	// A library call stays undefined without device libraries: caught at
	// build time, not by the loader.
	lib, _ := OpenCL("kernel void k(global float* y) { y[0] = sin(y[1]); }")
	for _, isa := range []string{"gfx90a", "sm_80"} {
		if _, err := b.Build(lib, Device{ISA: isa}); !errors.Is(err, ErrCompile) {
			t.Errorf("%s: a library call built: %v", isa, err)
		}
	}
	if s := b.Stats(); s.DiskWrites != 0 {
		t.Errorf("failed builds were cached: %+v", s)
	}
	if _, err := b.Build(saxpy(t), Device{ISA: "x86_64"}); !errors.Is(err, ErrTarget) {
		t.Errorf("unknown ISA: %v", err)
	}
	if _, err := NewBuilder(Options{Clang: "/nonexistent/clang", NoDiskCache: true}).Build(saxpy(t), Device{ISA: "gfx90a"}); !errors.Is(err, ErrNoCompiler) {
		t.Errorf("missing clang: %v", err)
	}
}

func TestSourceErrors(t *testing.T) {
	for _, c := range []struct {
		src  string
		opts []string
	}{
		{"", nil},
		{saxpySource, []string{"-mcpu=gfx1100"}},
		{saxpySource, []string{"-I/tmp"}},
		{saxpySource, []string{"-include", "x.h"}},
		{saxpySource, []string{"-o"}},
		{saxpySource, []string{"-D"}},
		{saxpySource, []string{"-Wp,-include,/etc/hostname"}},
		{saxpySource, []string{"-Wl,--wrap=x"}},
		{"#include \"x.h\"\n" + saxpySource, nil},
		{"  #  include <x.h>\n", nil},
		{"#\\\ninclude \"x.h\"\n", nil},
		// Every form the preprocessor reads as a directive (clang takes
		// each: a hunt found the old line scan missed them).
		{"%:include \"x.h\"\n", nil},
		{"#/**/include \"x.h\"\n", nil},
		{"# /* a\ncomment */ include \"x.h\"\n", nil},
		{"\f#include \"x.h\"\n", nil},
		{"\v#include \"x.h\"\n", nil},
		{"kernel void k(global int* y) { y[0] = 1; }\r#include \"x.h\"\r", nil},
		{"/* a\nb */ #include \"x.h\"\n", nil},
		{"#  include_next <x.h>\n", nil},
		{"#import \"x.h\"\n", nil},
		{"constant char d[] = {\n#embed \"x.bin\"\n};\n", nil},
		{"#if __has_include(\"x.h\")\n#endif\n", nil},
		{"#if __has_em\\\nbed(\"x.bin\")\n#endif\n", nil},
	} {
		if _, err := OpenCL(c.src, c.opts...); !errors.Is(err, ErrSource) {
			t.Errorf("OpenCL(%q, %q): %v, want ErrSource", c.src, c.opts, err)
		}
	}
	// Text that only looks like an include is not one.
	for _, src := range []string{
		"constant char s[] = \"#include <x.h>\";\n",
		"// #include \"x.h\"\n",
		"/* #include \"x.h\" */\n",
		"int x; #include\n",
		"#define my_include 1\n#define INCLUDE 2\n",
		"constant char c = '#'; constant int include = 1;\n",
		"#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n",
	} {
		if line, found := findInclude(src); found {
			t.Errorf("findInclude(%q) found an include at line %d", src, line)
		}
	}
	if line, _ := findInclude("a\r\nb\\\nc\rd\n# /* x\n */ include <y>\n"); line != 5 {
		t.Errorf("the include is on line 5, found on %d", line)
	}
	if _, err := OpenCL(saxpySource, "-DN=4", "-cl-fast-relaxed-math", "-O2", "-Wall", "-w", "-ffp-contract=off"); err != nil {
		t.Errorf("allowed options refused: %v", err)
	}
	if _, err := CodeObjects([]byte("not elf")); !errors.Is(err, ErrSource) {
		t.Errorf("CodeObjects(garbage): %v", err)
	}
	if _, err := PTX([]byte(".version 7.8\n")); !errors.Is(err, ErrSource) {
		t.Errorf("PTX without target: %v", err)
	}
	a, _ := OpenCL(saxpySource)
	c, _ := OpenCL(saxpySource, "-DX")
	if a.ID() == c.ID() {
		t.Error("options do not change the Source ID")
	}
}

// Prebuilt code objects are picked like rocsync's own: the device's gfx,
// the newest version the runtime takes.
func TestPrebuiltPick(t *testing.T) {
	b := newBuilder(t)
	src := saxpy(t)
	v5, err := b.Build(src, Device{ISA: "gfx90a", Accepts: acceptOnly(kernels.CodeObjectV5)})
	if err != nil {
		t.Fatal(err)
	}
	v4, err := b.Build(src, Device{ISA: "gfx90a", Accepts: acceptOnly(kernels.CodeObjectV4)})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := CodeObjects(v4.Code, v5.Code)
	if err != nil {
		t.Fatal(err)
	}
	hip523 := func(v kernels.CodeObjectVersion) bool { return kernels.HIPAccepts(50_203_000, v) }
	for _, c := range []struct {
		dev  Device
		want kernels.CodeObjectVersion
	}{
		{Device{ISA: "amdgcn-amd-amdhsa--gfx90a:xnack+"}, kernels.CodeObjectV5},
		{Device{ISA: "gfx90a", Accepts: hip523}, kernels.CodeObjectV4},
	} {
		img, err := objs.pickPrebuilt(c.dev)
		if err != nil || img.Target.CodeObject != c.want {
			t.Errorf("%+v: %v, %v; want %v", c.dev.ISA, img, err, c.want)
		}
	}
	if _, err := b.Build(objs, Device{ISA: "gfx1030"}); !errors.Is(err, ErrTarget) {
		t.Errorf("gfx1030 from gfx90a objects: %v", err)
	}
	if _, err := b.Build(objs, Device{ISA: "sm_90"}); !errors.Is(err, ErrTarget) {
		t.Errorf("sm_90 from code objects: %v", err)
	}
	if _, err := CodeObjects(v5.Code, v5.Code); !errors.Is(err, ErrSource) {
		t.Errorf("duplicate objects: %v", err)
	}

	ptx80, err := b.Build(src, Device{ISA: "sm_80"})
	if err != nil {
		t.Fatal(err)
	}
	mods, err := PTX(ptx80.Code)
	if err != nil {
		t.Fatal(err)
	}
	if img, err := b.Build(mods, Device{ISA: "sm_90"}); err != nil || img.Target.Arch != "sm_80" {
		t.Errorf("sm_90 device: %v, %v; want the sm_80 module", img, err)
	}
	if _, err := b.Build(mods, Device{ISA: "sm_75"}); !errors.Is(err, ErrTarget) {
		t.Errorf("sm_75 device: %v", err)
	}
}

func TestFeatureCompatibility(t *testing.T) {
	_, xnackOn, _ := amdFeatures("gfx90a:xnack+")
	_, xnackOff, _ := amdFeatures("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-")
	if featuresCompatible(xnackOn, xnackOff) || !featuresCompatible(nil, xnackOff) || !featuresCompatible(xnackOn, nil) {
		t.Error("feature matching wrong")
	}
}

package kernels

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// wantTargets is the list in build.sh; a missing or extra file in co/ fails here.
// It holds every target of rocBLAS's target lists for ROCm 6.3, 7.0 and 7.1
// (TARGET_LIST_ROCM_6.3/7.0/7.1 in rocBLAS's CMake, ROCm/rocm-libraries).
var wantTargets = []string{"gfx1010", "gfx1012", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
	"gfx1200", "gfx1201", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950"}

// rocBLASTargets is the union of rocBLAS's target lists for ROCm 6.3, 7.0
// and 7.1, feature settings dropped.
var rocBLASTargets = []string{"gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1012", "gfx1030",
	"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}

// wantGenericTargets is GENERIC_TARGETS in build.sh: one generic v6 code
// object per family of LLVM's AMDGPUUsage "Generic Processors" table.
var wantGenericTargets = []string{"gfx10-1-generic", "gfx10-3-generic", "gfx11-generic", "gfx12-generic", "gfx9-4-generic", "gfx9-generic"}

// wantV4Targets is V4_TARGETS in build.sh: the targets ROCm 5.0-5.2 know.
var wantV4Targets = []string{"gfx1010", "gfx1012", "gfx1030", "gfx900", "gfx906", "gfx908", "gfx90a"}

func TestTargets(t *testing.T) {
	if got := Targets(); !slices.Equal(got, wantTargets) {
		t.Errorf("Targets() = %v, want %v", got, wantTargets)
	}
	Targets()[0] = "scribble" // callers get a copy
	if Targets()[0] != wantTargets[0] {
		t.Error("Targets() returns shared storage")
	}
	if got, want := PTXTargets(), []string{"sm_80", "sm_90"}; !slices.Equal(got, want) {
		t.Errorf("PTXTargets() = %v, want %v", got, want)
	}
	if got := GenericTargets(); !slices.Equal(got, wantGenericTargets) {
		t.Errorf("GenericTargets() = %v, want %v", got, wantGenericTargets)
	}
	for _, gfx := range rocBLASTargets {
		if _, err := CodeObject(gfx); err != nil {
			t.Errorf("rocBLAS supports %s, rocsync has no code object for it: %v", gfx, err)
		}
	}
}

func TestCodeObjectNames(t *testing.T) {
	want, err := os.ReadFile("co/v5/gfx90a.hsaco")
	if err != nil {
		t.Fatal(err)
	}
	for _, isa := range []string{
		"gfx90a",
		"gfx90a:xnack-",
		"gfx90a:sramecc+:xnack-",
		"amdgcn-amd-amdhsa--gfx90a",
		"amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-",
		"amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack+",
	} {
		got, err := CodeObject(isa)
		if err != nil {
			t.Errorf("CodeObject(%q): %v", isa, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("CodeObject(%q) is not co/v5/gfx90a.hsaco", isa)
		}
	}
	a, _ := CodeObject("gfx90a")
	a[0] = 'X'
	if b, _ := CodeObject("gfx90a"); b[0] != 0x7f {
		t.Error("CodeObject returns shared storage")
	}
}

func TestCodeObjectUnsupported(t *testing.T) {
	for _, isa := range []string{"gfx803", "amdgcn-amd-amdhsa--gfx940:xnack-", "", "sm_90", "gfx90a-", "GFX90A"} {
		co, err := CodeObject(isa)
		if err == nil {
			t.Errorf("CodeObject(%q) = %d bytes, want an error", isa, len(co))
			continue
		}
		if !errors.Is(err, ErrUnsupportedTarget) {
			t.Errorf("CodeObject(%q): errors.Is(%v, ErrUnsupportedTarget) = false", isa, err)
		}
		var ute *UnsupportedTargetError
		if !errors.As(err, &ute) {
			t.Fatalf("CodeObject(%q): error %T is not *UnsupportedTargetError", isa, err)
		}
		if ute.ISA != isa || !slices.Equal(ute.Supported, wantTargets) {
			t.Errorf("CodeObject(%q): error fields = %+v", isa, ute)
		}
		msg := err.Error()
		if !strings.Contains(msg, "gfx1030, gfx1100") || !strings.Contains(msg, normalizeISA(isa)) {
			t.Errorf("CodeObject(%q): message %q should name the target and the supported list", isa, msg)
		}
	}
	_, err := CodeObject("amdgcn-amd-amdhsa--gfx803:xnack-")
	if want := "kernels: no kernels built for gfx803 (from amdgcn-amd-amdhsa--gfx803:xnack-); supported: " + strings.Join(wantTargets, ", "); err.Error() != want {
		t.Errorf("message = %q\nwant      %q", err.Error(), want)
	}
	if errors.Is(errors.New("other"), ErrUnsupportedTarget) {
		t.Error("an unrelated error matches ErrUnsupportedTarget")
	}
}

// The ISA names are stripped of their xnack/sramecc settings because no code
// object has a setting: each is either "any" or, where the processor has
// no such feature, "unsupported". A code object built for "on" or "off"
// would only load in that mode.
func TestCodeObjectsHaveNoFeatureSettings(t *testing.T) {
	const (
		xnackMask      = 0x300 // EF_AMDGPU_FEATURE_XNACK_V4
		xnackAny       = 0x100
		sramEccMask    = 0xc00 // EF_AMDGPU_FEATURE_SRAMECC_V4
		sramEccAny     = 0x400
		osABIAMDGPUHSA = 64 // ELFOSABI_AMDGPU_HSA; debug/elf has no name for it
	)
	// EI_ABIVERSION per code-object version (AMDGPUUsage, "ELF Header").
	abiVersion := map[CodeObjectVersion]uint8{CodeObjectV4: 2, CodeObjectV5: 3, CodeObjectV6: 4}
	for _, gfx := range append(Targets(), GenericTargets()...) {
		for _, v := range mustVersions(t, gfx) {
			co, err := CodeObjectFor(gfx, v)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.NewFile(bytes.NewReader(co))
			if err != nil {
				t.Fatalf("%s %s: %v", gfx, v, err)
			}
			if h := f.FileHeader; h.OSABI != osABIAMDGPUHSA || h.ABIVersion != abiVersion[v] {
				t.Errorf("%s %s: OS ABI %v version %d, want AMDGPU_HSA ABI version %d", gfx, v, h.OSABI, h.ABIVersion, abiVersion[v])
			}
			if got, err := ReadCodeObjectVersion(co); err != nil || got != v {
				t.Errorf("%s %s: ReadCodeObjectVersion = %v, %v", gfx, v, got, err)
			}
			flags := elfFlags(t, co)
			if x := flags & xnackMask; x != 0 && x != xnackAny {
				t.Errorf("%s %s: xnack setting %#x, want any or unsupported", gfx, v, x)
			}
			if s := flags & sramEccMask; s != 0 && s != sramEccAny {
				t.Errorf("%s %s: sramecc setting %#x, want any or unsupported", gfx, v, s)
			}
			// A generic code object carries its generic version in
			// EF_AMDGPU_GENERIC_VERSION (bits 24-31, AMDGPUUsage "ELF
			// Header"); ROCr refuses one below the version its registry
			// lists for the generic, 1 for all six (Isa::IsCompatible,
			// rocr-runtime core/runtime/isa.cpp).
			if gv := flags >> 24; strings.HasSuffix(gfx, "-generic") != (gv != 0) || (gv != 0 && gv < 1) {
				t.Errorf("%s %s: EF_AMDGPU_GENERIC_VERSION %d", gfx, v, gv)
			}
			f.Close()
		}
	}
}

func mustVersions(t testing.TB, gfx string) []CodeObjectVersion {
	t.Helper()
	vs, err := CodeObjectVersions(gfx)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// elfFlags reads e_flags, which debug/elf does not expose, from the ELF64 header.
func elfFlags(t *testing.T, co []byte) uint32 {
	t.Helper()
	if len(co) < 52 {
		t.Fatal("code object shorter than an ELF header")
	}
	return uint32(co[48]) | uint32(co[49])<<8 | uint32(co[50])<<16 | uint32(co[51])<<24
}

func TestPTX(t *testing.T) {
	for _, arch := range PTXTargets() {
		p, err := PTX(arch)
		if err != nil {
			t.Fatal(err)
		}
		if p[len(p)-1] != 0 || bytes.IndexByte(p[:len(p)-1], 0) >= 0 {
			t.Errorf("%s: PTX is not a single NUL-terminated string", arch)
		}
		text := string(p[:len(p)-1])
		if !strings.Contains(text, "\n.target "+arch+"\n") {
			t.Errorf("%s: PTX lacks .target %s", arch, arch)
		}
		if strings.Contains(text, ".extern") {
			t.Errorf("%s: PTX has unresolved external functions", arch)
		}
		for _, op := range AllOps() {
			for _, dt := range AllDTypes() {
				if !strings.Contains(text, ".visible .entry "+op.KernelName(dt)+"(") {
					t.Errorf("%s: PTX lacks entry %s", arch, op.KernelName(dt))
				}
			}
		}
	}
	_, err := PTX("sm_70")
	var ute *UnsupportedTargetError
	if !errors.As(err, &ute) || !errors.Is(err, ErrUnsupportedTarget) || !slices.Equal(ute.Supported, []string{"sm_80", "sm_90"}) {
		t.Errorf("PTX(sm_70) error = %v", err)
	}
}

func TestWavefrontAndWorkgroupSize(t *testing.T) {
	for isa, want := range map[string]int{
		"gfx908": 64, "gfx90a": 64, "gfx942": 64, "gfx950": 64, "gfx900": 64,
		"gfx1030": 32, "gfx1100": 32, "gfx1101": 32, "gfx1200": 32, "gfx1201": 32,
		"amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-": 64,
		"amdgcn-amd-amdhsa--gfx1100":                32,
		"sm_90":                                     0, "": 0, "gfx": 0, "gfx9-generic": 0, "gfx10-3-generic": 0, "gfx090": 0,
	} {
		if got := Wavefront(isa); got != want {
			t.Errorf("Wavefront(%q) = %d, want %d", isa, got, want)
		}
	}
	for _, gfx := range Targets() {
		ws := DefaultWorkgroupSize(gfx)
		if wave := Wavefront(gfx); int(ws)%wave != 0 {
			t.Errorf("%s: DefaultWorkgroupSize %d is not a whole number of %d-wide waves", gfx, ws, wave)
		}
	}
}

func readSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("src/elementwise.cl")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

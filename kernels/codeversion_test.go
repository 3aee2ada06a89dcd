package kernels

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestCodeObjectVersions(t *testing.T) {
	for _, gfx := range Targets() {
		want := []CodeObjectVersion{CodeObjectV5}
		if slices.Contains(wantV4Targets, gfx) {
			want = []CodeObjectVersion{CodeObjectV4, CodeObjectV5}
		}
		got, err := CodeObjectVersions("amdgcn-amd-amdhsa--" + gfx + ":xnack-")
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("CodeObjectVersions(%s) = %v, %v; want %v", gfx, got, err, want)
		}
	}
	if _, err := CodeObjectVersions("gfx803"); !errors.Is(err, ErrUnsupportedTarget) {
		t.Errorf("CodeObjectVersions(gfx803) error = %v, want ErrUnsupportedTarget", err)
	}
	// A processor with no object of its own gets its family's generic v6.
	for isa, want := range map[string]CodeObjectVersion{"gfx1036": CodeObjectV6, "gfx11-generic": CodeObjectV6, "gfx1152:xnack-": CodeObjectV6} {
		if got, err := CodeObjectVersions(isa); err != nil || !slices.Equal(got, []CodeObjectVersion{want}) {
			t.Errorf("CodeObjectVersions(%s) = %v, %v; want [%v]", isa, got, err, want)
		}
	}
}

func TestCodeObjectFor(t *testing.T) {
	// Each version is its own file: co/<version>/<gfx>.hsaco.
	for _, v := range []CodeObjectVersion{CodeObjectV4, CodeObjectV5} {
		want, err := os.ReadFile("co/" + v.String() + "/gfx90a.hsaco")
		if err != nil {
			t.Fatal(err)
		}
		got, err := CodeObjectFor("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", v)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("CodeObjectFor(gfx90a, %s) is not co/%s/gfx90a.hsaco (err %v)", v, v, err)
		}
		got[0] = 'X'
		if again, _ := CodeObjectFor("gfx90a", v); again[0] != 0x7f {
			t.Errorf("CodeObjectFor(gfx90a, %s) returns shared storage", v)
		}
	}
	v4, _ := CodeObjectFor("gfx90a", CodeObjectV4)
	v5, _ := CodeObject("gfx90a")
	if bytes.Equal(v4, v5) {
		t.Error("the v4 and v5 code objects are the same bytes")
	}

	_, err := CodeObjectFor("gfx942:xnack-", CodeObjectV4)
	var uve *UnsupportedCodeObjectVersionError
	if !errors.As(err, &uve) || !errors.Is(err, ErrUnsupportedCodeObjectVersion) || errors.Is(err, ErrUnsupportedTarget) {
		t.Fatalf("CodeObjectFor(gfx942, v4) error = %v, want *UnsupportedCodeObjectVersionError", err)
	}
	if uve.ISA != "gfx942:xnack-" || uve.Version != CodeObjectV4 || !slices.Equal(uve.Available, []CodeObjectVersion{CodeObjectV5}) {
		t.Errorf("error fields = %+v", uve)
	}
	if want := "kernels: no code object v4 built for gfx942; built: v5"; err.Error() != want {
		t.Errorf("message = %q, want %q", err, want)
	}
	for _, v := range []CodeObjectVersion{0, 3, CodeObjectV6, 200} {
		if co, err := CodeObjectFor("gfx90a", v); !errors.Is(err, ErrUnsupportedCodeObjectVersion) {
			t.Errorf("CodeObjectFor(gfx90a, %d) = %d bytes, %v; want ErrUnsupportedCodeObjectVersion", v, len(co), err)
		}
	}
	if _, err := CodeObjectFor("gfx803", CodeObjectV5); !errors.Is(err, ErrUnsupportedTarget) {
		t.Errorf("CodeObjectFor(gfx803) error = %v, want ErrUnsupportedTarget", err)
	}
	// The generic object is served for every member of its family that has
	// none of its own, and is the file co/v6/<generic>.hsaco.
	want, err := os.ReadFile("co/v6/gfx11-generic.hsaco")
	if err != nil {
		t.Fatal(err)
	}
	for _, isa := range []string{"gfx1152", "amdgcn-amd-amdhsa--gfx1153:xnack-", "gfx11-generic"} {
		if got, err := CodeObjectFor(isa, CodeObjectV6); err != nil || !bytes.Equal(got, want) {
			t.Errorf("CodeObjectFor(%s, v6) is not co/v6/gfx11-generic.hsaco (err %v)", isa, err)
		}
	}
	if _, err := CodeObjectFor("gfx1100", CodeObjectV6); !errors.Is(err, ErrUnsupportedCodeObjectVersion) {
		t.Errorf("CodeObjectFor(gfx1100, v6) error = %v: a processor with its own objects gets no generic one", err)
	}
}

func TestReadCodeObjectVersion(t *testing.T) {
	good, _ := CodeObject("gfx1030")
	withABI := func(abi byte) []byte {
		b := bytes.Clone(good)
		b[8] = abi
		return b
	}
	for abi, want := range map[byte]CodeObjectVersion{1: 3, 2: CodeObjectV4, 3: CodeObjectV5, 4: CodeObjectV6} {
		if got, err := ReadCodeObjectVersion(withABI(abi)); err != nil || got != want {
			t.Errorf("ABI version %d: got %v, %v; want %v", abi, got, err, want)
		}
	}
	wrongOS := bytes.Clone(good)
	wrongOS[7] = 0
	wrongMachine := bytes.Clone(good)
	wrongMachine[18] = 62 // EM_X86_64
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":         {nil, "not an ELF file"},
		"short":         {good[:19], "not an ELF file"},
		"text":          {[]byte("this is not an ELF file"), "not an ELF file"},
		"v2":            {withABI(0), "v2"},
		"future":        {withABI(5), "ABI version 5 is unknown"},
		"OS ABI":        {wrongOS, "OS ABI is 0"},
		"wrong machine": {wrongMachine, "machine 62"},
	} {
		v, err := ReadCodeObjectVersion(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ReadCodeObjectVersion = %v, %v; want an error mentioning %q", name, v, err, tc.want)
		}
	}
}

// The release rules, from the sources cited in docs/codeobjects.md.
func TestRuntimeAcceptance(t *testing.T) {
	for _, tc := range []struct {
		hip    int
		v4, v5 bool
	}{
		{50_221_153, true, false}, // HIP 5.2.3: comgr 5.2 cannot name the ISA of a v5 ELF
		{50_000_000, true, false},
		{50_300_000, true, true}, // comgr 5.3 handles ELFABIVERSION_AMDGPU_HSA_V5
		{50_700_000, true, true},
		{60_200_000, true, true},
		{70_000_000, true, true},
		{0, true, true}, // unknown: a current release
	} {
		if got := HIPAccepts(tc.hip, CodeObjectV4); got != tc.v4 {
			t.Errorf("HIPAccepts(%d, v4) = %v", tc.hip, got)
		}
		if got := HIPAccepts(tc.hip, CodeObjectV5); got != tc.v5 {
			t.Errorf("HIPAccepts(%d, v5) = %v", tc.hip, got)
		}
	}
	if HIPAccepts(60_100_000, CodeObjectV6) || !HIPAccepts(60_200_000, CodeObjectV6) || HIPAccepts(0, 3) {
		t.Error("HIPAccepts: wrong v6 or v3 rule")
	}
	for _, tc := range []struct {
		rocr       ROCrVersion
		v4, v5, v6 bool
	}{
		{ROCrVersion{1, 5}, true, false, false}, // ROCm 5.0-5.2 share 1.5; 5.0 and 5.1 refuse v5
		{ROCrVersion{1, 7}, true, true, false},  // ROCm 5.3
		{ROCrVersion{1, 13}, true, true, false}, // ROCm 6.1: major version must be <= 5
		{ROCrVersion{1, 14}, true, true, true},  // ROCm 6.2 takes v6
		{ROCrVersion{2, 0}, true, true, true},
		{ROCrVersion{}, true, true, true}, // unknown: a current release
	} {
		for v, want := range map[CodeObjectVersion]bool{CodeObjectV4: tc.v4, CodeObjectV5: tc.v5, CodeObjectV6: tc.v6} {
			if got := ROCrAccepts(tc.rocr, v); got != want {
				t.Errorf("ROCrAccepts(%v, %s) = %v, want %v", tc.rocr, v, got, want)
			}
		}
	}
}

func TestParseROCrBuildVersion(t *testing.T) {
	for in, want := range map[string]ROCrVersion{
		"1.5.0-debian-0":                       {1, 5},
		`"1.5.0-local-build-unknown"`:          {1, 5}, // Debian's ROCr 5.2.3, quotes included
		"1.14.60204-rocm-rel-6.2-116-abcdef12": {1, 14},
		"1.7":                                  {1, 7},
		"2.0.0":                                {2, 0},
		"1.9rc1.0":                             {1, 9},
	} {
		if got, err := ParseROCrBuildVersion(in); err != nil || got != want {
			t.Errorf("ParseROCrBuildVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "x.5.0", "1.x", "-1.5", "0.0.1", "1.-5"} {
		if got, err := ParseROCrBuildVersion(in); err == nil {
			t.Errorf("ParseROCrBuildVersion(%q) = %v, want an error", in, got)
		}
	}
}

func TestPickCodeObjectVersion(t *testing.T) {
	hip := func(version int) func(CodeObjectVersion) bool {
		return func(v CodeObjectVersion) bool { return HIPAccepts(version, v) }
	}
	for _, tc := range []struct {
		isa  string
		hip  int
		want CodeObjectVersion
	}{
		{"gfx90a:sramecc+:xnack-", 50_221_153, CodeObjectV4},
		{"gfx90a", 60_200_000, CodeObjectV5},
		{"gfx90a", 0, CodeObjectV5},
		{"gfx1030", 50_221_153, CodeObjectV4},
		{"gfx1100", 50_700_000, CodeObjectV5},
	} {
		if got, err := PickCodeObjectVersion(tc.isa, hip(tc.hip)); err != nil || got != tc.want {
			t.Errorf("PickCodeObjectVersion(%s, HIP %d) = %v, %v; want %v", tc.isa, tc.hip, got, err, tc.want)
		}
	}
	rocr := func(r ROCrVersion) func(CodeObjectVersion) bool {
		return func(v CodeObjectVersion) bool { return ROCrAccepts(r, v) }
	}
	if got, _ := PickCodeObjectVersion("gfx908", rocr(ROCrVersion{1, 5})); got != CodeObjectV4 {
		t.Errorf("ROCr 1.5 on gfx908: %v, want v4", got)
	}
	if got, _ := PickCodeObjectVersion("gfx908", rocr(ROCrVersion{1, 14})); got != CodeObjectV5 {
		t.Errorf("ROCr 1.14 on gfx908: %v, want v5 (v6 is not built)", got)
	}
	// gfx1100 has only v5, which a HIP 5.2 cannot load (nor does it know gfx1100).
	_, err := PickCodeObjectVersion("gfx1100", hip(50_221_153))
	if !errors.Is(err, ErrNoAcceptedCodeObject) || !strings.Contains(err.Error(), "gfx1100") {
		t.Errorf("gfx1100 on HIP 5.2: error %v, want ErrNoAcceptedCodeObject", err)
	}
	if _, err := PickCodeObjectVersion("gfx803", hip(0)); !errors.Is(err, ErrUnsupportedTarget) {
		t.Errorf("gfx803: error %v, want ErrUnsupportedTarget", err)
	}
}

// TestPickCodeObject is the selection rule per (target, ROCr version): a
// processor's own object when it has one (v4 for ROCr 1.5 where built, else
// v5), else its family's generic v6 object, which ROCr loads from 1.15
// (ROCm 6.4; ROCr 1.14 loads v6 but its ISA registry has no generic
// processors); a generic object never for a processor outside its family.
func TestPickCodeObject(t *testing.T) {
	unknown := ROCrVersion{}
	for _, tc := range []struct {
		isa  string
		rocr ROCrVersion
		want Selection // zero: refused
	}{
		{"gfx90a", ROCrVersion{1, 5}, Selection{"gfx90a", CodeObjectV4}},
		{"gfx90a", ROCrVersion{1, 14}, Selection{"gfx90a", CodeObjectV5}},
		{"amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", unknown, Selection{"gfx90a", CodeObjectV5}},
		{"gfx908", ROCrVersion{1, 14}, Selection{"gfx908", CodeObjectV5}},
		{"gfx942", ROCrVersion{1, 14}, Selection{"gfx942", CodeObjectV5}}, // own object, not gfx9-4-generic
		{"gfx906", ROCrVersion{1, 7}, Selection{"gfx906", CodeObjectV5}},
		{"gfx906", ROCrVersion{1, 14}, Selection{"gfx906", CodeObjectV5}},
		{"gfx1102", ROCrVersion{1, 7}, Selection{"gfx1102", CodeObjectV5}},
		{"gfx1151", ROCrVersion{1, 14}, Selection{"gfx1151", CodeObjectV5}},
		{"gfx1103", ROCrVersion{1, 5}, Selection{}}, // v5 only, ROCr 5.0-5.2
		{"gfx902", ROCrVersion{1, 15}, Selection{"gfx9-generic", CodeObjectV6}},
		{"gfx909", unknown, Selection{"gfx9-generic", CodeObjectV6}},
		{"gfx90c:xnack-", ROCrVersion{1, 18}, Selection{"gfx9-generic", CodeObjectV6}},
		{"gfx1011", ROCrVersion{1, 15}, Selection{"gfx10-1-generic", CodeObjectV6}},
		{"gfx1013", ROCrVersion{2, 0}, Selection{"gfx10-1-generic", CodeObjectV6}},
		{"gfx1031", ROCrVersion{1, 15}, Selection{"gfx10-3-generic", CodeObjectV6}},
		{"amdgcn-amd-amdhsa--gfx1036", ROCrVersion{1, 15}, Selection{"gfx10-3-generic", CodeObjectV6}},
		{"gfx1152", ROCrVersion{1, 15}, Selection{"gfx11-generic", CodeObjectV6}},
		{"gfx1153", ROCrVersion{1, 15}, Selection{"gfx11-generic", CodeObjectV6}},
		{"gfx1031", ROCrVersion{1, 14}, Selection{}}, // ROCm 6.2/6.3: v6 loads, generic ISAs unknown
		{"gfx1031", ROCrVersion{1, 13}, Selection{}}, // ROCm 6.1 loads no v6
		{"gfx1152", ROCrVersion{1, 7}, Selection{}},
		{"gfx803", ROCrVersion{1, 15}, Selection{}},  // no family
		{"gfx1250", ROCrVersion{1, 15}, Selection{}}, // no family built
		{"gfx940", ROCrVersion{1, 15}, Selection{}},  // ROCr's registry no longer lists gfx940
	} {
		got, err := PickCodeObject(tc.isa, func(v CodeObjectVersion) bool { return ROCrAccepts(tc.rocr, v) }, tc.rocr)
		if tc.want == (Selection{}) {
			if err == nil || !errors.Is(err, ErrUnsupportedTarget) && !errors.Is(err, ErrNoAcceptedCodeObject) {
				t.Errorf("PickCodeObject(%s, ROCr %v) = %v, %v; want refused", tc.isa, tc.rocr, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("PickCodeObject(%s, ROCr %v) = %v, %v; want %v", tc.isa, tc.rocr, got, err, tc.want)
		}
		if got.Generic() != strings.HasSuffix(tc.want.Target, "-generic") {
			t.Errorf("%v.Generic() = %v", got, got.Generic())
		}
	}
	// A family member refused for want of v6 says which generic it lacks,
	// and is still an unsupported target.
	rocr114 := ROCrVersion{1, 14}
	_, err := PickCodeObject("gfx1031", func(v CodeObjectVersion) bool { return ROCrAccepts(rocr114, v) }, rocr114)
	var ute *UnsupportedTargetError
	if !errors.As(err, &ute) || ute.Generic != "gfx10-3-generic" || !errors.Is(err, ErrUnsupportedTarget) || !errors.Is(err, ErrNoAcceptedCodeObject) ||
		!strings.Contains(err.Error(), "gfx10-3-generic") || !strings.Contains(err.Error(), "1.15") {
		t.Errorf("gfx1031 on ROCr 1.14: error %v", err)
	}
	// HIP loads a module through ROCr's loader: HIP's v6 rule (6.2) and
	// ROCr's generic rule both apply.
	hip := func(version int) func(CodeObjectVersion) bool {
		return func(v CodeObjectVersion) bool { return HIPAccepts(version, v) }
	}
	if got, err := PickCodeObject("gfx1152", hip(60_400_000), ROCrVersion{1, 15}); err != nil || got != (Selection{"gfx11-generic", CodeObjectV6}) {
		t.Errorf("gfx1152 on HIP 6.4: %v, %v", got, err)
	}
	if _, err := PickCodeObject("gfx1152", hip(60_100_000), ROCrVersion{1, 15}); !errors.Is(err, ErrUnsupportedTarget) {
		t.Errorf("gfx1152 on HIP 6.1: %v, want refused", err)
	}
	// PickCodeObjectVersion takes ROCr as current.
	if v, err := PickCodeObjectVersion("gfx1152", hip(0)); err != nil || v != CodeObjectV6 {
		t.Errorf("PickCodeObjectVersion(gfx1152) = %v, %v", v, err)
	}
	for r, want := range map[ROCrVersion]bool{{1, 5}: false, {1, 14}: false, {1, 15}: true, {2, 0}: true, {}: true} {
		if got := ROCrLoadsGeneric(r); got != want {
			t.Errorf("ROCrLoadsGeneric(%v) = %v", r, got)
		}
	}
}

// Every member of a family maps to its generic, every generic built has
// members, and no generic covers gfx908 or gfx90a (AMDGPUUsage).
func TestGenericTarget(t *testing.T) {
	for isa, want := range map[string]string{
		"gfx900": "gfx9-generic", "gfx906": "gfx9-generic", "gfx90c": "gfx9-generic",
		"gfx908": "", "gfx90a": "", "gfx803": "", "sm_90": "", "": "",
		"gfx942": "gfx9-4-generic", "gfx950": "gfx9-4-generic",
		"gfx1010": "gfx10-1-generic", "gfx1030": "gfx10-3-generic", "gfx1036": "gfx10-3-generic",
		"gfx1100": "gfx11-generic", "amdgcn-amd-amdhsa--gfx1151:xnack-": "gfx11-generic",
		"gfx1201": "gfx12-generic", "gfx12-generic": "gfx12-generic",
	} {
		if got := GenericTarget(isa); got != want {
			t.Errorf("GenericTarget(%q) = %q, want %q", isa, got, want)
		}
	}
	for _, g := range GenericTargets() {
		members := 0
		for _, gen := range genericOf {
			if gen == g {
				members++
			}
		}
		if members == 0 {
			t.Errorf("generic %s has no member processor", g)
		}
	}
}

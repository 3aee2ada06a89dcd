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
	if _, err := CodeObjectVersions("gfx1102"); !errors.Is(err, ErrUnsupportedTarget) {
		t.Errorf("CodeObjectVersions(gfx1102) error = %v, want ErrUnsupportedTarget", err)
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
	if _, err := CodeObjectFor("gfx1102", CodeObjectV5); !errors.Is(err, ErrUnsupportedTarget) {
		t.Errorf("CodeObjectFor(gfx1102) error = %v, want ErrUnsupportedTarget", err)
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
	if _, err := PickCodeObjectVersion("gfx1102", hip(0)); !errors.Is(err, ErrUnsupportedTarget) {
		t.Errorf("gfx1102: error %v, want ErrUnsupportedTarget", err)
	}
}

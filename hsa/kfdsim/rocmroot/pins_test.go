package rocmroot

import (
	"errors"
	"strings"
	"testing"
)

// The pin file pins the releases issue's ROCm lines: trixie's ROCr 6.1.2
// over the thunk 6.2.4 with HIP 5.7.1 and comgr; sid's ROCr and HIP 6.4.3
// with comgr; rocBLAS only in the optional group.
func TestPinFileReleases(t *testing.T) {
	rs, err := Releases()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"trixie": {"libhsa-runtime64-1": "6.1.2", "libhsakmt1": "6.2.4", "libamdhip64-5": "5.7.1", "libamd-comgr2": ""},
		"sid":    {"libhsa-runtime64-1": "6.4.3", "libamdhip64-6": "6.4.3", "libamd-comgr3": ""},
	}
	blas := map[string]string{"trixie": "librocblas0", "sid": "librocblas4"}
	for name, pkgs := range want {
		r, ok := rs[name]
		if !ok {
			t.Fatalf("no release %s", name)
		}
		if r.Suite != name {
			t.Errorf("%s: suite %s", name, r.Suite)
		}
		base := map[string]Pin{}
		for _, w := range r.wanted(nil) {
			base[w.Name] = w
		}
		for pkg, prefix := range pkgs {
			w, ok := base[pkg]
			if !ok || !strings.HasPrefix(w.Version, prefix) {
				t.Errorf("%s: want %s %s..., pin file has %+v", name, pkg, prefix, w)
			}
		}
		if _, ok := base[blas[name]]; ok {
			t.Errorf("%s: %s is fetched by default", name, blas[name])
		}
		withBlas := r.wanted([]Group{RocBLAS})
		if len(withBlas) != len(base)+1 || withBlas[len(withBlas)-1].Name != blas[name] {
			t.Errorf("%s: wanted with rocBLAS: %+v", name, withBlas)
		}
		pinned := map[string]bool{}
		for _, p := range r.pinned(nil) {
			pinned[p.Name] = true
		}
		for _, p := range []string{"libc6", "libstdc++6", "libdrm-amdgpu1"} {
			if !pinned[p] {
				t.Errorf("%s: the closure's %s is not pinned", name, p)
			}
		}
	}
	if _, err := LookupRelease("bookworm"); !errors.Is(err, ErrUnknownRelease) {
		t.Errorf("LookupRelease(bookworm): %v, want ErrUnknownRelease", err)
	}
}

func TestParsePinsRejectsMalformedFiles(t *testing.T) {
	for name, text := range map[string]string{
		"pin before release": "pin libc6 1\n",
		"short release":      "release sid\n",
		"short pin":          "release sid sid\nwant libc6\n",
		"unknown group":      "release sid sid\nwant libc6 1 extras\n",
		"unknown keyword":    "release sid sid\nwant libc6 1\nhold libc6\n",
		"pinned twice":       "release sid sid\nwant libc6 1\npin libc6 2\n",
		"release twice":      "release sid sid\nwant a 1\nrelease sid sid\nwant b 1\n",
		"nothing wanted":     "release sid sid\npin libc6 1\n",
	} {
		if _, err := parsePins(text); !errors.Is(err, ErrPinFile) {
			t.Errorf("%s: %v, want ErrPinFile", name, err)
		}
	}
}

// FormatPins writes what parsePins reads back.
func TestFormatPinsRoundTrip(t *testing.T) {
	base := []Package{{Name: "libc6", Version: "2.43-7"}, {Name: "libamdhip64-6", Version: "6.4.3-5"}}
	extra := map[Group][]Package{RocBLAS: {{Name: "librocblas4", Version: "6.4.4-4"}, {Name: "libroctx64-4", Version: "1:6.4.1-1"}}}
	want := []Pin{{Name: "libamdhip64-6"}, {Name: "librocblas4", Group: RocBLAS}}
	rs, err := parsePins(FormatPins("sid", "unstable", want, base, extra))
	if err != nil {
		t.Fatal(err)
	}
	r := rs["sid"]
	if r.Suite != "unstable" || len(r.Want) != 2 || r.Want[0] != (Pin{"libamdhip64-6", "6.4.3-5", Base}) ||
		r.Want[1] != (Pin{"librocblas4", "6.4.4-4", RocBLAS}) {
		t.Errorf("wanted: %+v", r)
	}
	if got := r.pinned(nil); len(got) != 2 || got[1] != (Pin{"libc6", "2.43-7", Base}) {
		t.Errorf("base pins: %+v", got)
	}
	if got := r.pinned([]Group{RocBLAS}); len(got) != 4 || got[3] != (Pin{"libroctx64-4", "1:6.4.1-1", RocBLAS}) {
		t.Errorf("pins with rocBLAS: %+v", got)
	}
}

package cudadev

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/kernels"
)

var entryRE = regexp.MustCompile(`(?s)\.visible\s+\.entry\s+([A-Za-z0-9_]+)\s*\((.*?)\)`)

type ptxParam struct {
	typ     string // ".u64", ".f32", ...
	pointer bool   // ".ptr .global"
}

// entries parses the .entry declarations of a PTX module.
func entries(t *testing.T, ptx []byte) map[string][]ptxParam {
	t.Helper()
	out := map[string][]ptxParam{}
	for _, m := range entryRE.FindAllSubmatch(ptx, -1) {
		var params []ptxParam
		for _, decl := range strings.Split(string(m[2]), ",") {
			f := strings.Fields(decl)
			if len(f) == 0 {
				continue
			}
			if f[0] != ".param" || len(f) < 3 {
				t.Fatalf("%s: cannot parse parameter %q", m[1], decl)
			}
			p := ptxParam{typ: f[1]}
			p.pointer = len(f) > 3 && f[2] == ".ptr" && f[3] == ".global"
			params = append(params, p)
		}
		out[string(m[1])] = params
	}
	return out
}

var ptxSizes = map[string]uint32{".u64": 8, ".b64": 8, ".s64": 8, ".f64": 8, ".u32": 4, ".b32": 4, ".f32": 4}

// The kernel parameters the driver sees in the PTX must be exactly those
// kernels.Args.Encode packs: five of them, laid out at the natural offsets
// of their PTX types, which must be kernels.Layout's offsets and sizes, so
// that the parameter block's pointers (one per Layout entry) point at the
// right bytes.
func TestPTXEntriesMatchLayout(t *testing.T) {
	archs := kernels.PTXTargets()
	if len(archs) == 0 {
		t.Fatal("no PTX embedded")
	}
	for _, arch := range archs {
		ptx, err := kernels.PTX(arch)
		if err != nil {
			t.Fatal(err)
		}
		if ptx[len(ptx)-1] != 0 || bytes.IndexByte(ptx[:len(ptx)-1], 0) >= 0 {
			t.Fatalf("%s: PTX not NUL-terminated exactly once", arch)
		}
		if !bytes.Contains(ptx, []byte(".target "+arch)) {
			t.Fatalf("%s: the PTX targets something else", arch)
		}
		ents := entries(t, ptx)
		if want := (kernels.NumOps + len(kernels.AllReductions())) * len(kernels.AllDTypes()); len(ents) != want {
			t.Errorf("%s: %d entries, want %d", arch, len(ents), want)
		}
		checkReductionEntries(t, arch, ents)
		for _, op := range kernels.AllOps() {
			for _, dt := range kernels.AllDTypes() {
				name := op.KernelName(dt)
				params, ok := ents[name]
				if !ok {
					t.Errorf("%s: no .entry %s", arch, name)
					continue
				}
				if len(params) != len(kernels.Layout) {
					t.Errorf("%s %s: %d parameters, want %d", arch, name, len(params), len(kernels.Layout))
					continue
				}
				want := []string{".u64", ".u64", ".u64", ".f32", ".u64"}
				if dt == kernels.F64 {
					want[3] = ".f64"
				}
				off := uint32(0)
				for i, p := range params {
					size := ptxSizes[p.typ]
					if size == 0 {
						t.Fatalf("%s %s: parameter %d has type %s", arch, name, i, p.typ)
					}
					off = (off + size - 1) / size * size // natural alignment
					spec := kernels.Layout[i]
					if p.typ != want[i] || off != spec.Offset || size != spec.Size(dt) {
						t.Errorf("%s %s: parameter %d (%s) is %s at %d size %d; Layout says %s at %d size %d",
							arch, name, i, spec.Name, p.typ, off, size, want[i], spec.Offset, spec.Size(dt))
					}
					if isPtr := spec.Kind == kernels.KindGlobalBuffer; isPtr != p.pointer {
						t.Errorf("%s %s: parameter %d pointer=%v, Layout kind %s", arch, name, i, p.pointer, spec.Kind)
					}
					off += size
				}
				if off > kernels.KernargSize {
					t.Errorf("%s %s: parameters end at %d, past KernargSize %d", arch, name, off, kernels.KernargSize)
				}
			}
		}
	}
}

// checkReductionEntries checks the reduction kernels' PTX parameters
// against kernels.ReduceLayout: three global pointers and two u64, at
// their natural offsets.
func checkReductionEntries(t *testing.T, arch string, ents map[string][]ptxParam) {
	t.Helper()
	for _, r := range kernels.AllReductions() {
		for _, dt := range kernels.AllDTypes() {
			name := r.KernelName(dt)
			params, ok := ents[name]
			if !ok {
				t.Errorf("%s: no .entry %s", arch, name)
				continue
			}
			if len(params) != len(kernels.ReduceLayout) {
				t.Errorf("%s %s: %d parameters, want %d", arch, name, len(params), len(kernels.ReduceLayout))
				continue
			}
			off := uint32(0)
			for i, p := range params {
				spec := kernels.ReduceLayout[i]
				size := ptxSizes[p.typ]
				off = (off + size - 1) / max(size, 1) * size
				if p.typ != ".u64" || off != spec.Offset || size != spec.Size(dt) {
					t.Errorf("%s %s: parameter %d (%s) is %s at %d; ReduceLayout says .u64 at %d", arch, name, i, spec.Name, p.typ, off, spec.Offset)
				}
				if isPtr := spec.Kind == kernels.KindGlobalBuffer; isPtr != p.pointer {
					t.Errorf("%s %s: parameter %d pointer=%v, ReduceLayout kind %s", arch, name, i, p.pointer, spec.Kind)
				}
				off += size
			}
			if off != kernels.ReduceKernargSize {
				t.Errorf("%s %s: parameters end at %d, want %d", arch, name, off, kernels.ReduceKernargSize)
			}
		}
	}
}

func TestPTXArch(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		want         string
	}{{9, 0, "sm_90"}, {10, 0, "sm_90"}, {12, 0, "sm_90"}, {8, 0, "sm_80"}, {8, 9, "sm_80"}, {7, 5, ""}} {
		got, err := ptxArch(c.major, c.minor)
		if c.want == "" {
			if !errors.Is(err, kernels.ErrUnsupportedTarget) {
				t.Errorf("%d.%d: want ErrUnsupportedTarget, got %q, %v", c.major, c.minor, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%d.%d: %q, %v; want %s", c.major, c.minor, got, err, c.want)
		}
	}
}

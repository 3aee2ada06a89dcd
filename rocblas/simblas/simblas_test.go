package simblas_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/rocblas/simblas"
)

func build(t *testing.T, dir string) string {
	t.Helper()
	root, err := simblas.Build(dir)
	if errors.Is(err, simblas.ErrToolMissing) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The cache entry is private, reused while it verifies, and rebuilt (not
// loaded) when a file in it changes or its manifest goes missing.
func TestBuildCachesVerifiesAndRebuilds(t *testing.T) {
	dir := t.TempDir()
	root := build(t, dir)
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("cache entry mode %v, want 0700", fi.Mode().Perm())
	}
	lib := filepath.Join(root, "lib", simblas.Soname)
	good, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if again := build(t, dir); again != root {
		t.Errorf("second Build gave %s, want the cached %s", again, root)
	}
	// Corrupt the library: the next Build must rebuild it.
	if err := os.WriteFile(lib, append(bytes.Clone(good), 0), 0o600); err != nil {
		t.Fatal(err)
	}
	if again := build(t, dir); again != root {
		t.Fatalf("rebuild went to %s, want %s", again, root)
	}
	if now, _ := os.ReadFile(lib); !bytes.Equal(now, good) {
		t.Error("a corrupt cache entry was kept")
	}
	if err := os.Remove(filepath.Join(root, "manifest")); err != nil {
		t.Fatal(err)
	}
	build(t, dir)
	if _, err := os.Stat(filepath.Join(root, "manifest")); err != nil {
		t.Errorf("entry without a manifest was not rebuilt: %v", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".build-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary build directories left behind: %v", leftovers)
	}
}

// The built code objects are v4 (HIP 5.2.3 refuses v5), define both
// kernels with exactly GemmLayout's arguments, and have no hidden arguments
// a launcher would have to fill.
func TestGemmLayoutMatchesCodeObjects(t *testing.T) {
	root := build(t, t.TempDir())
	for _, gfx := range simblas.Targets {
		co, err := os.ReadFile(filepath.Join(root, "co", gfx+".hsaco"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(co))
		if err != nil {
			t.Fatal(err)
		}
		if abi := co[elf.EI_ABIVERSION]; abi != 2 {
			t.Errorf("%s: ELF ABI version %d, want 2 (code object v4)", gfx, abi)
		}
		f.Close()
		meta, err := kernels.ReadMetadata(co)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(meta.Target, gfx) {
			t.Errorf("%s: target %q", gfx, meta.Target)
		}
		for _, dt := range kernels.AllDTypes() {
			name := simblas.SgemmKernel
			if dt == kernels.F64 {
				name = simblas.DgemmKernel
			}
			km, ok := meta.Kernel(name)
			if !ok {
				t.Fatalf("%s: no %s", gfx, name)
			}
			layout := simblas.GemmLayout(dt)
			if len(km.Args) != len(layout) {
				t.Fatalf("%s %s: %d arguments (hidden ones included), want %d", gfx, name, len(km.Args), len(layout))
			}
			for i, want := range layout {
				got := km.Args[i]
				if got.Name != want.Name || got.Offset != want.Offset || got.Size != want.Size || got.ValueKind != want.Kind {
					t.Errorf("%s %s arg %d: %+v, want %+v", gfx, name, i, got, want)
				}
			}
			last := layout[len(layout)-1]
			if km.KernargSegmentSize != last.Offset+last.Size {
				t.Errorf("%s %s: kernarg segment %d bytes, want %d", gfx, name, km.KernargSegmentSize, last.Offset+last.Size)
			}
		}
	}
}

// refGemm is an independent float64 reference.
func refGemm(g *simblas.GemmArgs, a, b, c []float64) []float64 {
	out := append([]float64(nil), c...)
	for j := uint64(0); j < g.N; j++ {
		for i := uint64(0); i < g.M; i++ {
			var sum float64
			for l := uint64(0); l < g.K; l++ {
				var x, y float64
				if g.TransA {
					x = a[l+i*g.LDA]
				} else {
					x = a[i+l*g.LDA]
				}
				if g.TransB {
					y = b[j+l*g.LDB]
				} else {
					y = b[l+j*g.LDB]
				}
				sum += x * y
			}
			r := g.Alpha * sum
			if g.Alpha == 0 || g.K == 0 {
				r = 0
			}
			if g.Beta != 0 {
				r += g.Beta * c[i+j*g.LDC]
			}
			out[i+j*g.LDC] = r
		}
	}
	return out
}

func encode(dt kernels.DType, v []float64, shift int) []byte {
	b := make([]byte, shift+len(v)*dt.Size())
	for i, x := range v {
		if dt == kernels.F32 {
			binary.LittleEndian.PutUint32(b[shift+4*i:], math.Float32bits(float32(x)))
		} else {
			binary.LittleEndian.PutUint64(b[shift+8*i:], math.Float64bits(x))
		}
	}
	return b[shift:]
}

func decode(dt kernels.DType, b []byte) []float64 {
	v := make([]float64, len(b)/dt.Size())
	for i := range v {
		if dt == kernels.F32 {
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		} else {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
	return v
}

func TestGemmBytesMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		dt := kernels.AllDTypes()[iter%2]
		g := simblas.GemmArgs{M: uint64(1 + rng.IntN(9)), N: uint64(1 + rng.IntN(9)), K: uint64(rng.IntN(7)),
			TransA: rng.IntN(2) == 1, TransB: rng.IntN(2) == 1}
		g.Alpha = []float64{0, 1, -2.5}[rng.IntN(3)]
		g.Beta = []float64{0, 1, 0.5}[rng.IntN(3)]
		ar, ac := g.M, g.K
		if g.TransA {
			ar, ac = g.K, g.M
		}
		br, bc := g.K, g.N
		if g.TransB {
			br, bc = g.N, g.K
		}
		g.LDA, g.LDB, g.LDC = max(ar, 1)+uint64(rng.IntN(3)), max(br, 1)+uint64(rng.IntN(3)), g.M+uint64(rng.IntN(3))
		a, b, c := make([]float64, g.LDA*max(ac, 1)), make([]float64, g.LDB*max(bc, 1)), make([]float64, g.LDC*g.N)
		for _, s := range [][]float64{a, b, c} {
			for i := range s {
				s[i] = float64(rng.IntN(17)-8) * 0.25
			}
		}
		if g.Beta == 0 {
			c[0] = math.NaN() // not read when beta == 0
		}
		want := refGemm(&g, a, b, c)
		shift := iter % 3 // unaligned slices take the copying path
		ab, bb, cb := encode(dt, a, shift), encode(dt, b, shift), encode(dt, c, shift)
		if g.Alpha == 0 || g.K == 0 {
			ab, bb = nil, nil // not read either
		}
		simblas.GemmBytes(dt, &g, g.M, g.N, ab, bb, cb)
		got := decode(dt, cb)
		for i := range got {
			if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
				t.Fatalf("iteration %d (%v, %+v): C[%d] = %v, want %v", iter, dt, g, i, got[i], want[i])
			}
		}
	}
}

// rocsync's rocblas binding finds the library through $ROCM_PATH and
// resolves every function it binds.
func TestBindingLoadsSimblas(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	root := build(t, t.TempDir())
	t.Setenv("ROCM_PATH", root)
	lib, err := rocblas.Open(5)
	if err != nil {
		t.Fatalf("rocblas.Open(5): %v", err)
	}
	defer lib.Close()
	if want := filepath.Join(root, "lib", simblas.Soname); lib.Path() != want {
		t.Errorf("loaded %s, want %s", lib.Path(), want)
	}
	if s := lib.StatusString(rocblas.StatusInvalidSize); s != "rocblas_status_invalid_size" {
		t.Errorf("rocblas_status_to_string = %q", s)
	}
	// A handle the library never made is refused before anything is read.
	err = lib.DestroyHandle(rocblas.Handle(0x1234))
	if err == nil {
		t.Error("destroying an unknown handle succeeded")
	}
}

// Each HIP major gets the rocBLAS soname rocsync's binding pairs with it
// (rocblas.Sonames), linked against that HIP's soname, so that the library
// loads inside a release's root where only libamdhip64.so.6 exists (sid).
func TestBuildForEachHIPMajor(t *testing.T) {
	dir := t.TempDir()
	for _, major := range []int{5, 6} {
		root, err := simblas.BuildFor(dir, major)
		if errors.Is(err, simblas.ErrToolMissing) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		soname := simblas.SonameFor(major)
		if !slices.Contains(rocblas.Sonames[major], soname) {
			t.Errorf("HIP %d: soname %s is not one the binding looks for (%v)", major, soname, rocblas.Sonames[major])
		}
		f, err := elf.Open(filepath.Join(root, "lib", soname))
		if err != nil {
			t.Fatal(err)
		}
		needed, _ := f.DynString(elf.DT_NEEDED)
		sn, _ := f.DynString(elf.DT_SONAME)
		f.Close()
		want := fmt.Sprintf("libamdhip64.so.%d", major)
		if !slices.Contains(needed, want) || len(sn) != 1 || sn[0] != soname {
			t.Errorf("HIP %d: NEEDED %v SONAME %v, want %s and %s", major, needed, sn, want, soname)
		}
	}
	if _, err := simblas.BuildFor(dir, 4); err == nil {
		t.Error("BuildFor(4) succeeded: there is no rocBLAS for HIP 4")
	}
}

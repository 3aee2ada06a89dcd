package rocblas

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/dl"
)

var fakeBuild struct {
	once sync.Once
	so   string // the compiled fake
	dir  string
	err  error
	skip string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeBuild.dir != "" {
		os.RemoveAll(fakeBuild.dir)
	}
	os.Exit(code)
}

// fakeSO compiles testdata/fakerocblas.c once, or skips when gcc is missing.
func fakeSO(t testing.TB) string {
	t.Helper()
	fakeBuild.once.Do(func() {
		gcc, err := exec.LookPath("gcc")
		if err != nil {
			fakeBuild.skip = "gcc is not installed, so the fake librocblas cannot be built"
			return
		}
		if fakeBuild.dir, fakeBuild.err = os.MkdirTemp("", "rocblastest"); fakeBuild.err != nil {
			return
		}
		fakeBuild.so = filepath.Join(fakeBuild.dir, "fakerocblas.so")
		// No -soname: a later dlopen of "librocblas.so.3" by bare name must
		// not find the fake through the loader's list of loaded objects.
		out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
			"-o", fakeBuild.so, "testdata/fakerocblas.c").CombinedOutput()
		if err != nil {
			fakeBuild.err = fmt.Errorf("building fakerocblas.c: %v\n%s", err, out)
		}
	})
	if fakeBuild.skip != "" {
		t.Skip(fakeBuild.skip)
	}
	if fakeBuild.err != nil {
		t.Fatal(fakeBuild.err)
	}
	return fakeBuild.so
}

// fakeROCm makes a fresh $ROCM_PATH holding the fake as lib/<soname> and
// points ROCM_PATH at it.
func fakeROCm(t *testing.T, soname string) string {
	so := fakeSO(t)
	root := t.TempDir()
	data, err := os.ReadFile(so)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "lib", soname), data, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ROCM_PATH", root)
	return root
}

// openFake opens the fake through Open(5) with ROCM_PATH pointing at it.
func openFake(t *testing.T) *Lib {
	t.Helper()
	root := fakeROCm(t, "librocblas.so.3")
	l, err := Open(5)
	if err != nil {
		t.Fatalf("Open(5) with the fake in %s: %v", root, err)
	}
	if want := filepath.Join(root, "lib", "librocblas.so.3"); l.Path() != want {
		t.Fatalf("Open found %s, want %s", l.Path(), want)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestBoundSymbolsTable(t *testing.T) {
	if len(BoundSymbols) != numSyms {
		t.Fatalf("%d names for %d symbols", len(BoundSymbols), numSyms)
	}
	for i, s := range BoundSymbols {
		if !strings.HasPrefix(s, "rocblas_") {
			t.Errorf("BoundSymbols[%d] = %q", i, s)
		}
	}
}

func TestFakeOpenResolvesAll(t *testing.T) {
	l := openFake(t)
	for i, name := range BoundSymbols {
		addr, err := purego.Dlsym(l.handle, name)
		if err != nil || addr == 0 || addr != l.sym[i] {
			t.Errorf("%s: bound %#x, dlsym %#x %v", name, l.sym[i], addr, err)
		}
	}
	if l.setDev == 0 {
		t.Error("hipSetDevice not resolved through the rocBLAS handle")
	}
	t.Logf("%v: %d symbols", l, len(BoundSymbols))
	if got := l.StatusString(StatusInvalidSize); got != "rocblas_status_invalid_size" {
		t.Errorf("StatusString(4) = %q", got)
	}
}

// refGemm is C = alpha*op(A)*op(B) + beta*C, column-major, in float64.
func refGemm(ta, tb Operation, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for j := range n {
		for i := range m {
			var sum float64
			for l := range k {
				var av, bv float64
				if ta == OperationNone {
					av = a[i+l*lda]
				} else {
					av = a[l+i*lda]
				}
				if tb == OperationNone {
					bv = b[l+j*ldb]
				} else {
					bv = b[j+l*ldb]
				}
				sum += av * bv
			}
			c[i+j*ldc] = alpha*sum + beta*c[i+j*ldc]
		}
	}
}

// hostPtr passes pinned Go memory to the fake, which treats device pointers
// as host pointers. Pinning keeps the memory in place and alive while the
// bare uintptr is in flight.
func hostPtr[T any](p *runtime.Pinner, s []T) hip.DevicePtr {
	p.Pin(&s[0])
	return hip.DevicePtr(uintptr(unsafe.Pointer(&s[0])))
}

func TestFakeGemm(t *testing.T) {
	l := openFake(t)
	h, err := l.CreateHandle(1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.DestroyHandle(h)
	rng := rand.New(rand.NewPCG(1, 2))
	ops := []Operation{OperationNone, OperationTranspose, OperationConjTrans}
	for _, ta := range ops {
		for _, tb := range ops {
			for _, sz := range [][3]int{{3, 5, 7}, {1, 1, 1}, {17, 2, 9}, {4, 6, 1}} {
				m, n, k := sz[0], sz[1], sz[2]
				arows, acols := m, k
				if ta != OperationNone {
					arows, acols = k, m
				}
				brows, bcols := k, n
				if tb != OperationNone {
					brows, bcols = n, k
				}
				lda, ldb, ldc := arows+2, brows+1, m+3 // padded leading dimensions
				a := make([]float64, lda*acols)
				b := make([]float64, ldb*bcols)
				c := make([]float64, ldc*n)
				for _, s := range [][]float64{a, b, c} {
					for i := range s {
						s[i] = float64(rng.IntN(17) - 8)
					}
				}
				alpha, beta := 1.5, -0.25
				want := slices.Clone(c)
				refGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc)
				name := fmt.Sprintf("%d%d/%dx%dx%d", ta, tb, m, n, k)

				// dgemm: small integers and dyadic scalars are exact.
				var pin runtime.Pinner
				cd := slices.Clone(c)
				err := l.Dgemm(h, ta, tb, int32(m), int32(n), int32(k), alpha, hostPtr(&pin, a), int32(lda),
					hostPtr(&pin, b), int32(ldb), beta, hostPtr(&pin, cd), int32(ldc))
				pin.Unpin()
				if err != nil {
					t.Fatalf("%s: Dgemm: %v", name, err)
				}
				if !slices.Equal(cd, want) {
					t.Errorf("%s: Dgemm = %v, want %v", name, cd, want)
				}

				// sgemm
				a32, b32, c32 := to32(a), to32(b), to32(c)
				err = l.Sgemm(h, ta, tb, int32(m), int32(n), int32(k), float32(alpha), hostPtr(&pin, a32), int32(lda),
					hostPtr(&pin, b32), int32(ldb), float32(beta), hostPtr(&pin, c32), int32(ldc))
				pin.Unpin()
				if err != nil {
					t.Fatalf("%s: Sgemm: %v", name, err)
				}
				for i := range want {
					if math.Abs(float64(c32[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
						t.Errorf("%s: Sgemm C[%d] = %v, want %v", name, i, c32[i], want[i])
						break
					}
				}
			}
		}
	}
}

func to32(s []float64) []float32 {
	r := make([]float32, len(s))
	for i, v := range s {
		r[i] = float32(v)
	}
	return r
}

// lastGemm reads the int32 arguments the fake received in its last gemm on
// this thread: transA, transB, m, n, k, lda, ldb, ldc, current device.
func lastGemm(t *testing.T, l *Lib) [9]int32 {
	fn, err := purego.Dlsym(l.handle, "fake_last_gemm")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, 9)
	purego.SyscallN(fn, uintptr(unsafe.Pointer(&out[0])))
	return [9]int32(out)
}

func TestFakeGemmErrors(t *testing.T) {
	l := openFake(t)
	h, err := l.CreateHandle(2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.DestroyHandle(h)
	var pin runtime.Pinner
	defer pin.Unpin()
	buf := make([]float32, 64)
	p := hostPtr(&pin, buf)
	cases := []struct {
		name                 string
		ta, tb               Operation
		m, n, k, lda, ldb, c int32
		want                 Status
	}{
		{"m<0", OperationNone, OperationNone, -1, 2, 2, 2, 2, 2, StatusInvalidSize},
		{"n<0", OperationNone, OperationNone, 2, -3, 2, 2, 2, 2, StatusInvalidSize},
		{"k<0", OperationNone, OperationNone, 2, 2, -2147483648, 2, 2, 2, StatusInvalidSize},
		{"lda<m", OperationNone, OperationNone, 5, 3, 3, 4, 3, 5, StatusInvalidSize},
		{"lda<k (transposed)", OperationTranspose, OperationNone, 5, 3, 7, 6, 7, 5, StatusInvalidSize},
		{"ldc<m", OperationNone, OperationNone, 5, 3, 3, 5, 3, 4, StatusInvalidSize},
		{"bad op", Operation(7), OperationNone, 2, 2, 2, 2, 2, 2, StatusInvalidValue},
		{"m=0 quick return", OperationNone, OperationNone, 0, 3, 3, 1, 3, 1, StatusSuccess},
	}
	for _, c := range cases {
		runtime.LockOSThread() // so that lastGemm reads this call's thread
		err := l.Sgemm(h, c.ta, c.tb, c.m, c.n, c.k, 1, p, c.lda, p, c.ldb, 0, p, c.c)
		got := lastGemm(t, l)
		runtime.UnlockOSThread()
		want := [9]int32{int32(c.ta), int32(c.tb), c.m, c.n, c.k, c.lda, c.ldb, c.c, 2}
		if got != want {
			t.Errorf("%s: the fake received %v, want %v", c.name, got, want)
		}
		if c.want == StatusSuccess {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var re *Error
		if !errors.As(err, &re) || re.Status != c.want || re.Func != "rocblas_sgemm" {
			t.Errorf("%s: got %v, want status %d", c.name, err, c.want)
			continue
		}
		if wantText := l.StatusString(c.want); re.Text != wantText || !strings.HasPrefix(wantText, "rocblas_status_") {
			t.Errorf("%s: text %q, want %q", c.name, re.Text, wantText)
		}
		if !errors.Is(err, &Error{Status: c.want}) {
			t.Errorf("%s: errors.Is by status fails", c.name)
		}
	}
	err = l.Dgemm(h, OperationNone, OperationNone, 3, -1, 3, 1, p, 3, p, 3, 0, p, 3)
	if !errors.Is(err, &Error{Status: StatusInvalidSize}) {
		t.Errorf("Dgemm n=-1: %v", err)
	}
	t.Logf("example: %v", err)
	if _, err := l.GetStream(Handle(12345)); !errors.Is(err, &Error{Status: StatusInvalidHandle}) {
		t.Errorf("unknown handle: %v", err)
	}
	if _, err := l.CreateHandle(9); !errors.Is(err, &hip.Error{Code: hip.ErrorInvalidDevice}) {
		t.Errorf("CreateHandle(9): %v", err)
	}
}

func TestFakeStreamAndPointerMode(t *testing.T) {
	l := openFake(t)
	h, err := l.CreateHandle(3)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l.GetStream(h); err != nil || s != 0 {
		t.Errorf("GetStream of a new handle = %#x, %v", s, err)
	}
	const s = hip.Stream(0x7f00dead_beef0010)
	if err := l.SetStream(h, s); err != nil {
		t.Fatal(err)
	}
	if got, err := l.GetStream(h); err != nil || got != s {
		t.Errorf("GetStream = %#x, %v; want %#x", got, err, s)
	}
	mode, _ := purego.Dlsym(l.handle, "fake_pointer_mode")
	modeOf := func() PointerMode {
		r, _, _ := purego.SyscallN(mode, uintptr(h))
		return PointerMode(uint32(r))
	}
	if err := l.SetPointerMode(h, PointerModeDevice); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(); m != PointerModeDevice {
		t.Fatalf("pointer mode %d after SetPointerMode(device)", m)
	}
	// The fake refuses gemm in device mode; the binding switches to host
	// mode for the call and back.
	var pin runtime.Pinner
	defer pin.Unpin()
	a, b, c := []float32{2}, []float32{3}, []float32{1}
	if err := l.Sgemm(h, OperationNone, OperationNone, 1, 1, 1, 2, hostPtr(&pin, a), 1, hostPtr(&pin, b), 1, 10,
		hostPtr(&pin, c), 1); err != nil {
		t.Fatalf("Sgemm in device mode: %v", err)
	}
	if c[0] != 2*2*3+10 {
		t.Errorf("c = %v, want 22", c[0])
	}
	if m := modeOf(); m != PointerModeDevice {
		t.Errorf("pointer mode %d after the gemm, want device restored", m)
	}
	if err := l.SetPointerMode(h, PointerMode(5)); !errors.Is(err, &Error{Status: StatusInvalidValue}) {
		t.Errorf("SetPointerMode(5): %v", err)
	}
	if err := l.DestroyHandle(h); err != nil {
		t.Fatal(err)
	}
	if err := l.SetStream(h, s); !errors.Is(err, &Error{Status: StatusInvalidHandle}) {
		t.Errorf("SetStream after destroy: %v", err)
	}
}

// TestFakeConcurrentHandles uses handles of four devices from goroutines
// that are not locked to threads and yield between calls; the fake fails
// any call on a thread whose current device is not the handle's.
func TestFakeConcurrentHandles(t *testing.T) {
	l := openFake(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := l.CreateHandle(g % 4)
			if err != nil {
				errs <- err
				return
			}
			a := []float64{1, 2, 3, 4} // 2x2 column-major
			c := make([]float64, 4)
			for i := range 50 {
				var pin runtime.Pinner
				err := l.Dgemm(h, OperationNone, OperationTranspose, 2, 2, 2, float64(i), hostPtr(&pin, a), 2,
					hostPtr(&pin, a), 2, 0, hostPtr(&pin, c), 2)
				pin.Unpin()
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: %w", g, err)
					return
				}
				// A*Aᵀ = [[10,14],[14,20]]
				if want := []float64{10 * float64(i), 14 * float64(i), 14 * float64(i), 20 * float64(i)}; !slices.Equal(c, want) {
					errs <- fmt.Errorf("goroutine %d: %v, want %v", g, c, want)
					return
				}
				if err := l.SetStream(h, hip.Stream(i)); err != nil {
					errs <- err
					return
				}
				runtime.Gosched()
			}
			if err := l.DestroyHandle(h); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestGemmDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	l := openFake(t)
	h, err := l.CreateHandle(0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.DestroyHandle(h)
	var pin runtime.Pinner
	defer pin.Unpin()
	a := make([]float32, 16)
	pa := hostPtr(&pin, a)
	if n := testing.AllocsPerRun(100, func() {
		if err := l.Sgemm(h, OperationNone, OperationNone, 4, 4, 4, 1, pa, 4, pa, 4, 0, pa, 4); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Sgemm: %v allocations per call", n)
	}
}

// TestMismatch puts only a ROCm 6 rocBLAS (.so.4) where HIP 5 looks. Open
// must refuse it by name without loading it.
func TestMismatch(t *testing.T) {
	root := fakeROCm(t, "librocblas.so.4")
	path := filepath.Join(root, "lib", "librocblas.so.4")
	_, err := Open(5)
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("Open(5) = %v, want *MismatchError", err)
	}
	t.Logf("%v", err)
	if me.HIPMajor != 5 || me.Path != path || me.Soname != "librocblas.so.4" || me.RocBLASRelease != "6.x" ||
		!slices.Equal(me.Want, []string{"librocblas.so.3", "librocblas.so.0"}) {
		t.Errorf("MismatchError = %+v", *me)
	}
	if errors.Is(err, ErrNotFound) {
		t.Error("a mismatch matches ErrNotFound")
	}
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil && strings.Contains(string(maps), path) {
		t.Errorf("the mismatched %s was loaded", path)
	}
	// The same library is accepted for HIP 6.
	l, err := Open(6)
	if err != nil {
		t.Fatalf("Open(6): %v", err)
	}
	l.Close()
}

// TestNotFound: there is no rocBLAS on this machine (Debian has none).
func TestNotFound(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		t.Setenv("ROCM_PATH", "") // as if unset
		testNotFound(t, "/opt/rocm/lib")
	})
	t.Run("ROCM_PATH", func(t *testing.T) {
		root := t.TempDir()
		t.Setenv("ROCM_PATH", root)
		testNotFound(t, filepath.Join(root, "lib"))
	})
}

func testNotFound(t *testing.T, firstDir string) {
	l, err := Open(5)
	if err == nil {
		l.Close()
		t.Skipf("a rocBLAS for HIP 5 is installed (%s)", l.Path())
	}
	var me *MismatchError
	if errors.As(err, &me) {
		t.Skipf("another release's rocBLAS is installed: %v", err)
	}
	t.Logf("%v", err)
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, dl.ErrNotFound) {
		t.Errorf("errors.Is(ErrNotFound / dl.ErrNotFound) false for %v", err)
	}
	var nf *dl.NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("errors.As(*dl.NotFoundError) false for %v", err)
	}
	for _, want := range []string{filepath.Join(firstDir, "librocblas.so.3"), "/opt/rocm/lib/librocblas.so.0", "librocblas.so.3", "librocblas.so.0"} {
		if !slices.Contains(nf.Tried, want) {
			t.Errorf("Tried %v lacks %s", nf.Tried, want)
		}
	}
	if !strings.HasPrefix(err.Error(), "rocBLAS not found (MatMul on the real ROCm stack needs librocblas): tried "+firstDir) {
		t.Errorf("message %q", err.Error())
	}
}

func TestOpenUnknownMajor(t *testing.T) {
	if _, err := Open(4); err == nil || !strings.Contains(err.Error(), "libamdhip64.so.4") {
		t.Errorf("Open(4) = %v", err)
	}
}

func BenchmarkFakeSgemm1x1x1(b *testing.B) {
	so := fakeSO(b)
	root := b.TempDir()
	data, _ := os.ReadFile(so)
	os.MkdirAll(filepath.Join(root, "lib"), 0o755)
	os.WriteFile(filepath.Join(root, "lib", "librocblas.so.3"), data, 0o755)
	b.Setenv("ROCM_PATH", root)
	l, err := Open(5)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	h, err := l.CreateHandle(0)
	if err != nil {
		b.Fatal(err)
	}
	defer l.DestroyHandle(h)
	var pin runtime.Pinner
	defer pin.Unpin()
	a := []float32{1, 2, 3}
	pa := hostPtr(&pin, a)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Sgemm(h, OperationNone, OperationNone, 1, 1, 1, 1, pa, 1, pa+4, 1, 0, pa+8, 1); err != nil {
			b.Fatal(err)
		}
	}
}

package cublas

import (
	"errors"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
	"github.com/rocsync/rocsync/internal/dl"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakelib.Cleanup()
	os.Exit(code)
}

func TestOpenMissing(t *testing.T) {
	t.Setenv(EnvLibCUBLAS, "/nonexistent/libcublas.so.13")
	_, err := Open()
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, dl.ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
	if !strings.Contains(err.Error(), "/nonexistent/libcublas.so.13") {
		t.Fatalf("error does not name the path: %v", err)
	}
	os.Unsetenv(EnvLibCUBLAS)
	if l, err := Open(); err == nil {
		t.Logf("cuBLAS is installed here: %s", l.Path())
	} else if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), SearchDirs()[0]) {
		t.Fatalf("default search: %v", err)
	}
}

var fix struct {
	once sync.Once
	cu   *cuda.Lib
	ctx  *cuda.Ctx
	bl   *Lib
	err  error
}

// fakes opens the fake libcuda and libcublas, or skips without gcc.
func fakes(t testing.TB) (*cuda.Ctx, *Lib) {
	t.Helper()
	fix.once.Do(func() {
		var p fakelib.Paths
		if p, fix.err = fakelib.Build(); fix.err != nil {
			return
		}
		os.Setenv(cuda.EnvLibCUDA, p.CUDA)
		os.Setenv(EnvLibCUBLAS, p.CUBLAS)
		defer os.Unsetenv(cuda.EnvLibCUDA)
		defer os.Unsetenv(EnvLibCUBLAS)
		if fix.cu, fix.err = cuda.Open(); fix.err != nil {
			return
		}
		if fix.err = fix.cu.Init(); fix.err != nil {
			return
		}
		if fix.ctx, fix.err = fix.cu.PrimaryCtxRetain(0); fix.err != nil {
			return
		}
		fix.bl, fix.err = Open()
	})
	if errors.Is(fix.err, fakelib.ErrNoCompiler) {
		t.Skip(fix.err)
	}
	if fix.err != nil {
		t.Fatal(fix.err)
	}
	return fix.ctx, fix.bl
}

func refGemm(ta, tb bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			s := 0.0
			for p := 0; p < k; p++ {
				var av, bv float64
				if ta {
					av = a[p+i*lda]
				} else {
					av = a[i+p*lda]
				}
				if tb {
					bv = b[j+p*ldb]
				} else {
					bv = b[p+j*ldb]
				}
				s += av * bv
			}
			c[i+j*ldc] = alpha*s + beta*c[i+j*ldc]
		}
	}
}

// The fake runs gemm on host memory, so "device pointers" are host
// addresses here.
func TestFakeGemm(t *testing.T) {
	ctx, l := fakes(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ctx.MakeCurrent(); err != nil {
		t.Fatal(err)
	}
	h, err := l.Create()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ctx.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetStream(h, s); err != nil {
		t.Fatal(err)
	}
	const m, n, k = 5, 3, 4
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		a := make([]float64, 32)
		b := make([]float64, 32)
		c := make([]float64, 32)
		for i := range a {
			a[i], b[i], c[i] = float64(i%7)-3, float64(i%5)*0.5, float64(i)
		}
		lda, ldb, ldc := m+1, k+1, m+2
		if tr[0] {
			lda = k + 1
		}
		if tr[1] {
			ldb = n + 1
		}
		want := append([]float64(nil), c...)
		refGemm(tr[0], tr[1], m, n, k, 1.5, a, lda, b, ldb, 0.25, want, ldc)
		opA, opB := OpN, OpN
		if tr[0] {
			opA = OpT
		}
		if tr[1] {
			opB = OpT
		}
		ptr := func(x []float64) cuda.DevicePtr { return cuda.DevicePtr(uintptr(unsafe.Pointer(&x[0]))) }
		if err := l.Dgemm(h, opA, opB, m, n, k, 1.5, ptr(a), lda, ptr(b), ldb, 0.25, ptr(c), ldc); err != nil {
			t.Fatal(err)
		}
		runtime.KeepAlive(a)
		runtime.KeepAlive(b)
		for i := range want {
			if want[i] != c[i] {
				t.Fatalf("%v: element %d = %g, want %g", tr, i, c[i], want[i])
			}
		}
		// float32, same shapes.
		a32, b32, c32 := make([]float32, 32), make([]float32, 32), make([]float32, 32)
		for i := range a32 {
			a32[i], b32[i], c32[i] = float32(a[i]), float32(b[i]), float32(i)
		}
		if err := l.Sgemm(h, opA, opB, m, n, k, 1.5, cuda.DevicePtr(uintptr(unsafe.Pointer(&a32[0]))), lda,
			cuda.DevicePtr(uintptr(unsafe.Pointer(&b32[0]))), ldb, 0.25, cuda.DevicePtr(uintptr(unsafe.Pointer(&c32[0]))), ldc); err != nil {
			t.Fatal(err)
		}
		runtime.KeepAlive(a32)
		runtime.KeepAlive(b32)
		for i := range want {
			if math.Abs(float64(c32[i])-want[i]) > 1e-4 {
				t.Fatalf("%v: sgemm element %d = %g, want %g", tr, i, c32[i], want[i])
			}
		}
	}
	// The stream the handle was bound to is the one the call ran on.
	addr, err := purego.Dlsym(l.handle, "fakecublas_last_stream")
	if err != nil {
		t.Fatal(err)
	}
	if got := *(*uintptr)(cmem.Ptr(addr)); got != uintptr(s) {
		t.Fatalf("gemm ran on stream %#x, want %#x", got, s)
	}
	// Bad leading dimension: a typed, cached error.
	err = l.Sgemm(h, OpN, OpN, 4, 4, 4, 1, 0, 1, 0, 4, 0, 0, 4)
	var be *Error
	if !errors.As(err, &be) || be.Status != StatusInvalidValue || be.Func != "cublasSgemm_v2" ||
		!errors.Is(err, &Error{Status: StatusInvalidValue}) || !strings.Contains(err.Error(), "invalid numeric value") {
		t.Fatalf("bad lda: %v", err)
	}
	if err2 := l.Sgemm(h, OpN, OpN, 4, 4, 4, 1, 0, 1, 0, 4, 0, 0, 4); err2 != err {
		t.Fatal("errors are not cached")
	}
	ma, mi, _, err := l.Version()
	if err != nil || ma != 13 || mi != 1 {
		t.Fatalf("Version = %d.%d, %v", ma, mi, err)
	}
	if err := errors.Join(l.Destroy(h), ctx.StreamDestroy(s)); err != nil {
		t.Fatal(err)
	}
}

// cuBLAS uses the calling thread's context; on a thread without one (the
// case a goroutine hits when it moves) the fake refuses, as real cuBLAS
// would misbehave.
func TestFakeNeedsCurrentContext(t *testing.T) {
	ctx, l := fakes(t)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_ = ctx.Lib().CtxSetCurrent(0)
		_, err := l.Create()
		done <- err
	}()
	if err := <-done; !errors.Is(err, &Error{Status: StatusNotInitialized}) {
		t.Fatalf("Create without a context: %v", err)
	}
}

func TestFakeGemmDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx, l := fakes(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ctx.MakeCurrent(); err != nil {
		t.Fatal(err)
	}
	h, err := l.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy(h)
	buf := make([]float32, 64)
	p := cuda.DevicePtr(uintptr(unsafe.Pointer(&buf[0])))
	f := func() {
		if err := l.Sgemm(h, OpN, OpN, 8, 8, 8, 1, p, 8, p, 8, 0, p, 8); err != nil {
			t.Fatal(err)
		}
	}
	f()
	if n := testing.AllocsPerRun(1000, f); n != 0 {
		t.Fatalf("Sgemm: %v allocations per call", n)
	}
	runtime.KeepAlive(buf)
}

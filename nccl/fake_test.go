package nccl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// The fake library (testdata/fakenccl.c, compiled against
// testdata/nccl.h) is built once per test process.
var fake struct {
	once sync.Once
	dir  string
	path string // the fake as libnccl.so.2
	lib  *Lib
	err  error
}

var errNoCompiler = errors.New("gcc or testdata/fakenccl.c is missing: the fake NCCL cannot be built")

func buildFake() (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", errNoCompiler
	}
	src, err := filepath.Abs(filepath.Join("testdata", "fakenccl.c"))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(src); err != nil {
		return "", errNoCompiler
	}
	if fake.dir, err = os.MkdirTemp("", "fakenccl"); err != nil {
		return "", err
	}
	out := filepath.Join(fake.dir, SonameNCCL)
	// No -soname: a later dlopen by bare name must not find the fake
	// through the loader's list of loaded objects.
	cmd := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Dir(src), "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("building fakenccl.c: " + err.Error() + "\n" + string(msg))
	}
	return out, nil
}

// fakeLib opens the fake through OpenNCCL, or skips without gcc, and in a
// real-GPU run (ROCSYNC_GPU=1): libraries load RTLD_GLOBAL (internal/dl),
// so once the fake is in the process the real libnccl's calls to its own
// exported functions can bind to the fake's, and the GPU tests then fail
// (ncclInternalError, ncclInvalidArgument: seen on two H200s with both in
// one test binary). The fake's tests run in every run without a GPU, CI's.
func fakeLib(t testing.TB) *Lib {
	t.Helper()
	if os.Getenv("ROCSYNC_GPU") == "1" {
		t.Skip("a real-GPU run: the fake NCCL stays out of this process, where it would take the real library's symbols")
	}
	fake.once.Do(func() {
		if fake.path, fake.err = buildFake(); fake.err != nil {
			return
		}
		os.Setenv(EnvLibNCCL, fake.path)
		defer os.Unsetenv(EnvLibNCCL)
		// Unset in both environments (only the fake is loaded here), so
		// that what the fake saw at load proves OpenNCCL's guard set it.
		os.Unsetenv(EnvNVLS)
		if fake.err = loadLibcEnv(); fake.err != nil {
			return
		}
		if _, set := cGetenv(EnvNVLS); set {
			fake.err = errors.New("os.Unsetenv did not reach the C environment")
			return
		}
		fake.lib, fake.err = OpenNCCL()
	})
	if errors.Is(fake.err, errNoCompiler) {
		t.Skip(fake.err)
	}
	if fake.err != nil {
		t.Fatal(fake.err)
	}
	return fake.lib
}

func TestMain(m *testing.M) {
	if os.Getenv(envChildGPU) == "1" {
		os.Exit(childGPUMain())
	}
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	if fake.dir != "" {
		os.RemoveAll(fake.dir)
	}
	os.Exit(code)
}

// fakeSym is the address of a variable the fake exports for the tests.
func fakeSym(l *Lib, name string) (unsafe.Pointer, error) {
	addr, err := purego.Dlsym(l.handle, name)
	if err != nil || addr == 0 {
		return nil, fmt.Errorf("the fake lacks %s: %v", name, err)
	}
	return cmem.Ptr(addr), nil
}

func fakeVar(t testing.TB, l *Lib, name string) unsafe.Pointer {
	t.Helper()
	p, err := fakeSym(l, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fakeInts(t testing.TB, l *Lib, name string, n int) []int32 {
	return unsafe.Slice((*int32)(fakeVar(t, l, name)), n)
}

func fakeString(t testing.TB, l *Lib, name string) string {
	return cmem.GoString(uintptr(fakeVar(t, l, name)))
}

// setFakeTimeout changes how long the fake waits for a peer, until the
// test ends.
func setFakeTimeout(t testing.TB, l *Lib, ms int32) {
	p := (*int32)(fakeVar(t, l, "fakenccl_timeout_ms"))
	old := *p
	*p = ms
	t.Cleanup(func() { *p = old })
}

// setFakeDevice is the fake's cudaSetDevice, for the calling OS thread.
func setFakeDevice(t testing.TB, l *Lib, d int) {
	fn, err := purego.Dlsym(l.handle, "fakenccl_set_device")
	if err != nil {
		t.Fatal(err)
	}
	purego.SyscallN(fn, uintptr(d))
}

// cbuf is "device memory" for the fake: C memory, so that its address can
// go through the binding's uintptr arguments without Go's pointer rules.
func cbuf[T any](t testing.TB, n int) []T {
	t.Helper()
	if n == 0 {
		return nil
	}
	var z T
	p := cmem.Alloc(uintptr(n) * unsafe.Sizeof(z))
	if p == nil {
		t.Fatal("no C memory")
	}
	t.Cleanup(func() { cmem.Free(p) })
	return unsafe.Slice((*T)(p), n)
}

// cslice is cbuf for code without a testing.TB (the child process); the
// memory is never freed.
func cslice[T any](n int) []T {
	var z T
	p := cmem.Alloc(uintptr(n) * unsafe.Sizeof(z))
	if p == nil {
		panic("no C memory")
	}
	return unsafe.Slice((*T)(p), n)
}

func addr[T any](s []T) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }

// lockThread keeps the test on one OS thread: NCCL's groups are per
// thread.
func lockThread(t testing.TB) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

func destroyAll(t testing.TB, l *Lib, comms []Comm) {
	t.Helper()
	for _, c := range comms {
		if err := l.CommDestroy(c); err != nil {
			t.Errorf("CommDestroy: %v", err)
		}
	}
}

package hip

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

func TestBoundSymbolsTable(t *testing.T) {
	if len(BoundSymbols) != numSyms {
		t.Fatalf("BoundSymbols has %d names, want %d", len(BoundSymbols), numSyms)
	}
	seen := map[string]bool{}
	for i, s := range BoundSymbols {
		if s == "" || !strings.HasPrefix(s, "hip") {
			t.Errorf("BoundSymbols[%d] = %q", i, s)
		}
		if seen[s] {
			t.Errorf("%s listed twice", s)
		}
		seen[s] = true
	}
	if seen["hipGetDeviceProperties"] {
		t.Error("hipGetDeviceProperties must not be bound (its ABI changed in ROCm 6)")
	}
}

// TestOpenRealResolvesAll loads the installed libamdhip64 (Debian's 5.2.3
// here) and checks that every bound symbol resolved to the address dlsym
// gives.
func TestOpenRealResolvesAll(t *testing.T) {
	l := realLib(t)
	t.Logf("opened %s (major %d)", l.Path(), l.Major())
	if fakeFix.dir != "" && strings.HasPrefix(l.Path(), fakeFix.dir) {
		t.Fatalf("the real Open found the fake at %s", l.Path())
	}
	if m := l.Major(); m < 5 || m > 7 {
		t.Fatalf("Major() = %d", m)
	}
	for i, name := range BoundSymbols {
		addr, err := purego.Dlsym(l.handle, name)
		if err != nil || addr == 0 {
			t.Errorf("%s: dlsym: %v", name, err)
			continue
		}
		if l.sym[i] != addr {
			t.Errorf("%s: bound %#x, dlsym %#x", name, l.sym[i], addr)
		}
	}
	t.Logf("%d symbols resolved", len(BoundSymbols))
	v, err := l.RuntimeVersion()
	if err != nil {
		t.Fatalf("RuntimeVersion: %v", err)
	}
	t.Logf("hipRuntimeGetVersion = %d", v)
	if v/10000000 != l.Major() {
		t.Errorf("runtime version %d does not belong to soname major %d", v, l.Major())
	}
	if got := l.ErrorName(ErrorNoDevice); got != "hipErrorNoDevice" {
		t.Errorf("ErrorName(100) = %q", got)
	}
}

// noGPU skips unless HIP reports that there is no device.
func noGPU(t *testing.T, l *Lib) {
	t.Helper()
	if n, err := l.DeviceCount(); err == nil {
		t.Skipf("%d AMD GPU(s) present; this test describes a machine without one", n)
	}
}

func TestDeviceCountNoGPU(t *testing.T) {
	l := realLib(t)
	n, err := l.DeviceCount()
	if err == nil {
		t.Skipf("%d AMD GPU(s) present; this test describes a machine without one", n)
	}
	t.Logf("DeviceCount: %d, %v", n, err)
	if n != 0 {
		t.Errorf("count = %d with an error", n)
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("errors.Is(err, ErrNoDevice) is false for %v", err)
	}
	var he *Error
	if !errors.As(err, &he) {
		t.Fatalf("errors.As(err, *Error) is false for %v", err)
	}
	if he.Code != ErrorNoDevice || he.Name != "hipErrorNoDevice" || he.Func != "hipGetDeviceCount" {
		t.Errorf("*Error = %+v", *he)
	}
	if !errors.Is(err, &Error{Code: ErrorNoDevice}) {
		t.Error("errors.Is(err, &Error{Code: 100}) is false")
	}
	if errors.Is(err, &Error{Code: ErrorInvalidDevice}) {
		t.Error("errors.Is(err, &Error{Code: 101}) is true")
	}
	const want = "no AMD GPU found (hip: hipGetDeviceCount: error 100 hipErrorNoDevice)"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

// TestNoGPUCalls records what every method returns from the real library
// with no GPU: HIP's initialisation fails, and each call returns
// hipErrorInvalidDevice (101) before it looks at its arguments, so null
// handles are safe here. Device-sensitive methods fail in hipSetDevice.
func TestNoGPUCalls(t *testing.T) {
	l := realLib(t)
	noGPU(t, l)
	var x uint64
	p := unsafe.Pointer(&x)
	calls := []struct {
		name string
		fn   func() error
	}{
		{"Init", l.Init},
		{"DeviceSynchronize", func() error { return l.DeviceSynchronize(0) }},
		{"DeviceName", func() error { _, err := l.DeviceName(0); return err }},
		{"DeviceAttribute", func() error { _, err := l.DeviceAttribute(0, DeviceAttributeWarpSize); return err }},
		{"getDevice", func() error { _, err := l.getDevice(); return err }},
		{"StreamCreate", func() error { _, err := l.StreamCreate(0, StreamNonBlocking); return err }},
		{"StreamDestroy", func() error { return l.StreamDestroy(0) }},
		{"StreamSynchronize", func() error { return l.StreamSynchronize(0) }},
		{"StreamQuery", func() error { return l.StreamQuery(0) }},
		{"EventCreate", func() error { _, err := l.EventCreate(0, EventDisableTiming); return err }},
		{"EventDestroy", func() error { return l.EventDestroy(0) }},
		{"EventRecord", func() error { return l.EventRecord(0, 0) }},
		{"EventQuery", func() error { return l.EventQuery(0) }},
		{"EventSynchronize", func() error { return l.EventSynchronize(0) }},
		{"StreamWaitEvent", func() error { return l.StreamWaitEvent(0, 0) }},
		{"Malloc", func() error { _, err := l.Malloc(0, 16); return err }},
		{"ExtMalloc", func() error { _, err := l.ExtMalloc(0, 16, MallocSignalMemory); return err }},
		{"Free", func() error { return l.Free(0, 0) }},
		{"MemcpyHtoD", func() error { return l.MemcpyHtoD(0, 0, p, 8) }},
		{"MemcpyDtoH", func() error { return l.MemcpyDtoH(0, p, 0, 8) }},
		{"MemcpyDtoDAsync", func() error { return l.MemcpyDtoDAsync(0, 0, 0, 0) }},
		{"MemsetAsync", func() error { return l.MemsetAsync(0, 0, 0, 0) }},
		{"ModuleLoadData", func() error { _, err := l.ModuleLoadData(0, []byte("not a code object")); return err }},
		{"ModuleGetFunction", func() error { _, err := l.ModuleGetFunction(0, "k"); return err }},
		{"ModuleUnload", func() error { return l.ModuleUnload(0) }},
		{"ModuleLaunchKernel", func() error {
			return l.ModuleLaunchKernel(0, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, 0, make([]byte, 24))
		}},
		{"StreamWaitValue64", func() error { return l.StreamWaitValue64(0, p, 0, StreamWaitValueGte, ^uint64(0)) }},
		{"StreamWriteValue64", func() error { return l.StreamWriteValue64(0, p, 1, 0) }},
	}
	for _, c := range calls {
		err := c.fn()
		t.Logf("%-20s -> %v", c.name, err)
		var he *Error
		if !errors.As(err, &he) {
			t.Errorf("%s: %v is not a *hip.Error", c.name, err)
			continue
		}
		if he.Code != ErrorInvalidDevice || he.Name != "hipErrorInvalidDevice" {
			t.Errorf("%s: got %v, want hipErrorInvalidDevice", c.name, err)
		}
	}
	if x != 0 {
		t.Errorf("a failed call wrote %#x through the host pointer", x)
	}
}

// TestRealConcurrent calls into the real library from many goroutines (run
// it with -race).
func TestRealConcurrent(t *testing.T) {
	l := realLib(t)
	done := make(chan error)
	for g := range 16 {
		go func() {
			var err error
			for i := range 20 {
				if name := l.ErrorName(ErrorNotReady); name != "hipErrorNotReady" {
					err = errors.New("ErrorName: " + name)
				}
				if (g+i)%4 == 0 {
					_, err2 := l.DeviceCount()
					if err2 != nil && !errors.Is(err2, ErrNoDevice) {
						err = err2
					}
				}
			}
			done <- err
		}()
	}
	for range 16 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestSonameMajor(t *testing.T) {
	for in, want := range map[string]int{
		"libamdhip64.so.5":                     5,
		"/opt/rocm/lib/libamdhip64.so.6":       6,
		"/opt/rocm-7.0.1/lib/libamdhip64.so.7": 7,
		"libamdhip64.so.6.2.41133":             6,
	} {
		if got, err := sonameMajor(in); err != nil || got != want {
			t.Errorf("sonameMajor(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := sonameMajor("libamdhip64.so"); err == nil {
		t.Error("sonameMajor(libamdhip64.so) succeeded")
	}
}

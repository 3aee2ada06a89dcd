package hip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/cmem"
)

// These tests run the binding against testdata/fakehip.c, which checks what
// arrives on the C side: argument order and widths, the extra array of
// hipModuleLaunchKernel, the kept code-object image, and the per-thread
// current device. See the comment at the top of fakehip.c.

func TestFakeOpen(t *testing.T) {
	l := fakeLib(t)
	if want := filepath.Join(fakeFix.dir, "lib", "libamdhip64.so.7"); l.Path() != want {
		t.Errorf("Path() = %q, want %q ($ROCM_PATH/lib first)", l.Path(), want)
	}
	if l.Major() != 7 {
		t.Errorf("Major() = %d, want 7", l.Major())
	}
	for i, name := range BoundSymbols {
		addr, err := purego.Dlsym(l.handle, name)
		if err != nil || addr != l.sym[i] {
			t.Errorf("%s: bound %#x, dlsym %#x %v", name, l.sym[i], addr, err)
		}
	}
	if v, err := l.RuntimeVersion(); err != nil || v != 70012345 {
		t.Errorf("RuntimeVersion = %d, %v", v, err)
	}
	if err := l.Init(); err != nil {
		t.Errorf("Init: %v", err)
	}
	if n, err := l.DeviceCount(); err != nil || n != 4 {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}
	if s, err := l.DevicePCIBusID(2); err != nil || s != "0000:82:00.0" {
		t.Errorf("DevicePCIBusID(2) = %q, %v", s, err)
	}
	if s, err := l.DeviceName(2); err != nil || s != "Fake AMD GPU 2" {
		t.Errorf("DeviceName(2) = %q, %v", s, err)
	}
	if v, err := l.DeviceAttribute(3, DeviceAttributeWarpSize); err != nil || v != 873 {
		t.Errorf("DeviceAttribute(3, WarpSize) = %d, %v", v, err)
	}
	if err := l.DeviceSynchronize(1); err != nil {
		t.Errorf("DeviceSynchronize: %v", err)
	}
}

func TestFakeErrors(t *testing.T) {
	l := fakeLib(t)
	_, err := l.StreamCreate(9, 0)
	var he *Error
	if !errors.As(err, &he) || he.Func != "hipSetDevice" || he.Code != ErrorInvalidDevice || he.Name != "hipErrorInvalidDevice" {
		t.Errorf("StreamCreate(9) = %v", err)
	}
	if _, err := l.DeviceName(9); !errors.Is(err, &Error{Func: "hipDeviceGetName", Code: ErrorInvalidDevice}) {
		t.Errorf("DeviceName(9) = %v", err)
	}
	e, err := l.EventCreate(1, EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	defer l.EventDestroy(e)
	err1 := l.EventQuery(e)
	err2 := l.EventQuery(e)
	if !errors.Is(err1, &Error{Code: ErrorNotReady}) {
		t.Fatalf("EventQuery before record = %v", err1)
	}
	if err1 != err2 {
		t.Error("the NotReady error is not cached")
	}
	if got, want := err1.Error(), "hip: hipEventQuery: error 600 hipErrorNotReady: fake: work still pending"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	s2, err := l.StreamCreate(2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.StreamDestroy(s2)
	if err := l.EventRecord(e, s2); !errors.Is(err, &Error{Func: "hipEventRecord", Code: ErrorInvalidHandle}) {
		t.Errorf("EventRecord(event of device 1, stream of device 2) = %v", err)
	}
}

func TestFakeMemory(t *testing.T) {
	l := fakeLib(t)
	s, err := l.StreamCreate(1, StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer l.StreamDestroy(s)
	a, err := l.Malloc(1, 64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Malloc(1, 64)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i * 3)
	}
	if err := l.MemcpyHtoD(1, a, unsafe.Pointer(&src[0]), 64); err != nil {
		t.Fatal(err)
	}
	if err := l.MemsetAsync(a+8, 0xAB, 8, s); err != nil {
		t.Fatal(err)
	}
	if err := l.MemcpyDtoDAsync(b, a, 64, s); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 64)
	if err := l.MemcpyDtoH(1, unsafe.Pointer(&dst[0]), b, 64); err != nil {
		t.Fatal(err)
	}
	for i := range dst {
		want := byte(i * 3)
		if i >= 8 && i < 16 {
			want = 0xAB
		}
		if dst[i] != want {
			t.Fatalf("dst[%d] = %#x, want %#x", i, dst[i], want)
		}
	}
	if err := l.Free(1, a); err != nil {
		t.Error(err)
	}
	if err := l.Free(1, b); err != nil {
		t.Error(err)
	}
}

func TestFakeWaitWriteValue(t *testing.T) {
	l := fakeLib(t)
	s, err := l.StreamCreate(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.StreamDestroy(s)
	p, err := l.ExtMalloc(0, 8, MallocSignalMemory)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Free(0, p)
	ptr := cmem.Ptr(uintptr(p)) // C memory in the fake
	const v = 0x1234_5678_9abc_def0
	if err := l.StreamWriteValue64(s, ptr, v, 0); err != nil {
		t.Fatal(err)
	}
	if got := *(*uint64)(ptr); got != v {
		t.Fatalf("wrote %#x, want %#x", got, uint64(v))
	}
	for _, c := range []struct {
		value uint64
		flags uint32
		mask  uint64
		ok    bool
	}{
		{v, StreamWaitValueEq, ^uint64(0), true},
		{v + 1, StreamWaitValueEq, ^uint64(0), false},
		{v, StreamWaitValueGte, ^uint64(0), true},
		{v + 1, StreamWaitValueGte, ^uint64(0), false},
		{0xdef0, StreamWaitValueEq, 0xffff, true},
		{1 << 63, StreamWaitValueAnd, ^uint64(0), false},
		{1 << 60, StreamWaitValueAnd, ^uint64(0), true},
		{0, StreamWaitValueNor, 0, true},
	} {
		err := l.StreamWaitValue64(s, ptr, c.value, c.flags, c.mask)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, &Error{Code: ErrorNotReady})) {
			t.Errorf("wait %#x flags %d mask %#x: %v, want ok=%v", c.value, c.flags, c.mask, err, c.ok)
		}
	}
}

// launchArgs builds the argument buffer that fakehip.c checks for k.
func launchArgs(k uint32, n int) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, k)
	for i := 4; i < n; i++ {
		b[i] = byte(uint32(i)*k + 7)
	}
	return b
}

func launchGeom(k uint32) (grid, block [3]uint32, shared uint32) {
	return [3]uint32{k + 1, k + 2, k + 3}, [3]uint32{k + 4, k + 5, k + 6}, k + 7
}

// TestFakeConcurrentDevices runs goroutines on four devices at once, none of
// them locked to a thread, and yields between calls so that they migrate.
// The fake fails any call made on a thread whose current device is not the
// object's, so this checks the LockOSThread+hipSetDevice discipline. It also
// checks the image copy (the Go slice is overwritten after loading; the fake
// re-reads its kept pointer) and the launch buffer (including growth past
// the initial 4 KiB).
func TestFakeConcurrentDevices(t *testing.T) {
	l := fakeLib(t)
	const goroutines = 16
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := deviceWorkload(l, g%4, uint32(g)); err != nil {
				errs <- fmt.Errorf("goroutine %d (device %d): %w", g, g%4, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	x := l.idx.Load()
	if len(x.streams)+len(l.modules)+len(x.funcs) != 0 {
		t.Errorf("leaked bookkeeping: %d streams, %d modules, %d funcs", len(x.streams), len(l.modules), len(x.funcs))
	}
}

func deviceWorkload(l *Lib, dev int, seed uint32) error {
	s, err := l.StreamCreate(dev, StreamNonBlocking)
	if err != nil {
		return err
	}
	image := []byte("FAKE code object")
	m, err := l.ModuleLoadData(dev, image)
	if err != nil {
		return err
	}
	copy(image, "XXXX") // the library must hold its own copy
	runtime.Gosched()
	f, err := l.ModuleGetFunction(m, "kern")
	if err != nil {
		return fmt.Errorf("ModuleGetFunction: %w", err)
	}
	if _, err := l.ModuleGetFunction(m, "missing"); !errors.Is(err, &Error{Code: ErrorNotFound}) {
		return fmt.Errorf("ModuleGetFunction(missing) = %v", err)
	}
	ev, err := l.EventCreate(dev, EventDisableTiming)
	if err != nil {
		return err
	}
	for i := range uint32(50) {
		k := seed*1000 + i
		n := 4 + int(i*37)%100
		if i%10 == 9 {
			n = 5000 + int(i) // past the initial buffer
		}
		grid, block, shared := launchGeom(k)
		st := s
		if i%5 == 4 {
			st = 0 // null stream: the function's device is made current
		}
		if err := l.ModuleLaunchKernel(f, grid, block, shared, st, launchArgs(k, n)); err != nil {
			return fmt.Errorf("launch %d (n=%d, stream %#x): %w", i, n, st, err)
		}
		if err := l.EventRecord(ev, s); err != nil {
			return err
		}
		if err := l.StreamWaitEvent(s, ev); err != nil {
			return err
		}
		if err := l.EventQuery(ev); err != nil {
			return err
		}
		if err := l.StreamQuery(s); err != nil {
			return err
		}
		runtime.Gosched()
	}
	if err := l.ModuleLaunchKernel(f, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, nil); err != nil {
		return fmt.Errorf("launch with no arguments: %w", err)
	}
	if err := l.EventSynchronize(ev); err != nil {
		return err
	}
	if err := l.StreamSynchronize(s); err != nil {
		return err
	}
	if err := l.EventDestroy(ev); err != nil {
		return err
	}
	if err := l.ModuleUnload(m); err != nil {
		return fmt.Errorf("ModuleUnload: %w", err)
	}
	return l.StreamDestroy(s)
}

// TestFakeLaunchChecks makes sure the fake would notice wrong arguments, so
// that the passing tests above mean something.
func TestFakeLaunchChecks(t *testing.T) {
	l := fakeLib(t)
	s, _ := l.StreamCreate(2, 0)
	defer l.StreamDestroy(s)
	m, err := l.ModuleLoadData(2, []byte("FAKE"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.ModuleUnload(m)
	f, err := l.ModuleGetFunction(m, "kern")
	if err != nil {
		t.Fatal(err)
	}
	grid, block, shared := launchGeom(5)
	if err := l.ModuleLaunchKernel(f, grid, block, shared+1, s, launchArgs(5, 16)); err == nil {
		t.Error("wrong shared size not noticed")
	}
	bad := launchArgs(5, 16)
	bad[15]++
	if err := l.ModuleLaunchKernel(f, grid, block, shared, s, bad); !errors.Is(err, &Error{Code: ErrorInvalidValue}) {
		t.Errorf("wrong argument byte: %v", err)
	}
	// A stream of another device, with the right device current, is refused
	// by HIP (and by the fake); the binding makes the stream's device
	// current, so it is the function's device that mismatches here.
	s3, _ := l.StreamCreate(3, 0)
	defer l.StreamDestroy(s3)
	if err := l.ModuleLaunchKernel(f, grid, block, shared, s3, launchArgs(5, 16)); err == nil {
		t.Error("function of device 2 launched on a stream of device 3")
	}
	if _, err := l.ModuleLoadData(0, []byte("ELF?")); !errors.Is(err, &Error{Code: ErrorInvalidImage}) {
		t.Errorf("bad image: %v", err)
	}
}

// TestFakeHotPathsDoNotAllocate checks that the hot paths make no Go
// allocation: event record, stream wait event, queries (including the
// NotReady error) and launch.
func TestFakeHotPathsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	l := fakeLib(t)
	s, _ := l.StreamCreate(1, 0)
	defer l.StreamDestroy(s)
	ev, _ := l.EventCreate(1, 0)
	defer l.EventDestroy(ev)
	ev2, _ := l.EventCreate(1, 0) // never recorded: EventQuery says NotReady
	defer l.EventDestroy(ev2)
	m, _ := l.ModuleLoadData(1, []byte("FAKE"))
	defer l.ModuleUnload(m)
	f, _ := l.ModuleGetFunction(m, "kern")
	p, _ := l.ExtMalloc(1, 8, MallocSignalMemory)
	defer l.Free(1, p)
	grid, block, shared := launchGeom(3)
	args := launchArgs(3, 64)
	// In order: the fake reports a never-recorded event as not ready, so
	// the record comes before the queries.
	for _, c := range []struct {
		name string
		fn   func() error
	}{
		{"DeviceCount", func() error { _, err := l.DeviceCount(); return err }},
		{"EventRecord", func() error { return l.EventRecord(ev, s) }},
		{"StreamWaitEvent", func() error { return l.StreamWaitEvent(s, ev) }},
		{"EventQuery", func() error { return l.EventQuery(ev) }},
		{"EventQueryNotReady", func() error {
			if err := l.EventQuery(ev2); err == nil {
				return errors.New("not NotReady")
			}
			return nil
		}},
		{"StreamQuery", func() error { return l.StreamQuery(s) }},
		{"StreamWriteValue64", func() error { return l.StreamWriteValue64(s, cmem.Ptr(uintptr(p)), 1, 0) }},
		{"StreamWaitValue64", func() error {
			return l.StreamWaitValue64(s, cmem.Ptr(uintptr(p)), 0, StreamWaitValueGte, ^uint64(0))
		}},
		{"ModuleLaunchKernel", func() error { return l.ModuleLaunchKernel(f, grid, block, shared, s, args) }},
	} {
		name, fn := c.name, c.fn
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := testing.AllocsPerRun(200, func() { _ = fn() }); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}

// hipEventElapsedTime passes the output float first and the two events in
// order, and its float result comes back whole.
func TestFakeEventElapsedTime(t *testing.T) {
	l := fakeLib(t)
	s, err := l.StreamCreate(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.StreamDestroy(s)
	a, _ := l.EventCreate(1, 0)
	defer l.EventDestroy(a)
	b, _ := l.EventCreate(1, 0)
	defer l.EventDestroy(b)
	untimed, _ := l.EventCreate(1, EventDisableTiming)
	defer l.EventDestroy(untimed)
	if _, err := l.EventElapsedTime(a, b); !errors.Is(err, &Error{Func: "hipEventElapsedTime", Code: ErrorNotReady}) {
		t.Errorf("EventElapsedTime before the records = %v", err)
	}
	for _, e := range []Event{a, b, untimed} {
		if err := l.EventRecord(e, s); err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := l.EventElapsedTime(a, b); err != nil || ms != 1.5 {
		t.Errorf("EventElapsedTime = %v, %v", ms, err)
	}
	if _, err := l.EventElapsedTime(a, untimed); !errors.Is(err, &Error{Code: ErrorInvalidHandle}) {
		t.Errorf("EventElapsedTime with a DisableTiming event = %v", err)
	}
}

// HIP resolves a pointer it did not allocate (an HSA signal's value
// address) through the calling thread's current device (clr
// hip_memory.cpp, getMemoryObject), so the stream memory operations run
// with the stream's device current, as hipModuleLaunchKernel does: from a
// thread whose current device is another GPU's, the fake's lookup fails.
func TestFakeStreamMemoryOpsOnTheStreamsDevice(t *testing.T) {
	l := fakeLib(t)
	register, err := purego.Dlsym(l.handle, "fakehip_register_foreign")
	require.NoError(t, err)
	s, err := l.StreamCreate(1, 0)
	require.NoError(t, err)
	defer l.StreamDestroy(s)
	word := cmem.Alloc(8) // ROCr's memory, which HIP finds only from GPU 1
	defer cmem.Free(word)
	r, _, _ := purego.SyscallN(register, uintptr(word), 1)
	require.Zero(t, int32(r))
	defer purego.SyscallN(register, uintptr(word), ^uintptr(0)) // forget it before it is freed
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	other, err := l.StreamCreate(0, 0) // leaves GPU 0 current on this thread
	require.NoError(t, err)
	defer l.StreamDestroy(other)
	cur, err := l.getDevice()
	require.NoError(t, err)
	require.Equal(t, 0, cur)
	require.NoError(t, l.StreamWriteValue64(s, word, 7, 0))
	require.Equal(t, uint64(7), *(*uint64)(word))
	require.NoError(t, l.StreamWaitValue64(s, word, 7, StreamWaitValueEq, ^uint64(0)))
	require.ErrorIs(t, l.StreamWaitValue64(other, word, 7, StreamWaitValueEq, ^uint64(0)), &Error{Code: ErrorInvalidValue},
		"GPU 0's lookup does not find GPU 1's memory")
}

//go:build linux && (amd64 || arm64)

package hsa

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/dl"
)

// openOrSkip opens the real library, skipping where ROCm is not installed
// (CI installs it; developer machines may not have it).
func openOrSkip(t testing.TB) *Lib {
	t.Helper()
	l, err := Open()
	if errors.Is(err, dl.ErrNotFound) {
		t.Skipf("libhsa-runtime64 is not installed (install ROCm or Debian's libhsa-runtime64-1): %v", err)
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// initFailsOrSkip runs Init and skips the test if it succeeds: the tests
// that use it check what the binding does on a machine without a GPU.
func initFailsOrSkip(t *testing.T, l *Lib) error {
	t.Helper()
	err := l.Init()
	if err == nil {
		if err := l.ShutDown(); err != nil {
			t.Errorf("ShutDown after a successful Init: %v", err)
		}
		t.Skip("hsa_init succeeded: this machine has a usable AMD GPU; the no-GPU checks do not apply")
	}
	return err
}

func TestOpenResolvesBoundSymbols(t *testing.T) {
	l := openOrSkip(t)
	if len(BoundSymbols) != numSyms {
		t.Fatalf("len(BoundSymbols) = %d, want %d (one per sym* index)", len(BoundSymbols), numSyms)
	}
	if len(BoundSymbols) < 40 {
		t.Errorf("only %d bound symbols; the binding needs at least 40", len(BoundSymbols))
	}
	seen := map[string]bool{}
	for i, name := range BoundSymbols {
		if name == "" {
			t.Errorf("BoundSymbols[%d] is empty", i)
		}
		if seen[name] {
			t.Errorf("%s bound twice", name)
		}
		seen[name] = true
		if l.fn[i] == 0 {
			t.Errorf("%s resolved to address 0", name)
		}
	}
	// Each name is also resolvable on its own, not just as a batch.
	lib, err := dl.Open(libName, []string{libSoname}, dl.SearchDirs())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range BoundSymbols {
		if a, err := purego.Dlsym(lib.Handle, name); err != nil || a == 0 {
			t.Errorf("dlsym(%s): %v", name, err)
		}
	}
	t.Logf("%d symbols from %s", len(BoundSymbols), l.Path())
}

func TestInitWithoutGPU(t *testing.T) {
	l := openOrSkip(t)
	err := initFailsOrSkip(t, l)

	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Init error %q (%T) does not match ErrNoGPU", err, err)
	}
	var he *Error
	if !errors.As(err, &he) {
		t.Fatalf("Init error %q does not wrap an *hsa.Error", err)
	}
	if he.Func != "hsa_init" || he.Status != StatusErrorOutOfResources {
		t.Errorf("wrapped error = %+v, want hsa_init status 0x1008", he)
	}
	if !errors.Is(err, &Error{Status: StatusErrorOutOfResources}) {
		t.Error("errors.Is by status (Error.Is) does not match through the wrapper")
	}
	msg := err.Error()
	for _, want := range []string{
		"no AMD GPU found",
		"hsa_init",
		"0x1008",
		"HSA_STATUS_ERROR_OUT_OF_RESOURCES",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if !strings.HasPrefix(msg, "no AMD GPU found (HSA: hsa_init: status 0x1008: HSA_STATUS_ERROR_OUT_OF_RESOURCES: ") {
		t.Errorf("message %q does not have the documented shape", msg)
	}
	if _, statErr := os.Stat(kfdPath); os.IsNotExist(statErr) && !strings.Contains(msg, "/dev/kfd is absent") {
		t.Errorf("/dev/kfd is absent but the message %q does not say so", msg)
	}
	t.Logf("Init: %v", err)

	// A second failed init fails the same way (ROCr does not cache a
	// half-initialised runtime).
	if err2 := l.Init(); !errors.Is(err2, ErrNoGPU) {
		t.Errorf("second Init = %v, want ErrNoGPU", err2)
	}
}

func TestCallsAfterFailedInitReportNotInitialized(t *testing.T) {
	l := openOrSkip(t)
	initFailsOrSkip(t, l)

	check := func(what string, err error, fn string) {
		t.Helper()
		var he *Error
		if !errors.As(err, &he) {
			t.Errorf("%s: error %v (%T) is not an *hsa.Error", what, err, err)
			return
		}
		if he.Status != StatusErrorNotInitialized || he.Func != fn {
			t.Errorf("%s: %+v, want %s status 0x100B", what, he, fn)
		}
		if !strings.HasPrefix(he.Text, "HSA_STATUS_ERROR_NOT_INITIALIZED") {
			t.Errorf("%s: Text %q, want the runtime's NOT_INITIALIZED text", what, he.Text)
		}
		if errors.Is(err, ErrNoGPU) {
			t.Errorf("%s: %v matches ErrNoGPU; only Init's error should", what, err)
		}
	}

	agents, err := l.Agents()
	check("Agents", err, "hsa_iterate_agents")
	if len(agents) != 0 {
		t.Errorf("Agents returned %v with an error", agents)
	}
	err = l.ShutDown()
	check("ShutDown", err, "hsa_shut_down")
	_, err = l.SignalCreate(1, nil)
	check("SignalCreate", err, "hsa_signal_create")
	_, err = l.AMDSignalCreate(1, []Agent{1, 2}, SignalAttrAMDGPUOnly)
	check("AMDSignalCreate", err, "hsa_amd_signal_create")
	_, err = l.SystemInfoUint64(SystemInfoTimestampFrequency)
	check("SystemInfoUint64", err, "hsa_system_get_info")
	_, err = l.ExecutableCreateAlt(ProfileFull, FloatRoundingDefault)
	check("ExecutableCreateAlt", err, "hsa_executable_create_alt")
	_, err = l.CodeObjectReaderCreateFromMemory([]byte("\x7fELF not really"))
	check("CodeObjectReaderCreateFromMemory", err, "hsa_code_object_reader_create_from_memory")
	readersMu.Lock()
	n := len(readers)
	readersMu.Unlock()
	if n != 0 {
		t.Errorf("%d code object copies still pinned after a failed create", n)
	}
	err = l.SignalDestroy(0)
	check("SignalDestroy", err, "hsa_signal_destroy")

	// Every other status-returning call: ROCr checks for an open runtime
	// before looking at any handle, so zero handles are safe here.
	_, err = l.AgentISAs(0)
	check("AgentISAs", err, "hsa_agent_iterate_isas")
	_, err = l.ISAName(0)
	check("ISAName", err, "hsa_isa_get_info_alt")
	_, err = l.AgentInfoString(0, AgentInfoName)
	check("AgentInfoString", err, "hsa_agent_get_info")
	_, err = l.AgentInfoUint32(0, AgentInfoDevice)
	check("AgentInfoUint32", err, "hsa_agent_get_info")
	_, err = l.MemoryPools(0)
	check("MemoryPools", err, "hsa_amd_agent_iterate_memory_pools")
	_, err = l.MemoryPoolInfoUint32(0, PoolInfoSegment)
	check("MemoryPoolInfoUint32", err, "hsa_amd_memory_pool_get_info")
	_, err = l.MemoryPoolInfoUint64(0, PoolInfoSize)
	check("MemoryPoolInfoUint64", err, "hsa_amd_memory_pool_get_info")
	_, err = l.MemoryPoolInfoBool(0, PoolInfoRuntimeAllocAllowed)
	check("MemoryPoolInfoBool", err, "hsa_amd_memory_pool_get_info")
	_, err = l.AgentMemoryPoolAccess(0, 0)
	check("AgentMemoryPoolAccess", err, "hsa_amd_agent_memory_pool_get_info")
	_, err = l.MemoryPoolAllocate(0, 4096)
	check("MemoryPoolAllocate", err, "hsa_amd_memory_pool_allocate")
	err = l.MemoryPoolFree(nil)
	check("MemoryPoolFree", err, "hsa_amd_memory_pool_free")
	err = l.AgentsAllowAccess([]Agent{1}, nil)
	check("AgentsAllowAccess", err, "hsa_amd_agents_allow_access")
	// hsa_amd_memory_async_copy validates its pointers before the runtime
	// state (and dereferences agent handles before checking that the
	// runtime is open, so only NULL pointers are safe to pass here).
	var he *Error
	err = l.MemoryAsyncCopy(nil, 0, nil, 0, 64, []Signal{1, 2}, 0)
	if !errors.As(err, &he) || he.Status != StatusErrorInvalidArgument {
		t.Errorf("MemoryAsyncCopy(nil, nil) = %v, want INVALID_ARGUMENT", err)
	}
	_, err = l.SignalValuePointer(0)
	check("SignalValuePointer", err, "hsa_amd_signal_value_pointer")
	q, err := l.QueueCreate(0, 64, QueueTypeSingle, func(Status) {})
	check("QueueCreate", err, "hsa_queue_create")
	if q != nil {
		t.Errorf("QueueCreate returned %+v with an error", q)
	}
	if n := queueErrors.len(); n != 0 {
		t.Errorf("%d queue error callbacks still registered after a failed QueueCreate", n)
	}
	err = l.CodeObjectReaderDestroy(0)
	check("CodeObjectReaderDestroy", err, "hsa_code_object_reader_destroy")
	err = l.ExecutableLoadAgentCodeObject(0, 0, 0)
	check("ExecutableLoadAgentCodeObject", err, "hsa_executable_load_agent_code_object")
	err = l.ExecutableFreeze(0)
	check("ExecutableFreeze", err, "hsa_executable_freeze")
	err = l.ExecutableDestroy(0)
	check("ExecutableDestroy", err, "hsa_executable_destroy")
	_, err = l.ExecutableSymbolByName(0, "saxpy.kd", 1)
	check("ExecutableSymbolByName", err, "hsa_executable_get_symbol_by_name")
	_, err = l.ExecutableSymbolByName(0, "global_var", 0)
	check("ExecutableSymbolByName(no agent)", err, "hsa_executable_get_symbol_by_name")
	_, err = l.SymbolInfoUint32(0, SymbolInfoKernargSegmentSize)
	check("SymbolInfoUint32", err, "hsa_executable_symbol_get_info")
	_, err = l.SymbolInfoUint64(0, SymbolInfoKernelObject)
	check("SymbolInfoUint64", err, "hsa_executable_symbol_get_info")
	if n := iterations.len(); n != 0 {
		t.Errorf("%d iteration registrations leaked", n)
	}
}

func TestStatusStringWithoutInit(t *testing.T) {
	l := openOrSkip(t)
	for s, want := range map[Status]string{
		StatusSuccess:              "HSA_STATUS_SUCCESS",
		StatusErrorOutOfResources:  "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
		StatusErrorNotInitialized:  "HSA_STATUS_ERROR_NOT_INITIALIZED",
		StatusErrorInvalidArgument: "HSA_STATUS_ERROR_INVALID_ARGUMENT",
	} {
		if got := l.StatusString(s); !strings.HasPrefix(got, want) {
			t.Errorf("StatusString(0x%x) = %q, want prefix %q", uint32(s), got, want)
		}
	}
	if got := l.StatusString(0xdead); got != "" {
		t.Errorf("StatusString(unknown) = %q, want \"\"", got)
	}
}

func TestOpenWithEmptyROCMPath(t *testing.T) {
	openOrSkip(t) // skip unless installed somewhere
	t.Setenv("ROCM_PATH", t.TempDir())
	l, err := Open()
	if err != nil {
		t.Fatalf("Open with ROCM_PATH=empty dir: %v", err)
	}
	if strings.HasPrefix(l.Path(), os.Getenv("ROCM_PATH")) {
		t.Errorf("opened %s from the empty ROCM_PATH", l.Path())
	}
	t.Logf("opened %s", l.Path())
}

func TestROCMPathIsSearchedFirst(t *testing.T) {
	l := openOrSkip(t)
	file := l.Path()
	if !filepath.IsAbs(file) {
		// Found through the loader's own search: find the file it mapped.
		file = mappedFile(t, libName)
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "lib", libSoname)
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ROCM_PATH", root)
	l2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if l2.Path() != link {
		t.Errorf("Open used %s, want %s from $ROCM_PATH/lib", l2.Path(), link)
	}
}

// mappedFile returns the path of the mapped file whose name contains name.
func mappedFile(t *testing.T, name string) string {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("cannot find the library file: %v", err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if i := strings.IndexByte(line, '/'); i >= 0 && strings.Contains(line[i:], name) {
			return line[i:]
		}
	}
	t.Skipf("%s is not in /proc/self/maps", name)
	return ""
}

// The library cannot be uninstalled for a test, so the not-found path is
// checked on the finder Open uses, with a name that exists nowhere.
func TestNotFoundListsWhereItLooked(t *testing.T) {
	root := t.TempDir()
	t.Setenv("ROCM_PATH", root)
	_, err := dl.Open("libnot-a-real-rocm-lib", []string{"libnot-a-real-rocm-lib.so.7"}, dl.SearchDirs())
	var nf *dl.NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("err = %v (%T), want *dl.NotFoundError", err, err)
	}
	if !errors.Is(err, dl.ErrNotFound) {
		t.Error("does not match dl.ErrNotFound")
	}
	for _, want := range []string{
		filepath.Join(root, "lib", "libnot-a-real-rocm-lib.so.7"),
		"/opt/rocm/lib/libnot-a-real-rocm-lib.so.7",
		"libnot-a-real-rocm-lib.so.7", // the bare soname, for the loader's search
	} {
		found := false
		for _, tried := range nf.Tried {
			found = found || tried == want
		}
		if !found {
			t.Errorf("Tried %v lacks %s", nf.Tried, want)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %s", err, want)
		}
	}
}

// The trampolines are ordinary C function pointers, so they can be tested
// without a GPU by calling them the way the runtime would.
func TestIterationTrampoline(t *testing.T) {
	initCallbacks()
	var got []uint64
	id := iterations.add(func(h uint64) { got = append(got, h) })
	defer iterations.remove(id)
	for _, h := range []uint64{0x1234_5678_9abc_def0, 1, ^uint64(0)} {
		r, _, _ := purego.SyscallN(iterCallback, uintptr(h), id)
		if status(r) != StatusSuccess {
			t.Errorf("callback returned 0x%x", r)
		}
	}
	if len(got) != 3 || got[0] != 0x1234_5678_9abc_def0 || got[1] != 1 || got[2] != ^uint64(0) {
		t.Errorf("visited %x", got)
	}
	// An unknown id stops the iteration with an error instead of crashing.
	r, _, _ := purego.SyscallN(iterCallback, 7, id+1000)
	if status(r) != StatusError {
		t.Errorf("unknown id: callback returned 0x%x, want HSA_STATUS_ERROR", r)
	}
}

func TestQueueErrorTrampoline(t *testing.T) {
	initCallbacks()
	var mu sync.Mutex
	var got []Status
	id := queueErrors.add(func(s Status) { mu.Lock(); got = append(got, s); mu.Unlock() })
	// Garbage in the upper half of the status register must be ignored.
	purego.SyscallN(queueCallback, 0xffff_ffff_0000_0000|uintptr(StatusErrorException), 0xdead_beef, id)
	purego.SyscallN(queueCallback, uintptr(StatusErrorMemoryFault), 0, id)
	queueErrors.remove(id)
	purego.SyscallN(queueCallback, uintptr(StatusErrorFatal), 0, id) // after removal: dropped
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != StatusErrorException || got[1] != StatusErrorMemoryFault {
		t.Errorf("callback saw %x", got)
	}
}

// ROCr calls the queue-error callback from its own threads, which the Go
// runtime did not create; a small C library reproduces that.
func TestQueueErrorTrampolineFromCThread(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	ccPath, err := exec.LookPath(cc)
	if err != nil {
		t.Skipf("no C compiler (%s) to build testdata/cbthread.c", cc)
	}
	so := filepath.Join(t.TempDir(), "libcbthread.so")
	build := exec.Command(ccPath, "-shared", "-fPIC", "-o", so, filepath.Join("testdata", "cbthread.c"), "-lpthread")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	callOnThread, err := purego.Dlsym(h, "call_on_thread")
	if err != nil {
		t.Fatal(err)
	}

	initCallbacks()
	got := make(chan Status, 4)
	id := queueErrors.add(func(s Status) { got <- s })
	defer queueErrors.remove(id)
	for _, s := range []Status{StatusErrorException, StatusErrorMemoryFault} {
		if r, _, _ := purego.SyscallN(callOnThread, queueCallback, uintptr(s), 0x1000, id); r != 0 {
			t.Fatalf("call_on_thread = %d", int32(r))
		}
		if g := <-got; g != s {
			t.Errorf("callback got 0x%x, want 0x%x", g, s)
		}
	}
}

func TestQueueFromC(t *testing.T) {
	// A fake hsa_queue_t in Go memory stands in for the runtime's.
	var mem [queueSizeof / 8]uint64
	ring := new([4 * PacketSize]byte)
	b := unsafe.Pointer(&mem[0])
	*(*uint32)(unsafe.Add(b, queueOffType)) = uint32(QueueTypeSingle)
	*(*unsafe.Pointer)(unsafe.Add(b, queueOffBaseAddress)) = unsafe.Pointer(ring)
	*(*uint64)(unsafe.Add(b, queueOffDoorbell)) = 0xd00b
	*(*uint32)(unsafe.Add(b, queueOffSize)) = 4
	*(*uint64)(unsafe.Add(b, queueOffID)) = 77
	q := queueFromC(uintptr(b))
	if q.Handle != b || q.Base != unsafe.Pointer(ring) || q.Doorbell != 0xd00b || q.Size != 4 || q.ID != 77 {
		t.Errorf("queueFromC = %+v", q)
	}
	if Slot(q, 5) != (*[PacketSize]byte)(unsafe.Pointer(&ring[PacketSize])) {
		t.Error("Slot(q, 5) is not ring slot 1")
	}
}

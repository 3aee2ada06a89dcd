//go:build linux && (amd64 || arm64)

package hsa

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// Without an AMD GPU the real runtime stops at hsa_init, so everything past
// it (argument order, out-parameters, callbacks from C, reading hsa_queue_t,
// the ring protocol) is run against testdata/fakehsa.c instead: a stand-in
// libhsa-runtime64 built from the real headers, found through $ROCM_PATH
// exactly as the real one would be, in a child process of its own so that
// it never shares a process with the real library.

const fakeChildEnv = "ROCSYNC_HSA_FAKE_CHILD"

func TestFakeRuntime(t *testing.T) {
	if os.Getenv(fakeChildEnv) == "" {
		root := buildFakeRuntime(t)
		cmd := exec.Command(os.Args[0], "-test.run=^TestFakeRuntime$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "ROCM_PATH="+root, fakeChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestFakeRuntime")) {
			t.Fatalf("child process against the fake runtime: %v\n%s", err, out)
		}
		return
	}
	runFakeRuntime(t)
}

// buildFakeRuntime compiles fakehsa.c into <root>/lib/libhsa-runtime64.so.1.
func buildFakeRuntime(t *testing.T) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	ccPath, err := exec.LookPath(cc)
	if err != nil {
		t.Skipf("no C compiler (%s) to build testdata/fakehsa.c", cc)
	}
	var inc string
	for _, d := range []string{os.Getenv("ROCM_PATH"), "/opt/rocm", "/usr"} {
		if d != "" {
			if _, err := os.Stat(filepath.Join(d, "include", "hsa", "hsa.h")); err == nil {
				inc = filepath.Join(d, "include")
				break
			}
		}
	}
	if inc == "" {
		t.Skip("no ROCm headers (hsa/hsa.h) to build testdata/fakehsa.c")
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(root, "lib", libSoname)
	build := exec.Command(ccPath, "-std=gnu11", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
		"-I", inc, "-o", so, filepath.Join("testdata", "fakehsa.c"), "-lpthread")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	return root
}

func runFakeRuntime(t *testing.T) {
	l, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(os.Getenv("ROCM_PATH"), "lib", libSoname); l.Path() != want {
		t.Fatalf("opened %s, want the fake at %s", l.Path(), want)
	}
	h, err := purego.Dlopen(l.Path(), purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	sym := func(name string) uintptr {
		a, err := purego.Dlsym(h, name)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	fakeLog, fakeLogReset, fakeQueueError := sym("fake_log"), sym("fake_log_reset"), sym("fake_queue_error")
	takeLog := func() string {
		r, _, _ := purego.SyscallN(fakeLog)
		s := cmem.GoString(r)
		purego.SyscallN(fakeLogReset)
		return s
	}
	wantLog := func(what string, lines ...string) {
		t.Helper()
		got := takeLog()
		for _, l := range lines {
			if !strings.Contains(got, l+"\n") {
				t.Errorf("%s: C log lacks line %q; log:\n%s", what, l, got)
			}
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Before init, as with the real runtime.
	if _, err := l.Agents(); !errors.Is(err, &Error{Status: StatusErrorNotInitialized}) {
		t.Errorf("Agents before Init = %v", err)
	}
	must(l.Init())
	wantLog("init", "hsa_init")

	// Discovery.
	agents, err := l.Agents()
	must(err)
	if len(agents) != 2 || agents[0] != 0x100 || agents[1] != 0x200 {
		t.Errorf("Agents = %x", agents)
	}
	gpu := agents[1]
	if n, err := l.AgentInfoString(gpu, AgentInfoName); err != nil || n != "gfx90a" {
		t.Errorf("AgentInfoString(name) = %q, %v", n, err)
	}
	if n, err := l.AgentInfoString(gpu, AgentInfoProductName); err != nil || n != "Fake Instinct MI210" {
		t.Errorf("AgentInfoString(product) = %q, %v", n, err)
	}
	if v, err := l.AgentInfoUint32(gpu, AgentInfoDevice); err != nil || DeviceType(v) != DeviceTypeGPU {
		t.Errorf("AgentInfoUint32(device) = %d, %v", v, err)
	}
	if v, err := l.AgentInfoUint32(gpu, AgentInfoQueueMaxSize); err != nil || v != 131072 {
		t.Errorf("AgentInfoUint32(queue max) = %d, %v", v, err)
	}
	if v, err := l.AgentInfoUint32(gpu, AgentInfoComputeUnits); err != nil || v != 104 {
		t.Errorf("AgentInfoUint32(CUs) = %d, %v", v, err)
	}
	_, err = l.AgentInfoString(0x999, AgentInfoName)
	var he *Error
	if !errors.As(err, &he) || he.Func != "hsa_agent_get_info" || he.Status != StatusErrorInvalidAgent ||
		he.Text != "FAKE_INVALID_AGENT: bad agent" {
		t.Errorf("AgentInfoString(bad agent) error = %#v", err)
	}
	isas, err := l.AgentISAs(gpu)
	must(err)
	if len(isas) != 1 {
		t.Fatalf("AgentISAs = %v", isas)
	}
	if n, err := l.ISAName(isas[0]); err != nil || n != "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" {
		t.Errorf("ISAName = %q, %v", n, err)
	}
	if v, err := l.SystemInfoUint64(SystemInfoVersionMajor); err != nil || v != 1 {
		t.Errorf("SystemInfoUint64(major) = %d, %v", v, err)
	}
	if v, err := l.SystemInfoUint64(SystemInfoTimestampFrequency); err != nil || v != 1e9 {
		t.Errorf("SystemInfoUint64(frequency) = %d, %v", v, err)
	}
	if v, err := l.BuildVersion(); err != nil || v != `"1.5.0-local-build-unknown"` {
		t.Errorf("BuildVersion = %q, %v", v, err)
	}

	// Profiling: the agent, the signal and the output struct in order.
	takeLog()
	if dt, err := l.AMDProfilingGetDispatchTime(gpu, 77); err != nil || dt != (DispatchTime{Start: 1000, End: 3000}) {
		t.Errorf("AMDProfilingGetDispatchTime = %+v, %v", dt, err)
	}
	wantLog("dispatch time", "hsa_amd_profiling_get_dispatch_time(agent=512,signal=77)")
	if _, err := l.AMDProfilingGetDispatchTime(0x999, 77); !errors.Is(err, &Error{Status: StatusErrorInvalidAgent}) {
		t.Errorf("AMDProfilingGetDispatchTime(bad agent) = %v", err)
	}

	// Memory pools.
	pools, err := l.MemoryPools(gpu)
	must(err)
	if len(pools) != 2 {
		t.Fatalf("MemoryPools = %x", pools)
	}
	kernarg, vram := pools[0], pools[1]
	if v, err := l.MemoryPoolInfoUint32(kernarg, PoolInfoGlobalFlags); err != nil || v != GlobalFlagKernargInit|GlobalFlagFineGrained {
		t.Errorf("flags = %d, %v", v, err)
	}
	if v, err := l.MemoryPoolInfoUint32(vram, PoolInfoSegment); err != nil || v != SegmentGlobal {
		t.Errorf("segment = %d, %v", v, err)
	}
	if v, err := l.MemoryPoolInfoUint64(vram, PoolInfoSize); err != nil || v != 64<<30 {
		t.Errorf("size = %d, %v", v, err)
	}
	if v, err := l.MemoryPoolInfoBool(vram, PoolInfoRuntimeAllocAllowed); err != nil || !v {
		t.Errorf("alloc allowed = %v, %v", v, err)
	}
	if v, err := l.MemoryPoolInfoBool(vram, PoolInfoAccessibleByAll); err != nil || v {
		t.Errorf("accessible by all = %v, %v", v, err)
	}
	if v, err := l.AgentMemoryPoolAccess(agents[0], vram); err != nil || v != PoolAccessDisallowedByDefault {
		t.Errorf("AgentMemoryPoolAccess = %d, %v", v, err)
	}
	takeLog()
	src, err := l.MemoryPoolAllocate(kernarg, 256)
	must(err)
	dst, err := l.MemoryPoolAllocate(kernarg, 256)
	must(err)
	must(l.AgentsAllowAccess([]Agent{gpu, agents[0]}, src))
	wantLog("alloc", "hsa_amd_memory_pool_allocate(pool=0x400,size=256,flags=0)",
		"hsa_amd_agents_allow_access(n=2,agents=[0x200,0x100])")
	const payload = "copied through hsa_amd_memory_async_copy"
	copy(unsafe.Slice((*byte)(src), 256), payload)
	dep1, err := l.SignalCreate(0, nil)
	must(err)
	dep2, err := l.SignalCreate(-3, nil)
	must(err)
	done, err := l.SignalCreate(1, []Agent{agents[0]})
	must(err)
	must(l.MemoryAsyncCopy(dst, gpu, src, agents[0], 256, []Signal{dep1, dep2}, done))
	wantLog("async copy", "hsa_signal_create(initial=0,n=0,consumers=NULL)",
		"hsa_signal_create(initial=1,n=1,consumers=[0x100])",
		"hsa_amd_memory_async_copy(dst_agent=0x200,src_agent=0x100,size=256,deps=[0,-3])")
	if got := string(unsafe.Slice((*byte)(dst), len(payload))); got != payload {
		t.Errorf("dst = %q", got)
	}
	if v := l.SignalLoadScacquire(done); v != 0 {
		t.Errorf("completion signal = %d after the copy, want 0", v)
	}
	must(l.MemoryPoolFree(src))
	must(l.MemoryPoolFree(dst))

	// Signals: values round-trip, negative ones included.
	s, err := l.AMDSignalCreate(5, nil, SignalAttrAMDGPUOnly)
	must(err)
	wantLog("amd signal", "hsa_amd_signal_create(initial=5,n=0,consumers=NULL)", "hsa_amd_signal_create.attributes=1")
	l.SignalStoreScrelease(s, -7)
	if v := l.SignalLoadScacquire(s); v != -7 {
		t.Errorf("load after store = %d", v)
	}
	l.SignalStoreRelaxed(s, 1<<40)
	if v := l.SignalLoadRelaxed(s); v != 1<<40 {
		t.Errorf("relaxed load = %d", v)
	}
	l.SignalSilentStoreRelaxed(s, 3)
	p, err := l.SignalValuePointer(s)
	must(err)
	if v := *(*int64)(p); v != 3 {
		t.Errorf("*SignalValuePointer = %d", v)
	}
	*(*int64)(p) = 0
	if v := l.SignalWaitScacquire(s, ConditionLt, 1, TimeoutInfinite, WaitStateBlocked); v != 0 {
		t.Errorf("wait returned %d", v)
	}
	wantLog("wait", "hsa_signal_wait_scacquire(cond=2,compare=1,timeout=18446744073709551615,state=0)")
	for _, s := range []Signal{s, dep1, dep2, done} {
		must(l.SignalDestroy(s))
	}

	// Queues: create, read hsa_queue_t, reserve, publish, ring, complete.
	queueErrs := make(chan Status, 2)
	q, err := l.QueueCreate(gpu, 4, QueueTypeSingle, func(s Status) { queueErrs <- s })
	must(err)
	wantLog("queue create", "hsa_queue_create(agent=0x200,size=4,type=1,callback=set,data=0x"+
		queueCallbackID(t, q)+",private=4294967295,group=4294967295)")
	if q.Size != 4 || q.ID != 7 || q.Doorbell == 0 || q.Base == nil || uintptr(q.Base)%64 != 0 {
		t.Errorf("Queue = %+v", q)
	}
	if v := *(*uint32)(unsafe.Add(q.Handle, queueOffReserved1)); v != 0xdeadbeef {
		t.Errorf("hsa_queue_t.reserved1 = %#x: queue offsets are off", v)
	}
	must(l.AMDProfilingSetProfilerEnabled(q, true))
	wantLog("profiler", "hsa_amd_profiling_set_profiler_enabled(queue=set,enable=1)")
	if got := l.QueueAddWriteIndexScacqScrel(q, 1); got != 0 {
		t.Errorf("first reserved index = %d", got)
	}
	if got := l.QueueCASWriteIndexScacqScrel(q, 1, 3); got != 1 {
		t.Errorf("CAS(1->3) observed %d", got)
	}
	if got := l.QueueCASWriteIndexScacqScrel(q, 1, 9); got != 3 {
		t.Errorf("failed CAS observed %d, want 3", got)
	}
	l.QueueStoreWriteIndexScrelease(q, 1)
	if got := l.QueueLoadWriteIndexRelaxed(q); got != 1 {
		t.Errorf("write index = %d", got)
	}

	comp, err := l.SignalCreate(2, nil)
	must(err)
	d := DispatchPacket{
		Header:             Header(PacketTypeKernelDispatch, true, FenceScopeSystem, FenceScopeSystem),
		Setup:              1,
		WorkgroupSize:      [3]uint16{256, 1, 1},
		GridSize:           [3]uint32{1 << 20, 1, 1},
		PrivateSegmentSize: 16,
		GroupSegmentSize:   256,
		KernelObject:       0x7f00deadbe00,
		KernargAddress:     0x7f0000001000,
		CompletionSignal:   comp,
	}
	slot := Slot(q, 0)
	for i := range slot[4:] {
		slot[4+i] = 0xee // stale bytes the encoder must overwrite
	}
	d.EncodeBody(slot)
	PublishHeader(slot, d.FirstWord())
	idx := l.QueueAddWriteIndexScacqScrel(q, 1)
	b := BarrierAndPacket{Header: Header(PacketTypeBarrierAnd, true, FenceScopeSystem, FenceScopeSystem),
		DepSignals: [5]Signal{comp, 0, 0, 0, 0x42}, CompletionSignal: comp}
	slot = Slot(q, idx)
	b.EncodeBody(slot)
	PublishHeader(slot, b.FirstWord())
	l.SignalStoreScrelease(q.Doorbell, int64(idx))
	wantLog("ring",
		"doorbell(1)",
		"packet 0: dispatch barrier=1 acquire=2 release=2 dims=1 wg=256x1x1 grid=1048576x1x1 private=16 group=256 "+
			"kernel_object=0x7f00deadbe00 kernarg=0x7f0000001000 reserved0=0 reserved2=0",
		"packet 1: barrier-and barrier=1 acquire=2 release=2 deps="+hexs(uint64(comp))+",0,0,0,42 reserved0=0 reserved1=0 reserved2=0")
	if got := l.QueueLoadReadIndexScacquire(q); got != 2 {
		t.Errorf("read index after the doorbell = %d, want 2", got)
	}
	if v := l.SignalLoadScacquire(comp); v != 0 {
		t.Errorf("completion = %d, want 0 (both packets done)", v)
	}
	if LoadHeader(Slot(q, 0)) != InvalidFirstWord {
		t.Error("consumed slot not marked INVALID")
	}
	must(l.SignalDestroy(comp))

	// Queue errors arrive from a C thread through the shared trampoline.
	for _, s := range []Status{StatusErrorException, StatusErrorMemoryFault} {
		if r, _, _ := purego.SyscallN(fakeQueueError, uintptr(q.Handle), uintptr(s)); int32(r) != 0 {
			t.Fatalf("fake_queue_error = %d", int32(r))
		}
		if got := <-queueErrs; got != s {
			t.Errorf("queue error callback got %#x, want %#x", got, s)
		}
	}
	must(l.QueueDestroy(q))
	if n := queueErrors.len(); n != 0 {
		t.Errorf("%d queue callbacks registered after QueueDestroy", n)
	}
	queueIDsMu.Lock()
	if n := len(queueIDs); n != 0 {
		t.Errorf("%d queue ids left after QueueDestroy", n)
	}
	queueIDsMu.Unlock()
	q2, err := l.QueueCreate(gpu, 64, QueueTypeMulti, nil)
	must(err)
	wantLog("queue without callback", "hsa_queue_create(agent=0x200,size=64,type=0,callback=NULL,data=(nil),private=4294967295,group=4294967295)")
	must(l.QueueDestroy(q2))

	// System events: ROCr calls the handler from its event thread with an
	// hsa_amd_event_t; the binding decodes it by the header's layout and
	// answers SUCCESS only when the Go handler handled the fault.
	fakeFault, fakeOther := sym("fake_memory_fault"), sym("fake_other_event")
	var seen []SystemEvent
	handled := true
	cancel, err := l.RegisterSystemEventHandler(func(ev SystemEvent) bool {
		seen = append(seen, ev) // the C side joins its thread before returning
		return handled
	})
	must(err)
	wantLog("system event handler", "hsa_amd_register_system_event_handler(callback=set,data=0x"+hexs(uint64(systemEventIDs(t)[0]))+")")
	reason := MemoryFaultPageNotPresent | MemoryFaultHostOnly
	fault := func() int32 {
		r, _, _ := purego.SyscallN(fakeFault, uintptr(gpu), 0x7f0012345678, uintptr(reason))
		return int32(r)
	}
	if r := fault(); r != 1 {
		t.Errorf("fake_memory_fault = %d with a handler that handles it, want 1 (handled)", r)
	}
	want := SystemEvent{Type: EventGPUMemoryFault, MemoryFault: MemoryFault{Agent: gpu, Address: 0x7f0012345678, Reason: reason}}
	if len(seen) != 1 || seen[0] != want {
		t.Errorf("handler saw %+v, want [%+v]", seen, want)
	}
	if s := reason.String(); s != "PAGE_NOT_PRESENT|HOST_ONLY" {
		t.Errorf("reason = %q", s)
	}
	handled = false
	if r := fault(); r != 0 {
		t.Errorf("fake_memory_fault = %d with a handler that declines, want 0 (ROCr aborts)", r)
	}
	handled = true
	if r, _, _ := purego.SyscallN(fakeOther); int32(r) != 1 || len(seen) != 3 || seen[2].Type != 7 || seen[2].MemoryFault != (MemoryFault{}) {
		t.Errorf("unknown event type: handled %d, seen %+v", int32(r), seen)
	}
	cancel()
	if r := fault(); r != 0 || len(seen) != 3 {
		t.Errorf("after cancel: fake_memory_fault = %d, handler calls %d; want 0 (not handled) and no call", r, len(seen))
	}
	if n := systemEvents.len(); n != 0 {
		t.Errorf("%d system event registrations left after cancel", n)
	}

	// Code objects: the reader keeps pointing at the bytes, so the binding
	// must hold its own copy until the reader is destroyed.
	code := []byte("FAKEELF-saxpy")
	rd, err := l.CodeObjectReaderCreateFromMemory(code)
	must(err)
	copy(code, "XXXXXXXXXXXXX")
	code = nil
	runtime.GC()
	exe, err := l.ExecutableCreateAlt(ProfileFull, FloatRoundingDefault)
	must(err)
	must(l.ExecutableLoadAgentCodeObject(exe, gpu, rd))
	must(l.ExecutableFreeze(exe))
	ks, err := l.ExecutableSymbolByName(exe, "saxpy.kd", gpu)
	must(err)
	_, err = l.ExecutableSymbolByName(exe, "counter", 0)
	if !errors.Is(err, &Error{Func: "hsa_executable_get_symbol_by_name", Status: StatusErrorInvalidSymbolName}) {
		t.Errorf("missing symbol: %v", err)
	}
	wantLog("executable",
		"hsa_executable_create_alt(profile=1,rounding=0,options=NULL)",
		"hsa_executable_load_agent_code_object(exe=0x500,agent=0x200,code=FAKEELF-saxpy,options=NULL,loaded=NULL)",
		"hsa_executable_freeze(exe=0x500,options=NULL)",
		"hsa_executable_get_symbol_by_name(exe=0x500,name=saxpy.kd,agent=0x200)",
		"hsa_executable_get_symbol_by_name(exe=0x500,name=counter,agent=NULL)")
	for attr, want := range map[uint32]uint32{SymbolInfoKernargSegmentSize: 24, SymbolInfoKernargSegmentAlign: 8,
		SymbolInfoGroupSegmentSize: 256, SymbolInfoPrivateSegmentSize: 0} {
		if v, err := l.SymbolInfoUint32(ks, attr); err != nil || v != want {
			t.Errorf("SymbolInfoUint32(%d) = %d, %v; want %d", attr, v, err, want)
		}
	}
	if v, err := l.SymbolInfoUint64(ks, SymbolInfoKernelObject); err != nil || v != 0x7f00deadbe00 {
		t.Errorf("kernel object = %#x, %v", v, err)
	}
	must(l.ExecutableDestroy(exe))
	must(l.CodeObjectReaderDestroy(rd))
	readersMu.Lock()
	if n := len(readers); n != 0 {
		t.Errorf("%d code objects still pinned", n)
	}
	readersMu.Unlock()

	must(l.ShutDown())
	if err := l.ShutDown(); !errors.Is(err, &Error{Status: StatusErrorNotInitialized}) {
		t.Errorf("second ShutDown = %v", err)
	}
	if n := iterations.len(); n != 0 {
		t.Errorf("%d iteration registrations leaked", n)
	}
}

// queueCallbackID returns the callback id registered for q, in hex as C's
// %p prints the data pointer.
func queueCallbackID(t *testing.T, q *Queue) string {
	t.Helper()
	queueIDsMu.Lock()
	defer queueIDsMu.Unlock()
	id, ok := queueIDs[uintptr(q.Handle)]
	if !ok {
		t.Fatal("queue has no registered callback id")
	}
	return hexs(uint64(id))
}

func hexs(v uint64) string { return strconv.FormatUint(v, 16) }

// systemEventIDs returns the ids of the live system event registrations.
func systemEventIDs(t *testing.T) []uintptr {
	t.Helper()
	systemEvents.mu.Lock()
	defer systemEvents.mu.Unlock()
	var ids []uintptr
	for id := range systemEvents.m {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		t.Fatal("no system event registration")
	}
	return ids
}

package kfdsim_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// HSA agents enumerate in KFD node order with the configured targets and
// PCI locations.
func TestInitEnumeratesConfiguredGPUs(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	want := []struct {
		name, isa string
		bdf       uint32
	}{
		{"gfx90a", "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", 0x8300},
		{"gfx1030", "amdgcn-amd-amdhsa--gfx1030", 0x0300},
	}
	if len(r.gpus) != len(want) {
		t.Fatalf("%d GPU agents, want %d", len(r.gpus), len(want))
	}
	for i, g := range r.gpus {
		name, err := r.lib.AgentInfoString(g, hsa.AgentInfoName)
		if err != nil || name != want[i].name {
			t.Errorf("GPU %d: name %q (%v), want %q", i, name, err, want[i].name)
		}
		bdf, err := r.lib.AgentInfoUint32(g, 0xA006) // HSA_AMD_AGENT_INFO_BDFID
		if err != nil || bdf != want[i].bdf {
			t.Errorf("GPU %d: BDFID %#x (%v), want %#x", i, bdf, err, want[i].bdf)
		}
		isas, err := r.lib.AgentISAs(g)
		if err != nil || len(isas) == 0 {
			t.Fatalf("GPU %d: ISAs %v %v", i, isas, err)
		}
		isa, _ := r.lib.ISAName(isas[0])
		if isa != want[i].isa {
			t.Errorf("GPU %d: ISA %q, want %q", i, isa, want[i].isa)
		}
	}
}

// A bad spec fails hsaKmtOpenKFD with a message naming the problem, so
// hsa_init fails instead of running on a default GPU.
func TestBadSpecFailsOpen(t *testing.T) {
	if kfdsim.InChild(t) {
		lib, err := hsa.Open()
		if err != nil {
			t.Fatal(err)
		}
		if err := lib.Init(); err == nil {
			_ = lib.ShutDown()
			t.Fatal("hsa_init succeeded over a bad GPU spec")
		}
		return
	}
	runtimeOrSkip(t)
	out := kfdsim.Run(t, "gfx942@0000:03:00.0", t.Name(), kfdsim.Options{})
	for _, want := range []string{"kfdsim: open /dev/kfd fails", `unknown target "gfx942"`, "KFDSIM_GPUS"} {
		if !strings.Contains(out, want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
}

// kfdsim_configure, called before hsa_init, overrides KFDSIM_GPUS.
func TestConfigureOverridesEnv(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	k := openThunk(t)
	spec := []byte("gfx908@0000:41:00.0\x00")
	if r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_configure"), uintptr(unsafe.Pointer(&spec[0]))); int32(r) != 0 {
		t.Fatalf("kfdsim_configure = %d", int32(r))
	}
	bad := []byte("gfx90a@0000:03:00.0,gfx1030@0000:03:00.0\x00")
	if r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_configure"), uintptr(unsafe.Pointer(&bad[0]))); int32(r) != -1 {
		t.Fatalf("kfdsim_configure(two GPUs at one address) = %d, want -1", int32(r))
	}
	if r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_configure"), uintptr(unsafe.Pointer(&spec[0]))); int32(r) != 0 {
		t.Fatalf("kfdsim_configure = %d", int32(r))
	}
	r := initRuntime(t)
	if len(r.gpus) != 1 {
		t.Fatalf("%d GPUs, want 1", len(r.gpus))
	}
	name, _ := r.lib.AgentInfoString(r.gpus[0], hsa.AgentInfoName)
	bdf, _ := r.lib.AgentInfoUint32(r.gpus[0], 0xA006)
	if name != "gfx908" || bdf != 0x4100 {
		t.Errorf("GPU is %s at %#x, want gfx908 at 0x4100", name, bdf)
	}
}

// The driver's mapping records follow ROCr's calls: GPU pool memory is
// mapped to its GPU at once, CPU kernarg memory to no GPU until
// hsa_amd_agents_allow_access, which maps it to exactly the agents given:
// a second call REPLACES the first one's agents (ROCr 5.2 passes only the
// new agents and the thunk unmaps the rest), so code that grants access to
// two GPUs must name both in one call.
func TestMappingFollowsAllowAccess(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	gpu0, gpu1 := r.gpus[0], r.gpus[1]
	node := func(a hsa.Agent) uint32 {
		n, err := r.lib.AgentInfoUint32(a, hsa.AgentInfoNode)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	vram := r.alloc(r.pool(gpu1, hsa.GlobalFlagCoarseGrained), 1<<20)
	rec, ok := r.k.lookup(t, vram)
	if !ok || rec.HomeNode != node(gpu1) || rec.MappedMask != 1<<node(gpu1) {
		t.Errorf("GPU pool allocation: record %+v (found %v), want home node %d mapped to it only", rec, ok, node(gpu1))
	}
	karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 4096)
	rec, ok = r.k.lookup(t, unsafe.Add(karg, 100))
	if !ok || rec.HomeNode != 0 || rec.MappedMask != 0 {
		t.Fatalf("kernarg allocation before allow_access: record %+v (found %v), want system memory mapped to no GPU", rec, ok)
	}
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu0}, karg); err != nil {
		t.Fatal(err)
	}
	rec, _ = r.k.lookup(t, karg)
	if rec.MappedMask != 1<<node(gpu0) {
		t.Errorf("after allow_access(gpu0): mapped mask %#x, want %#x", rec.MappedMask, 1<<node(gpu0))
	}
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu1}, karg); err != nil {
		t.Fatal(err)
	}
	rec, _ = r.k.lookup(t, karg)
	if want := uint64(1 << node(gpu1)); rec.MappedMask != want {
		t.Errorf("after allow_access(gpu1): mapped mask %#x, want %#x (gpu0 unmapped)", rec.MappedMask, want)
	}
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu0, gpu1}, karg); err != nil {
		t.Fatal(err)
	}
	rec, _ = r.k.lookup(t, karg)
	if want := uint64(1<<node(gpu0) | 1<<node(gpu1)); rec.MappedMask != want {
		t.Errorf("after allow_access(gpu0, gpu1): mapped mask %#x, want %#x", rec.MappedMask, want)
	}
	// hsa_amd_memory_lock registers user memory (RegisterMemoryWithFlags)
	// and maps it; unlock removes the record.
	user, err := syscall.Mmap(-1, 0, 8192, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(user)
	agents := []hsa.Agent{gpu1}
	var agentPtr uintptr
	if st, _, _ := purego.SyscallN(r.sym("hsa_amd_memory_lock"), uintptr(unsafe.Pointer(&user[0])), 8192,
		uintptr(unsafe.Pointer(&agents[0])), 1, uintptr(unsafe.Pointer(&agentPtr))); uint32(st) != 0 {
		t.Fatalf("hsa_amd_memory_lock: %#x", uint32(st))
	}
	rec, ok = r.k.lookup(t, unsafe.Pointer(&user[100]))
	if !ok || rec.MappedMask&(1<<node(gpu1)) == 0 || rec.HomeNode != 0 {
		t.Errorf("locked user memory: record %+v (found %v), want system memory mapped to node %d", rec, ok, node(gpu1))
	}
	if st, _, _ := purego.SyscallN(r.sym("hsa_amd_memory_unlock"), uintptr(unsafe.Pointer(&user[0]))); uint32(st) != 0 {
		t.Fatalf("hsa_amd_memory_unlock: %#x", uint32(st))
	}
	if _, ok := r.k.lookup(t, unsafe.Pointer(&user[100])); ok {
		t.Error("unlocked user memory still has a record")
	}

	other, err := r.lib.MemoryPoolAllocate(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.lib.MemoryPoolFree(other); err != nil {
		t.Fatal(err)
	}
	if rec, ok := r.k.lookup(t, other); ok && rec.Base == uint64(uintptr(other)) {
		t.Errorf("freed allocation still has a record: %+v", rec)
	}
}

// An interrupt signal wait blocks in the driver (WaitOnEvent sleeps) and is
// woken by the command processor's completion interrupt.
func TestInterruptSignalWaitBlocksAndWakes(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	q, qe := r.queue(r.gpus[0])
	gate := r.signal(1)
	done := r.signal(1)
	before := r.k.blockedWaits(t)
	r.submit(q, barrierAnd(done, uint64(gate)))
	woke := make(chan int64, 1)
	go func() {
		woke <- r.lib.SignalWaitScacquire(done, hsa.ConditionLt, 1, hsa.TimeoutInfinite, hsa.WaitStateBlocked)
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case v := <-woke:
		t.Fatalf("wait returned %d before the barrier's dependency was satisfied", v)
	default:
	}
	if n := r.k.blockedWaits(t); n <= before {
		t.Errorf("no event wait went to sleep while the signal was pending (%d -> %d)", before, n)
	}
	r.lib.SignalStoreScrelease(gate, 0)
	select {
	case v := <-woke:
		if v != 0 {
			t.Errorf("wait returned %d, want 0", v)
		}
	case st := <-qe.ch:
		t.Fatalf("queue error %#x", st)
	case <-time.After(10 * time.Second):
		t.Fatal("blocked wait was not woken by the completion")
	}
}

// Barrier-AND packets on two queues form a chain: B waits for A's
// completion, which waits for a host signal; they complete in order.
func TestBarrierAndChainAcrossQueues(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	qa, ea := r.queue(r.gpus[0])
	qb, eb := r.queue(r.gpus[1])
	gate, doneA, doneB := r.signal(1), r.signal(1), r.signal(1)
	r.submit(qb, barrierAnd(doneB, uint64(doneA)))
	r.submit(qa, barrierAnd(doneA, 0, uint64(gate)))
	time.Sleep(100 * time.Millisecond)
	if a, b := r.lib.SignalLoadScacquire(doneA), r.lib.SignalLoadScacquire(doneB); a != 1 || b != 1 {
		t.Fatalf("before the gate opened: A=%d B=%d, want 1 1", a, b)
	}
	r.lib.SignalStoreScrelease(gate, 0)
	if ok, st, bad := r.waitOrError(doneB, eb, 10*time.Second); !ok {
		t.Fatalf("B did not complete (queue error %v %#x)", bad, st)
	}
	if r.lib.SignalLoadScacquire(doneA) != 0 {
		t.Error("B completed before A")
	}
	select {
	case st := <-ea.ch:
		t.Errorf("queue A error %#x", st)
	default:
	}
}

// AMD vendor packets: a PM4 indirect buffer (ROCr's cache flush) completes;
// a barrier-value packet with no signal completes without waiting (HIP
// 5.7 and later queue one as a marker when a command has no dependency:
// clr rocvirtual.cpp, VirtualGPU::dispatchBarrierValuePacket leaves the
// signal 0); an unknown vendor format stops the queue with
// INVALID_PACKET_FORMAT.
func TestVendorPackets(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	q, qe := r.queue(r.gpus[0])
	ib := r.alloc(r.pool(r.gpus[0], hsa.GlobalFlagCoarseGrained), 4096)
	done := r.signal(1)
	var p packet
	p.put16(0, hsa.Header(hsa.PacketTypeVendor, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	p.put16(2, 1) // AMD_AQL_FORMAT_PM4_IB
	p.put32(4, 0xc0023f00)
	p.put32(8, uint32(uintptr(ib)))
	p.put32(12, uint32(uint64(uintptr(ib))>>32))
	p.put32(16, 4|1<<23) // 4 dwords, valid
	p.put32(20, 0xA)
	p.put64(56, uint64(done))
	r.submit(q, p)
	if ok, st, bad := r.waitOrError(done, qe, 10*time.Second); !ok {
		t.Fatalf("PM4 IB packet did not complete (queue error %v %#x)", bad, st)
	}
	marker := r.signal(1)
	var bv packet
	bv.put16(0, hsa.Header(hsa.PacketTypeVendor, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	bv.put16(2, 2) // HSA_AMD_PACKET_TYPE_BARRIER_VALUE; signal, value, mask, cond 0
	bv.put64(56, uint64(marker))
	r.submit(q, bv)
	if ok, st, bad := r.waitOrError(marker, qe, 10*time.Second); !ok {
		t.Fatalf("barrier-value packet without a signal did not complete (queue error %v %#x)", bad, st)
	}
	bad := r.signal(1)
	p.put16(2, 7) // no such AMD vendor format
	p.put64(56, uint64(bad))
	r.submit(q, p)
	ok, st, gotErr := r.waitOrError(bad, qe, 10*time.Second)
	if ok || !gotErr || st != hsa.StatusErrorInvalidPacket {
		t.Fatalf("unknown vendor format: completed=%v error=%v status %#x, want INVALID_PACKET_FORMAT", ok, gotErr, st)
	}
}

// A packet type the CP does not process (agent dispatch) stops the queue:
// never a silent no-op.
func TestInvalidPacketTypeFaultsQueue(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	q, qe := r.queue(r.gpus[1])
	done := r.signal(1)
	var p packet
	p.put16(0, hsa.Header(hsa.PacketTypeAgentDispatch, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	p.put64(56, uint64(done))
	r.submit(q, p)
	ok, st, gotErr := r.waitOrError(done, qe, 10*time.Second)
	if ok || !gotErr || st != hsa.StatusErrorInvalidPacket {
		t.Fatalf("completed=%v error=%v status %#x, want INVALID_PACKET_FORMAT", ok, gotErr, st)
	}
	// The queue is stopped: later packets do not run.
	after := r.signal(1)
	r.submit(q, barrierAnd(after))
	time.Sleep(200 * time.Millisecond)
	if v := r.lib.SignalLoadScacquire(after); v != 1 {
		t.Errorf("a packet after the error ran (signal %d)", v)
	}
}

// A dispatch of a kernel the simulated GPU cannot name faults the queue:
// the error callback fires, the waiter sees the error, nothing hangs.
func TestUnknownKernelFaultsQueue(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	q, qe := r.queue(r.gpus[0])
	code := r.alloc(r.pool(r.gpus[0], hsa.GlobalFlagCoarseGrained), 4096) // zeros: no kernel
	karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 64)
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{r.gpus[0]}, karg); err != nil {
		t.Fatal(err)
	}
	done := r.signal(1)
	r.submit(q, oneGroupDispatch(code, karg, done))
	ok, st, gotErr := r.waitOrError(done, qe, 10*time.Second)
	if ok || !gotErr || st != hsa.StatusErrorInvalidCodeObject {
		t.Fatalf("completed=%v error=%v status %#x, want INVALID_CODE_OBJECT", ok, gotErr, st)
	}
}

// oneGroupDispatch is a 1-D kernel dispatch packet of one 64-work-item
// workgroup running the code object at code with the given kernarg
// segment (nil: none), completing done.
func oneGroupDispatch(code, kernarg unsafe.Pointer, done hsa.Signal) packet {
	var p packet
	p.put16(0, hsa.Header(hsa.PacketTypeKernelDispatch, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	p.put16(2, 1)  // dimensions
	p.put16(4, 64) // workgroup x, y, z
	p.put16(6, 1)
	p.put16(8, 1)
	p.put32(12, 64) // grid x, y, z
	p.put32(16, 1)
	p.put32(20, 1)
	p.put64(32, uint64(uintptr(code)))
	p.put64(40, uint64(uintptr(kernarg)))
	p.put64(56, uint64(done))
	return p
}

// Malformed dispatches stop the queue with the error the CP reports for
// each: bad dimensions, a workgroup over 1024 work-items, more group
// memory than the LDS has.
func TestMalformedDispatchFaultsQueue(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	code := r.alloc(r.pool(r.gpus[0], hsa.GlobalFlagCoarseGrained), 4096)
	for _, c := range []struct {
		name string
		edit func(p *packet)
		want hsa.Status
	}{
		{"zero dimensions", func(p *packet) { p.put16(2, 0) }, 0x100D /* INCOMPATIBLE_ARGUMENTS */},
		{"workgroup of 2048", func(p *packet) { p.put16(4, 2048) }, hsa.StatusErrorInvalidArgument},
		{"128 KiB of group memory", func(p *packet) { p.put32(28, 128<<10) }, hsa.StatusErrorInvalidAllocation},
	} {
		q, qe := r.queue(r.gpus[0])
		done := r.signal(1)
		p := oneGroupDispatch(code, nil, done)
		c.edit(&p)
		r.submit(q, p)
		ok, st, gotErr := r.waitOrError(done, qe, 10*time.Second)
		if ok || !gotErr || st != c.want {
			t.Errorf("%s: completed=%v error=%v status %#x, want %#x", c.name, ok, gotErr, st, c.want)
		}
	}
}

// The key fault: the CP reads a barrier's dependency signal from kernarg
// memory that was never hsa_amd_agents_allow_access'ed. That is a VM fault,
// reported the way KFD reports one (the memory event, which ROCr hands to
// the system event handler) and as a queue error; nothing hangs. After
// allow_access the same memory works.
func TestUnmappedKernargAccessIsVMFault(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		// The access rule matters: switched off, the same test fails.
		off := kfdsim.Start(t, twoGPUs, t.Name(), kfdsim.Options{Env: []string{kfdsim.EnvRuleOff + "=access"}})
		if off.Err == nil || !strings.Contains(off.Output, "want MEMORY_APERTURE_VIOLATION") {
			t.Fatalf("with the access rule off the test still passes (err %v):\n%s", off.Err, off.Output)
		}
		return
	}
	r := initRuntime(t)
	r.registerFaultHandler()
	karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 4096)
	// An amd_signal_t (kind USER, value 1) in the unmapped buffer.
	*(*int64)(karg) = 1
	*(*int64)(unsafe.Add(karg, 8)) = 1
	q, qe := r.queue(r.gpus[0])
	done := r.signal(1)
	r.submit(q, barrierAnd(done, uint64(uintptr(karg))))
	ok, st, gotErr := r.waitOrError(done, qe, 10*time.Second)
	if ok || !gotErr || st != 41 /* HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION */ {
		t.Fatalf("completed=%v error=%v status %#x, want MEMORY_APERTURE_VIOLATION", ok, gotErr, st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(recordedFaults()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	f := recordedFaults()
	if len(f) != 1 || f[0].address != uint64(uintptr(karg)) || f[0].agent != uint64(r.gpus[0]) || f[0].reason&1 == 0 {
		t.Fatalf("system event handler saw %+v, want one PAGE_NOT_PRESENT fault at %p on agent %#x", f, karg, r.gpus[0])
	}
	// Positive control: mapped, the same dependency is read and waited on.
	// On the other GPU: the fault evicted the process on this one for good
	// (see TestVMFaultEvictsEveryQueueOnTheGPU).
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{r.gpus[1]}, karg); err != nil {
		t.Fatal(err)
	}
	q2, qe2 := r.queue(r.gpus[1])
	done2 := r.signal(1)
	r.submit(q2, barrierAnd(done2, uint64(uintptr(karg))))
	time.Sleep(100 * time.Millisecond)
	if v := r.lib.SignalLoadScacquire(done2); v != 1 {
		t.Fatalf("barrier completed while its dependency was 1 (signal %d)", v)
	}
	*(*int64)(unsafe.Add(karg, 8)) = 0
	if ok, st, bad := r.waitOrError(done2, qe2, 10*time.Second); !ok {
		t.Fatalf("barrier on mapped memory did not complete (queue error %v %#x)", bad, st)
	}
}

// Without a system event handler, ROCr 5.2.3's VMFaultHandler prints the
// fault and aborts the process (runtime.cpp: assert + std::abort). This is
// why an application that wants a fault as an error must register one with
// hsa_amd_register_system_event_handler and return HSA_STATUS_SUCCESS.
func TestVMFaultWithoutHandlerAborts(t *testing.T) {
	if kfdsim.InChild(t) {
		r := initRuntime(t)
		karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 4096)
		*(*int64)(karg) = 1
		*(*int64)(unsafe.Add(karg, 8)) = 1
		q, _ := r.queue(r.gpus[0])
		r.submit(q, barrierAnd(0, uint64(uintptr(karg))))
		time.Sleep(10 * time.Second)
		t.Fatal("the process survived a VM fault with no system event handler")
		return
	}
	runtimeOrSkip(t)
	res := kfdsim.Start(t, twoGPUs, t.Name(), kfdsim.Options{})
	var ee *exec.ExitError
	if !errors.As(res.Err, &ee) || ee.Success() {
		t.Fatalf("child exit %v, want it killed by the abort:\n%s", res.Err, res.Output)
	}
	if !strings.Contains(res.Output, "Memory access fault by GPU node-1") {
		t.Errorf("child output lacks ROCr's fault report:\n%s", res.Output)
	}
	if strings.Contains(res.Output, "--- PASS") || strings.Contains(res.Output, "survived") {
		t.Errorf("child was not aborted:\n%s", res.Output)
	}
}

// HIP 5.2.3 initialises over the simulated driver: one device per GPU node
// with the PCI bus ids of the spec. With exec.c the child also runs
// hipMalloc, hipMemcpy both ways and hipFree: HIP's first allocation on a
// device loads its code object, which ROCr's loader copies to VRAM with its
// CopyAligned blit kernel (with or without SDMA), so every HIP memory call
// needs the shader executor.
func TestHIPInitialises(t *testing.T) {
	if kfdsim.InChild(t) {
		hipChild(t)
		return
	}
	hipParent(t, kfdsim.Options{})
}

// The same with HSA_ENABLE_SDMA=1: host<->device copies go to the SDMA
// engine.
func TestHIPWithSDMA(t *testing.T) {
	if kfdsim.InChild(t) {
		hipChild(t)
		return
	}
	hipParent(t, kfdsim.Options{SDMA: true})
}

func hipParent(t *testing.T, opts kfdsim.Options) {
	runtimeOrSkip(t)
	if _, err := hip.Open(); err != nil && os.Getenv(kfdsim.EnvRequired) != "1" {
		t.Skipf("libamdhip64 is not installed: %v", err)
	}
	kfdsim.Run(t, twoGPUs, t.Name(), opts)
}

func hipChild(t *testing.T) {
	openThunk(t)
	lib, err := hip.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Init(); err != nil {
		t.Fatalf("hipInit: %v", err)
	}
	n, err := lib.DeviceCount()
	if err != nil || n != 2 {
		t.Fatalf("hipGetDeviceCount = %d, %v; want 2", n, err)
	}
	h, err := purego.Dlopen(lib.Path(), purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	busID, err := purego.Dlsym(h, "hipDeviceGetPCIBusId")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for d := 0; d < n; d++ {
		var buf [64]byte
		if r, _, _ := purego.SyscallN(busID, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d)); r != 0 {
			t.Fatalf("hipDeviceGetPCIBusId(%d) = %d", d, r)
		}
		id := strings.ToLower(string(buf[:strings.IndexByte(string(buf[:]), 0)]))
		name, _ := lib.DeviceName(d)
		t.Logf("HIP device %d: %s %s", d, id, name)
		got[id] = true
		if !kfdsim.HasExecutor() {
			continue // see TestHIPInitialises
		}

		const size = 1<<20 + 12345
		p, err := lib.Malloc(d, size)
		if err != nil {
			t.Fatalf("hipMalloc on device %d: %v", d, err)
		}
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i*31 + d)
		}
		dst := make([]byte, size)
		if err := lib.MemcpyHtoD(d, p, unsafe.Pointer(&src[0]), size); err != nil {
			t.Fatalf("hipMemcpy HtoD on device %d: %v", d, err)
		}
		if err := lib.MemcpyDtoH(d, unsafe.Pointer(&dst[0]), p, size); err != nil {
			t.Fatalf("hipMemcpy DtoH on device %d: %v", d, err)
		}
		if !bytes.Equal(src, dst) {
			t.Errorf("device %d: bytes differ after a round trip through VRAM", d)
		}
		if err := lib.Free(d, p); err != nil {
			t.Fatalf("hipFree on device %d: %v", d, err)
		}
	}
	for _, want := range []string{"0000:83:00.0", "0000:03:00.0"} {
		if !got[want] {
			t.Errorf("no HIP device at %s (got %v)", want, got)
		}
	}
}

// Barrier-OR completes when any dependency reaches 0, not before.
func TestBarrierOrWaitsForAny(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	q, qe := r.queue(r.gpus[1])
	a, b, done := r.signal(1), r.signal(1), r.signal(1)
	p := barrierAnd(done, uint64(a), 0, uint64(b))
	p.put16(0, hsa.Header(hsa.PacketTypeBarrierOr, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	r.submit(q, p)
	time.Sleep(100 * time.Millisecond)
	if v := r.lib.SignalLoadScacquire(done); v != 1 {
		t.Fatalf("barrier-OR completed with no dependency at 0 (signal %d)", v)
	}
	r.lib.SignalStoreScrelease(b, 0)
	if ok, st, bad := r.waitOrError(done, qe, 10*time.Second); !ok {
		t.Fatalf("barrier-OR did not complete after one dependency reached 0 (queue error %v %#x)", bad, st)
	}
	if v := r.lib.SignalLoadScacquire(a); v != 1 {
		t.Errorf("the other dependency changed: %d", v)
	}
}

// hsa_shut_down closes the simulated KFD (queues stopped, events and
// mapping records dropped) and a second hsa_init opens it again cleanly,
// with the GPUs kfdsim_configure set in between; kfdsim_configure is refused
// while KFD is open.
func TestShutDownAndReinit(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	k := openThunk(t)
	lib, err := hsa.Open()
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		if err := lib.Init(); err != nil {
			t.Fatalf("round %d: hsa_init: %v", round, err)
		}
		spec := []byte("gfx908\x00")
		if r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_configure"), uintptr(unsafe.Pointer(&spec[0]))); int32(r) != -1 {
			t.Errorf("round %d: kfdsim_configure while open = %d, want -1", round, int32(r))
		}
		agents, err := lib.Agents()
		if want := 3 - round; err != nil || len(agents) != want {
			t.Fatalf("round %d: %d agents (%v), want %d", round, len(agents), err, want)
		}
		var gpu hsa.Agent
		for _, a := range agents {
			if typ, _ := lib.AgentInfoUint32(a, hsa.AgentInfoDevice); hsa.DeviceType(typ) == hsa.DeviceTypeGPU {
				gpu = a
				break
			}
		}
		if name, _ := lib.AgentInfoString(gpu, hsa.AgentInfoName); round == 1 && name != "gfx908" {
			t.Errorf("after kfdsim_configure(gfx908) and re-init: first GPU is %s", name)
		}
		q, err := lib.QueueCreate(gpu, 64, hsa.QueueTypeMulti, nil)
		if err != nil {
			t.Fatal(err)
		}
		done, _ := lib.SignalCreate(1, nil)
		r := &rt{t: t, lib: lib}
		r.submit(q, barrierAnd(done))
		if v := lib.SignalWaitScacquire(done, hsa.ConditionLt, 1, uint64(10*time.Second), hsa.WaitStateBlocked); v != 0 {
			t.Fatalf("round %d: barrier did not complete (%d)", round, v)
		}
		_ = lib.SignalDestroy(done)
		if err := lib.QueueDestroy(q); err != nil {
			t.Fatal(err)
		}
		if err := lib.ShutDown(); err != nil {
			t.Fatalf("round %d: hsa_shut_down: %v", round, err)
		}
		if r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_configure"), uintptr(unsafe.Pointer(&spec[0]))); int32(r) != 0 {
			t.Fatalf("round %d: kfdsim_configure after hsa_shut_down = %d, want 0 (KFD closed)", round, int32(r))
		}
	}
}

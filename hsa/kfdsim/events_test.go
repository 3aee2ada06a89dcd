package kfdsim_test

import (
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/cmem"
)

// HSAKMT_STATUS values.
const (
	kmtSuccess     = 0
	kmtWaitTimeout = 31
	infinite       = 0xFFFFFFFF
)

func (k *thunk) call(t *testing.T, name string, args ...uintptr) uint32 {
	t.Helper()
	r, _, _ := purego.SyscallN(k.sym(t, name), args...)
	return uint32(r)
}

// openKFD opens KFD through the real thunk and acquires the topology, as
// ROCr does first: the thunk resolves node ids against it.
func (k *thunk) openKFD(t *testing.T) {
	t.Helper()
	if st := k.call(t, "hsaKmtOpenKFD"); st != kmtSuccess {
		t.Fatalf("hsaKmtOpenKFD: %d", st)
	}
	var props [64]byte // HsaSystemProperties
	if st := k.call(t, "hsaKmtAcquireSystemProperties", uintptr(unsafe.Pointer(&props[0]))); st != kmtSuccess {
		t.Fatalf("hsaKmtAcquireSystemProperties: %d", st)
	}
	t.Cleanup(func() {
		k.call(t, "hsaKmtReleaseSystemProperties")
		k.call(t, "hsaKmtCloseKFD")
	})
}

func (k *thunk) createEvent(t *testing.T, typ uint32, manual, signaled bool) uintptr {
	t.Helper()
	var desc [24]byte // HsaEventDescriptor: EventType @0, NodeId @4, SyncVar @8
	*(*uint32)(unsafe.Pointer(&desc[0])) = typ
	*(*uint64)(unsafe.Pointer(&desc[16])) = 8
	var ev uintptr
	b := func(v bool) uintptr {
		if v {
			return 1
		}
		return 0
	}
	if st := k.call(t, "hsaKmtCreateEvent", uintptr(unsafe.Pointer(&desc[0])), b(manual), b(signaled), uintptr(unsafe.Pointer(&ev))); st != kmtSuccess {
		t.Fatalf("hsaKmtCreateEvent: %d", st)
	}
	t.Cleanup(func() { k.call(t, "hsaKmtDestroyEvent", ev) })
	return ev
}

func (k *thunk) wait(t *testing.T, ev uintptr, ms uint32) uint32 {
	return k.call(t, "hsaKmtWaitOnEvent", ev, uintptr(ms))
}

// The thunk's events, driven directly: timeouts, blocking waits woken from
// another thread, KFD's wake-all on set, auto and manual reset,
// wait-any/all, and the VM-fault data a MEMORY event returns.
func TestEventsBlockWakeAndReset(t *testing.T) {
	if !kfdsim.InChild(t) {
		kfdsim.Run(t, "gfx90a", t.Name(), kfdsim.Options{})
		return
	}
	k := openThunk(t)
	k.openKFD(t)

	ev := k.createEvent(t, 0 /* SIGNAL */, false, false)
	start := time.Now()
	if st := k.wait(t, ev, 50); st != kmtWaitTimeout {
		t.Fatalf("wait on an unsignalled event: %d, want WAIT_TIMEOUT", st)
	}
	if d := time.Since(start); d < 45*time.Millisecond {
		t.Errorf("50 ms wait returned after %v", d)
	}
	woke := make(chan uint32, 1)
	go func() { woke <- k.wait(t, ev, infinite) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case st := <-woke:
		t.Fatalf("infinite wait returned %d before SetEvent", st)
	default:
	}
	if st := k.call(t, "hsaKmtSetEvent", ev); st != kmtSuccess {
		t.Fatal(st)
	}
	select {
	case st := <-woke:
		if st != kmtSuccess {
			t.Errorf("woken wait: %d", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetEvent did not wake the waiter")
	}
	if st := k.wait(t, ev, 0); st != kmtWaitTimeout {
		t.Errorf("auto-reset event still signalled after a wait: %d", st)
	}

	// KFD's set_event: one set of an auto-reset event wakes EVERY thread
	// waiting on it (hsa_queue_destroy depends on this: it and ROCr's async
	// handler thread wait on the same queue event).
	both := make(chan uint32, 2)
	for i := 0; i < 2; i++ {
		go func() { both <- k.wait(t, ev, 5000) }()
	}
	time.Sleep(100 * time.Millisecond)
	k.call(t, "hsaKmtSetEvent", ev)
	for i := 0; i < 2; i++ {
		if st := <-both; st != kmtSuccess {
			t.Errorf("waiter %d of 2 on one auto-reset event: %d, want SUCCESS from a single SetEvent", i, st)
		}
	}
	if st := k.wait(t, ev, 0); st != kmtWaitTimeout {
		t.Errorf("auto-reset event set while waited on stayed signalled: %d", st)
	}

	manual := k.createEvent(t, 0, true, true)
	for i := 0; i < 2; i++ {
		if st := k.wait(t, manual, 0); st != kmtSuccess {
			t.Errorf("manual-reset event, wait %d: %d", i, st)
		}
	}
	k.call(t, "hsaKmtResetEvent", manual)
	if st := k.wait(t, manual, 0); st != kmtWaitTimeout {
		t.Errorf("after ResetEvent: %d", st)
	}

	a, b := k.createEvent(t, 0, false, false), k.createEvent(t, 0, false, false)
	k.call(t, "hsaKmtSetEvent", b)
	list := []uintptr{a, b}
	if st := k.call(t, "hsaKmtWaitOnMultipleEvents", uintptr(unsafe.Pointer(&list[0])), 2, 1, 20); st != kmtWaitTimeout {
		t.Errorf("wait-all with one of two set: %d", st)
	}
	// As in KFD, the timed-out wait consumed b's set: set it again.
	k.call(t, "hsaKmtSetEvent", b)
	if st := k.call(t, "hsaKmtWaitOnMultipleEvents", uintptr(unsafe.Pointer(&list[0])), 2, 0, 20); st != kmtSuccess {
		t.Errorf("wait-any with one of two set: %d", st)
	}

	// A VM fault signals the MEMORY event and fills its fault data.
	mem := k.createEvent(t, 8 /* MEMORY */, true, false)
	var p uintptr
	flags := uintptr(1<<6 | 1<<13) // HostAccess | CoarseGrain
	if st := k.call(t, "hsaKmtAllocMemory", 1, 8192, flags, uintptr(unsafe.Pointer(&p))); st != kmtSuccess {
		t.Fatalf("hsaKmtAllocMemory: %d", st)
	}
	access := func(addr, size uintptr) bool {
		r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_gpu_access"), 1, addr, size, 0)
		return r&0xff != 0
	}
	if access(p, 8) {
		t.Error("GPU access to memory not yet mapped succeeded")
	}
	if st := k.wait(t, mem, 1000); st != kmtSuccess {
		t.Fatalf("memory event after a fault: %d", st)
	}
	e := cmem.Ptr(mem)
	node := *(*uint32)(unsafe.Add(e, 8))
	va := *(*uint64)(unsafe.Add(e, 12))
	failure := *(*uint32)(unsafe.Add(e, 20))
	fflags := *(*uint32)(unsafe.Add(e, 24))
	if node != 1 || va != uint64(p) || failure&1 == 0 || fflags != 1 {
		t.Errorf("fault data: node %d va %#x failure %#x flags %d; want node 1 va %#x NotPresent FATAL_PROCESS", node, va, failure, fflags, p)
	}
	k.call(t, "hsaKmtResetEvent", mem)
	nodes := []uint32{1}
	if st := k.call(t, "hsaKmtMapMemoryToGPUNodes", p, 8192, 0, 0, 1, uintptr(unsafe.Pointer(&nodes[0]))); st != kmtSuccess {
		t.Fatalf("hsaKmtMapMemoryToGPUNodes: %d", st)
	}
	if !access(p, 8192) {
		t.Error("GPU access to mapped memory failed")
	}
	if access(p+8000, 1000) {
		t.Error("GPU access past the end of an allocation succeeded")
	}
	if st := k.wait(t, mem, 0); st != kmtSuccess {
		t.Error("the out-of-bounds access raised no fault")
	}
	k.call(t, "hsaKmtFreeMemory", p, 8192)
}

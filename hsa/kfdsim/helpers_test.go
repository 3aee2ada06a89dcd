package kfdsim_test

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
)

// twoGPUs puts the gfx90a first in HSA (KFD node) order but at the higher
// PCI address, so agent order and PCI order differ.
const twoGPUs = "gfx90a@0000:83:00.0,gfx1030@0000:03:00.0"

// runtimeOrSkip skips the parent test where Debian's ROCr is not installed
// (CI installs it: there, with ROCSYNC_KFDSIM_REQUIRED=1, it fails).
func runtimeOrSkip(t *testing.T) {
	t.Helper()
	_, err := hsa.Open()
	if errors.Is(err, dl.ErrNotFound) && os.Getenv(kfdsim.EnvRequired) != "1" {
		t.Skipf("libhsa-runtime64 is not installed: %v", err)
	}
	if err != nil {
		t.Fatalf("hsa.Open: %v", err)
	}
}

// runInChild runs the calling test in a child under the simulated driver
// and reports whether the caller is that child (and should run the body).
func runInChild(t *testing.T, spec string) bool {
	t.Helper()
	if kfdsim.InChild(t) {
		return true
	}
	runtimeOrSkip(t)
	kfdsim.Run(t, spec, t.Name(), kfdsim.Options{})
	return false
}

// thunk is the simulated driver the child preloads (its kfdsim_* entry
// points) and Debian's real libhsakmt.so.1 over it (the hsaKmt* functions).
type thunk struct {
	handle uintptr // the simulated driver
	kmt    uintptr // libhsakmt.so.1
}

func openThunk(t *testing.T) *thunk {
	t.Helper()
	h, err := purego.Dlopen(kfdsim.LibraryName, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatalf("dlopen %s: %v", kfdsim.LibraryName, err)
	}
	if _, err := purego.Dlsym(h, "kfdsim_configure"); err != nil {
		t.Fatalf("the loaded %s is not kfdsim's (no kfdsim_configure): %v", kfdsim.LibraryName, err)
	}
	kmt, err := purego.Dlopen("libhsakmt.so.1", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatalf("dlopen libhsakmt.so.1: %v", err)
	}
	if _, err := purego.Dlsym(kmt, "kfdsim_configure"); err == nil {
		t.Fatal("libhsakmt.so.1 is a replacement, not the real thunk")
	}
	return &thunk{handle: h, kmt: kmt}
}

func (k *thunk) sym(t *testing.T, name string) uintptr {
	t.Helper()
	lib := k.handle
	if strings.HasPrefix(name, "hsaKmt") {
		lib = k.kmt
	}
	a, err := purego.Dlsym(lib, name)
	if err != nil {
		t.Fatalf("dlsym %s: %v", name, err)
	}
	return a
}

// allocRecord mirrors kfdsim_alloc (kfdsim.h).
type allocRecord struct {
	Base       uint64
	Size       uint64
	HomeNode   uint32
	_          uint32
	MappedMask uint64
	Flags      uint32
	_          uint32
}

func (k *thunk) lookup(t *testing.T, p unsafe.Pointer) (allocRecord, bool) {
	t.Helper()
	var rec allocRecord
	r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_lookup"), uintptr(p), uintptr(unsafe.Pointer(&rec)))
	return rec, r&0xff != 0
}

func (k *thunk) blockedWaits(t *testing.T) uint64 {
	t.Helper()
	r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_test_blocked_waits"))
	return uint64(r)
}

// rt is ROCr, initialised over the simulated driver.
type rt struct {
	t    *testing.T
	lib  *hsa.Lib
	k    *thunk
	cpu  hsa.Agent
	gpus []hsa.Agent
	h    uintptr // dlopen handle of libhsa-runtime64, for calls hsa.Lib does not bind
}

func initRuntime(t *testing.T) *rt {
	t.Helper()
	k := openThunk(t)
	lib, err := hsa.Open()
	if err != nil {
		t.Fatalf("hsa.Open: %v", err)
	}
	if err := lib.Init(); err != nil {
		t.Fatalf("hsa_init over the simulated driver: %v", err)
	}
	t.Cleanup(func() {
		if err := lib.ShutDown(); err != nil {
			t.Errorf("hsa_shut_down: %v", err)
		}
	})
	h, err := purego.Dlopen(lib.Path(), purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatalf("dlopen %s: %v", lib.Path(), err)
	}
	r := &rt{t: t, lib: lib, k: k, h: h}
	agents, err := lib.Agents()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		typ, err := lib.AgentInfoUint32(a, hsa.AgentInfoDevice)
		if err != nil {
			t.Fatal(err)
		}
		if hsa.DeviceType(typ) == hsa.DeviceTypeGPU {
			r.gpus = append(r.gpus, a)
		} else if hsa.DeviceType(typ) == hsa.DeviceTypeCPU {
			r.cpu = a
		}
	}
	if len(r.gpus) == 0 {
		t.Fatal("no GPU agent")
	}
	return r
}

func (r *rt) sym(name string) uintptr {
	a, err := purego.Dlsym(r.h, name)
	if err != nil {
		r.t.Fatalf("dlsym %s: %v", name, err)
	}
	return a
}

// pool returns the first pool of agent a whose global flags include flag.
func (r *rt) pool(a hsa.Agent, flag uint32) hsa.MemoryPool {
	r.t.Helper()
	pools, err := r.lib.MemoryPools(a)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range pools {
		seg, _ := r.lib.MemoryPoolInfoUint32(p, hsa.PoolInfoSegment)
		flags, _ := r.lib.MemoryPoolInfoUint32(p, hsa.PoolInfoGlobalFlags)
		if seg == hsa.SegmentGlobal && flags&flag != 0 {
			return p
		}
	}
	r.t.Fatalf("agent %#x has no global pool with flag %d", a, flag)
	return 0
}

func (r *rt) alloc(p hsa.MemoryPool, size uint64) unsafe.Pointer {
	r.t.Helper()
	m, err := r.lib.MemoryPoolAllocate(p, size)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = r.lib.MemoryPoolFree(m) })
	return m
}

func (r *rt) signal(v int64) hsa.Signal {
	r.t.Helper()
	s, err := r.lib.SignalCreate(v, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = r.lib.SignalDestroy(s) })
	return s
}

// queueErrors collects a queue's asynchronous errors.
type queueErrors struct {
	ch chan hsa.Status
}

func (r *rt) queue(gpu hsa.Agent) (*hsa.Queue, *queueErrors) {
	r.t.Helper()
	qe := &queueErrors{ch: make(chan hsa.Status, 8)}
	q, err := r.lib.QueueCreate(gpu, 64, hsa.QueueTypeMulti, func(s hsa.Status) { qe.ch <- s })
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		done := make(chan error, 1)
		go func() { done <- r.lib.QueueDestroy(q) }()
		select {
		case err := <-done:
			if err != nil {
				r.t.Errorf("hsa_queue_destroy: %v", err)
			}
		case <-time.After(20 * time.Second):
			r.t.Errorf("hsa_queue_destroy hung")
		}
	})
	return q, qe
}

// packet is one 64-byte AQL packet; word 0 (header and setup) is published
// last, atomically, as the AQL protocol requires.
type packet [64]byte

func (p *packet) put16(off int, v uint16) { *(*uint16)(unsafe.Pointer(&p[off])) = v }
func (p *packet) put32(off int, v uint32) { *(*uint32)(unsafe.Pointer(&p[off])) = v }
func (p *packet) put64(off int, v uint64) { *(*uint64)(unsafe.Pointer(&p[off])) = v }

func barrierAnd(completion hsa.Signal, deps ...uint64) packet {
	var p packet
	p.put16(0, hsa.Header(hsa.PacketTypeBarrierAnd, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	for i, d := range deps {
		p.put64(8+8*i, d)
	}
	p.put64(56, uint64(completion))
	return p
}

func (r *rt) submit(q *hsa.Queue, p packet) uint64 {
	r.t.Helper()
	idx := r.lib.QueueAddWriteIndexScacqScrel(q, 1)
	for idx-r.lib.QueueLoadReadIndexScacquire(q) >= uint64(q.Size) {
		time.Sleep(time.Millisecond)
	}
	slot := unsafe.Add(q.Base, (idx%uint64(q.Size))*64)
	copy(unsafe.Slice((*byte)(slot), 64)[4:], p[4:])
	atomic.StoreUint32((*uint32)(slot), *(*uint32)(unsafe.Pointer(&p[0])))
	r.lib.SignalStoreScrelease(q.Doorbell, int64(idx))
	return idx
}

// waitOrError waits for s to drop below 1, for a queue error, or for the
// deadline; it never hangs.
func (r *rt) waitOrError(s hsa.Signal, qe *queueErrors, d time.Duration) (done bool, status hsa.Status, gotErr bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		// timeout_hint is in system timestamp units (1 GHz here).
		if v := r.lib.SignalWaitScacquire(s, hsa.ConditionLt, 1, uint64(20*time.Millisecond), hsa.WaitStateBlocked); v < 1 {
			return true, 0, false
		}
		if qe != nil {
			select {
			case st := <-qe.ch:
				return false, st, true
			default:
			}
		}
	}
	return false, 0, false
}

// systemEvents records hsa_amd_register_system_event_handler callbacks.
type memoryFault struct {
	agent   uint64
	address uint64
	reason  uint32
}

var (
	faultsMu       sync.Mutex
	faults         []memoryFault
	faultCallback  uintptr
	faultCallbackO sync.Once
)

func (r *rt) registerFaultHandler() {
	faultCallbackO.Do(func() {
		faultCallback = purego.NewCallback(func(ev, data uintptr) uintptr {
			event := cmem.Ptr(ev)
			if *(*uint32)(event) == 0 { // HSA_AMD_GPU_MEMORY_FAULT_EVENT
				f := memoryFault{
					agent:   *(*uint64)(unsafe.Add(event, 8)),
					address: *(*uint64)(unsafe.Add(event, 16)),
					reason:  *(*uint32)(unsafe.Add(event, 24)),
				}
				faultsMu.Lock()
				faults = append(faults, f)
				faultsMu.Unlock()
			}
			return 0 // HSA_STATUS_SUCCESS: handled, ROCr does not abort
		})
	})
	st, _, _ := purego.SyscallN(r.sym("hsa_amd_register_system_event_handler"), faultCallback, 0)
	if uint32(st) != 0 {
		r.t.Fatalf("hsa_amd_register_system_event_handler: %#x", uint32(st))
	}
}

func recordedFaults() []memoryFault {
	faultsMu.Lock()
	defer faultsMu.Unlock()
	return append([]memoryFault(nil), faults...)
}

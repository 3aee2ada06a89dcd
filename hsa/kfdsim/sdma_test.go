package kfdsim_test

import (
	"bytes"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// sdmaRoundTrip copies host -> VRAM -> host on gpu with
// hsa_amd_memory_async_copy and checks the bytes and that the SDMA engine
// did the work.
func sdmaRoundTrip(t *testing.T, r *rt, gpu hsa.Agent) {
	const n = 1<<16 + 12
	host := r.alloc(r.pool(r.cpu, hsa.GlobalFlagFineGrained), n)
	back := r.alloc(r.pool(r.cpu, hsa.GlobalFlagFineGrained), n)
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu}, host); err != nil {
		t.Fatal(err)
	}
	if err := r.lib.AgentsAllowAccess([]hsa.Agent{gpu}, back); err != nil {
		t.Fatal(err)
	}
	vram := r.alloc(r.pool(gpu, hsa.GlobalFlagCoarseGrained), n)
	src := unsafe.Slice((*byte)(host), n)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	before := sdmaPackets(t, r.k)
	copyWait := func(dst unsafe.Pointer, dstAgent hsa.Agent, s unsafe.Pointer, srcAgent hsa.Agent) bool {
		done := r.signal(1)
		if err := r.lib.MemoryAsyncCopy(dst, dstAgent, s, srcAgent, n, nil, done); err != nil {
			t.Fatalf("hsa_amd_memory_async_copy: %v", err)
		}
		ok, _, _ := r.waitOrError(done, nil, 5*time.Second)
		return ok
	}
	if !copyWait(vram, gpu, host, r.cpu) {
		t.Fatal("host-to-device copy did not complete")
	}
	if !copyWait(back, r.cpu, vram, gpu) {
		t.Fatal("device-to-host copy did not complete")
	}
	if !bytes.Equal(unsafe.Slice((*byte)(back), n), src) {
		t.Fatal("bytes differ after host -> VRAM -> host")
	}
	if after := sdmaPackets(t, r.k); after <= before {
		t.Fatalf("no SDMA packets ran (%d -> %d): ROCr did not use the SDMA engine", before, after)
	}
}

func sdmaPackets(t *testing.T, k *thunk) uint64 {
	r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_test_sdma_packets"))
	return uint64(r)
}

// With HSA_ENABLE_SDMA=1, hsa_amd_memory_async_copy between host and
// "VRAM" runs on the simulated SDMA engine (copy, fence/atomic completion,
// trap interrupt) and moves the bytes; a copy from host memory the GPU was
// never given access to is a VM fault at that address, and the copy never
// completes.
func TestSDMACopiesAndChecksAccess(t *testing.T) {
	if kfdsim.InChild(t) {
		r := initRuntime(t)
		r.registerFaultHandler()
		for _, gpu := range r.gpus[1:] { // gfx1030: SDMA v5 (GCR packets)
			sdmaRoundTrip(t, r, gpu)
		}
		gpu := r.gpus[0] // gfx90a: SDMA v4
		sdmaRoundTrip(t, r, gpu)
		const n = 1 << 16
		vram := r.alloc(r.pool(gpu, hsa.GlobalFlagCoarseGrained), n)
		// The negative case: a source the GPU cannot reach.
		private := r.alloc(r.pool(r.cpu, hsa.GlobalFlagFineGrained), n)
		done := r.signal(1)
		if err := r.lib.MemoryAsyncCopy(vram, gpu, private, r.cpu, n, nil, done); err != nil {
			t.Fatalf("hsa_amd_memory_async_copy: %v", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(recordedFaults()) == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if v := r.lib.SignalLoadScacquire(done); v != 1 {
			t.Errorf("copy from host memory never made accessible to the GPU completed (signal %d)", v)
		}
		f := recordedFaults()
		if len(f) == 0 || f[0].address != uint64(uintptr(private)) {
			t.Fatalf("faults %+v, want one at %p", f, private)
		}
		return
	}
	runtimeOrSkip(t)
	kfdsim.Run(t, twoGPUs, t.Name(), kfdsim.Options{SDMA: true})
}

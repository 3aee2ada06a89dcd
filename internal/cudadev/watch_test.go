package cudadev

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// A bounded whole-stream wait on a device that writes progress words asks
// the driver nothing but one cuStreamWriteValue64: no cuStreamQuery, no
// synchronize; a second wait for the same work, and Completed, ask nothing
// at all (counted by the fake libcuda, whose attribute 122 says yes when
// FAKECUDA_STREAM_MEM_OPS is set).
func TestWatchedWaitsMakeNoQueries(t *testing.T) {
	p := cfakeEnv(t)
	t.Setenv("FAKECUDA_STREAM_MEM_OPS", "1")
	h := newHarnessConfig(t, backendKinds[1], driver.DeviceConfig{Policy: syncstate.DeviceSide, WaitTimeout: 5 * time.Second})
	if err := h.d.WatchesStreams(); err != nil {
		t.Fatal(err)
	}
	tk := h.task()
	const n = 64
	x := h.upload(randVals(1, n))
	y := h.alloc(n, kernels.F32)
	counts := openFakeCounts(t, p.CUDA)
	tk.mul(y, x, x)
	s := tk.tk.Kernel()
	ticket := s.LastTicket()
	q0, s0, w0 := counts.Get(fakelib.CountQuery), counts.Get(fakelib.CountSync), counts.Get(fakelib.CountWriteValue)
	if err := s.WaitHost(ticket); err != nil {
		t.Fatal(err)
	}
	if q, sy, w := counts.Get(fakelib.CountQuery)-q0, counts.Get(fakelib.CountSync)-s0, counts.Get(fakelib.CountWriteValue)-w0; q != 0 || sy != 0 || w != 1 {
		t.Fatalf("one watched wait made %d queries, %d synchronizes and %d value writes; want 0, 0, 1", q, sy, w)
	}
	tk.mul(y, x, x)
	if err := s.WaitHost(s.LastTicket()); err != nil {
		t.Fatal(err)
	}
	q1, w1 := counts.Get(fakelib.CountQuery), counts.Get(fakelib.CountWriteValue)
	if err := s.WaitHost(s.LastTicket()); err != nil {
		t.Fatal(err)
	}
	if c := s.Completed(); c != s.LastTicket() {
		t.Fatalf("Completed = %d after the wait, want %d", c, s.LastTicket())
	}
	if q, w := counts.Get(fakelib.CountQuery)-q1, counts.Get(fakelib.CountWriteValue)-w1; q != 0 || w != 0 {
		t.Fatalf("a wait for finished work made %d queries and %d value writes, want none", q, w)
	}
	want := make([]float32, n)
	for i, v := range randVals(1, n) {
		want[i] = v * v
	}
	got := h.read(y)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: %g, want %g", i, got[i], want[i])
		}
	}
}

// A watched wait ends only once the stream's work has run: the device's
// write is ordered after it. The Go emulation runs a stream's ops only when
// the host synchronizes, so a write made at the call instead
// (earlyWrites, the wrong order) ends the wait with the work still
// pending, which the check below catches.
func TestWatchedWaitEndsAfterTheWork(t *testing.T) {
	for _, early := range []bool{false, true} {
		h := newHarnessConfig(t, backendKinds[0], driver.DeviceConfig{Policy: syncstate.DeviceSide, WaitTimeout: 5 * time.Second})
		h.emu.watches, h.emu.earlyWrites = true, early
		tk := h.task()
		const n = 64
		x := h.upload(randVals(1, n))
		y := h.alloc(n, kernels.F32)
		tk.mul(y, x, x)
		s := tk.tk.Kernel()
		if err := s.WaitHost(s.LastTicket()); err != nil {
			t.Fatal(err)
		}
		h.emu.mu.Lock()
		st, err := h.emu.stream(s.Handle())
		if err != nil {
			h.emu.mu.Unlock()
			t.Fatal(err)
		}
		pending, writes := len(st.ops), h.emu.valueWrites
		h.emu.mu.Unlock()
		if writes != 1 {
			t.Fatalf("early %v: %d value writes, want 1 (the wait did not use the watch)", early, writes)
		}
		if early && pending == 0 {
			t.Fatal("a write made before the work did not end the wait early: the check cannot fire")
		}
		if !early && pending != 0 {
			t.Fatalf("the watched wait returned with %d ops still pending", pending)
		}
	}
}

// A watched wait for work that never finishes is still bounded: the word
// is never written, so after its spin the wait goes to a blocking call on
// a helper and returns ErrWaitTimeout at its bound.
func TestWatchedWaitIsBounded(t *testing.T) {
	h := newHarnessConfig(t, backendKinds[0], driver.DeviceConfig{Policy: syncstate.DeviceSide, WaitTimeout: 50 * time.Millisecond})
	h.emu.watches = true
	tk := h.task()
	s := tk.tk.Kernel()
	gate, dev, err := h.emu.mappedAlloc(8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(func(hs uintptr) error { return h.emu.streamWaitValueGEQ(hs, dev, 1) }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.WaitHost(s.LastTicket())
	if !errors.Is(err, syncstate.ErrWaitTimeout) {
		t.Fatalf("wait for held work: %v, want ErrWaitTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the 50 ms wait took %v", d)
	}
	atomic.StoreUint64((*uint64)(gate), 1)
	if err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	// The abandoned blocking call returns on its helper once the gate is
	// open; the stream is destroyed after it (the harness's Close checks).
	time.Sleep(100 * time.Millisecond)
}

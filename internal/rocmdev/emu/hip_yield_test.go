package emu

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hip"
)

// A not-ready stream or event query yields the processor to the emulated
// device's goroutines (rocsync's host waits spin on queries without
// yielding); a query of finished work does not.
func TestNotReadyQueriesYield(t *testing.T) {
	var yields atomic.Int64
	old := yieldToDevice
	yieldToDevice = func() { yields.Add(1) }
	t.Cleanup(func() { yieldToDevice = old })
	m := New(Options{})
	h := m.HIP()
	p, err := h.ExtMalloc(0, 8, hip.MallocSignalMemory)
	if err != nil {
		t.Fatal(err)
	}
	word := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	held, err := h.StreamCreate(0, hip.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	opener, err := h.StreamCreate(0, hip.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StreamWaitValue64(held, word, 1, hip.StreamWaitValueGte, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	ev, err := h.EventCreate(0, hip.EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EventRecord(ev, held); err != nil {
		t.Fatal(err)
	}
	notReady := func(err error) bool {
		var he *hip.Error
		return errors.As(err, &he) && he.Code == hip.ErrorNotReady
	}
	if err := h.StreamQuery(held); !notReady(err) {
		t.Fatalf("query of a held stream: %v", err)
	}
	if err := h.EventQuery(ev); !notReady(err) {
		t.Fatalf("query of an event behind a held stream: %v", err)
	}
	if n := yields.Load(); n != 2 {
		t.Fatalf("two not-ready queries yielded %d times, want 2", n)
	}
	if err := h.StreamWriteValue64(opener, word, 1, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for notReady(h.StreamQuery(held)) {
		if time.Now().After(deadline) {
			t.Fatal("the stream never finished")
		}
		time.Sleep(time.Millisecond)
	}
	yields.Store(0)
	if err := h.StreamQuery(held); err != nil {
		t.Fatal(err)
	}
	if err := h.EventQuery(ev); err != nil {
		t.Fatal(err)
	}
	if n := yields.Load(); n != 0 {
		t.Fatalf("queries of finished work yielded %d times, want 0", n)
	}
}

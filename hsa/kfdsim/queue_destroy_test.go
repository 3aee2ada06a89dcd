//go:build linux && (amd64 || arm64)

package kfdsim_test

import (
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
)

// hsa_queue_destroy of a queue whose error callback is still running.
// ROCr's ~AqlQueue (amd_aql_queue.cpp, ROCr 5.2.3) reads whether the
// queue's error handler is done, then stores 0x8000000000000000 into
// queue_inactive_signal and waits, with no timeout, for the handler to
// answer; a handler that finishes in between has unregistered itself and
// the destructor waits forever. hsa.Lib.QueueDestroy therefore waits for
// the handler's last act (-1 stored into the signal) before it calls
// hsa_queue_destroy: the destroy called here while the callback is held
// must wait in Go (counted by hsa.ErrorHandlerWaits) and leave the signal
// to the handler, and it completes once the callback returns.
func TestQueueDestroyWaitsForTheErrorHandler(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	inCallback := make(chan hsa.Status, 1)
	release := make(chan struct{})
	var once sync.Once
	q, err := r.lib.QueueCreate(r.gpus[0], 64, hsa.QueueTypeMulti, func(s hsa.Status) {
		once.Do(func() { inCallback <- s })
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	// A packet type the CP does not process stops the queue with an
	// error (INVALID_PACKET), reported through the error callback.
	var p packet
	p.put16(0, hsa.Header(hsa.PacketTypeAgentDispatch, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem))
	r.submit(q, p)
	select {
	case s := <-inCallback:
		if s != hsa.StatusErrorInvalidPacket {
			t.Fatalf("queue error %#x, want HSA_STATUS_ERROR_INVALID_PACKET_FORMAT", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no queue error reported")
	}
	waitsBefore := hsa.ErrorHandlerWaits()
	done := make(chan error, 1)
	go func() { done <- r.lib.QueueDestroy(q) }()
	deadline := time.Now().Add(20 * time.Second)
	for hsa.ErrorHandlerWaits() == waitsBefore {
		select {
		case err := <-done:
			t.Fatalf("hsa_queue_destroy returned (%v) while the queue's error callback was running", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("QueueDestroy did not wait for the running error handler (it is inside ROCr's destructor)")
		}
		time.Sleep(time.Millisecond)
	}
	inactive := hsa.Signal(*(*uint64)(unsafe.Add(q.Handle, 192)))
	if v := r.lib.SignalLoadScacquire(inactive); v == -1<<63 {
		t.Fatalf("queue_inactive_signal is %#x: ROCr's destructor ran while the handler was running", uint64(v))
	}
	released = true
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("hsa_queue_destroy: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("hsa_queue_destroy hung after the error callback returned")
	}
}

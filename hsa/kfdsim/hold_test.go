//go:build linux && (amd64 || arm64)

package kfdsim_test

import (
	"testing"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// Hold pauses every command processor: packets on two GPUs' queues stay
// pending while held (nested holds included) and complete once the last
// hold is released; an unmatched release changes nothing.
func TestHoldPausesCommandProcessors(t *testing.T) {
	if !runInChild(t, twoGPUs) {
		return
	}
	r := initRuntime(t)
	qa, ea := r.queue(r.gpus[0])
	qb, eb := r.queue(r.gpus[1])
	release1, err := kfdsim.Hold("")
	if err != nil {
		t.Fatal(err)
	}
	release2, err := kfdsim.Hold("")
	if err != nil {
		t.Fatal(err)
	}
	doneA, doneB := r.signal(1), r.signal(1)
	r.submit(qa, barrierAnd(doneA))
	r.submit(qb, barrierAnd(doneB))
	time.Sleep(100 * time.Millisecond)
	if a, b := r.lib.SignalLoadScacquire(doneA), r.lib.SignalLoadScacquire(doneB); a != 1 || b != 1 {
		t.Fatalf("while held: A=%d B=%d, want 1 1", a, b)
	}
	release1()
	release1() // idempotent: must not drop the second hold
	time.Sleep(100 * time.Millisecond)
	if a, b := r.lib.SignalLoadScacquire(doneA), r.lib.SignalLoadScacquire(doneB); a != 1 || b != 1 {
		t.Fatalf("with one of two holds left: A=%d B=%d, want 1 1", a, b)
	}
	release2()
	for _, w := range []struct {
		name string
		ok   bool
	}{{"A", first(r.waitOrError(doneA, ea, 10*time.Second))}, {"B", first(r.waitOrError(doneB, eb, 10*time.Second))}} {
		if !w.ok {
			t.Fatalf("queue %s did not complete after the release", w.name)
		}
	}
	live, err := kfdsim.Allocated("", uintptr(r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 64)))
	if err != nil || !live {
		t.Errorf("Allocated(a kernarg allocation) = %v, %v", live, err)
	}
	var onStack [8]byte
	if live, err := kfdsim.Allocated("", uintptr(unsafe.Pointer(&onStack[0]))); err != nil || live {
		t.Errorf("Allocated(Go memory) = %v, %v", live, err)
	}
	if got := int32(openThunk(t).call(t, "kfdsim_release")); got != -1 {
		t.Errorf("kfdsim_release with nothing held = %d, want -1", got)
	}
}

func first(ok bool, _ ...any) bool { return ok }

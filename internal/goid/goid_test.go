package goid

import "testing"

// A goroutine's id is stable, non-zero, and differs from another
// goroutine's.
func TestIDTellsGoroutinesApart(t *testing.T) {
	me := ID()
	if me == 0 || ID() != me {
		t.Fatalf("ID() = %d, then %d", me, ID())
	}
	other := make(chan uint64)
	go func() { other <- ID() }()
	if o := <-other; o == 0 || o == me {
		t.Errorf("another goroutine's ID() = %d, this one's %d", o, me)
	}
}

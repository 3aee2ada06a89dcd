package stream

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocsync/rocsync/syncstate"
)

// notReadyAPI answers "not done" to its first queries, then "done".
type notReadyAPI struct {
	API
	left atomic.Int64
}

func (a *notReadyAPI) StreamQuery(uintptr) (bool, error) { return a.left.Add(-1) < 0, nil }
func (a *notReadyAPI) EventQuery(uintptr) (bool, error)  { return a.left.Add(-1) < 0, nil }
func (a *notReadyAPI) StreamDestroy(uintptr) error       { return nil }

// A bounded host wait spinning on a C runtime's queries never yields the
// processor (a Gosched cost ~15 µs on the H100 machine, and a query is a
// foreign call anyway); on an in-process API (the emulator) it yields
// every 16 queries, so that the work it waits for can run.
func TestSpinYieldsOnlyForInProcessAPIs(t *testing.T) {
	var yields atomic.Int64
	old := gosched
	gosched = func() { yields.Add(1) }
	t.Cleanup(func() { gosched = old })
	for _, foreign := range []bool{true, false} {
		api := &notReadyAPI{}
		api.left.Store(64)
		s := New(api, 1, Config{Name: "spin", Domain: syncstate.DomainLibrary, WaitTimeout: 10 * time.Second, ForeignCalls: foreign})
		ticket, err := s.Submit(func(uintptr) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		yields.Store(0)
		if err := s.WaitHost(ticket); err != nil {
			t.Fatal(err)
		}
		if api.left.Load() >= 0 {
			t.Fatalf("foreign %v: the wait ended before the runtime said done", foreign)
		}
		got := yields.Load()
		if foreign && got != 0 {
			t.Errorf("spinning on foreign calls yielded %d times, want 0", got)
		}
		if !foreign && got < 64/16 {
			t.Errorf("spinning on an in-process API yielded %d times in 64 queries, want at least %d", got, 64/16)
		}
	}
}

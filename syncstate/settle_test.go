package syncstate

import (
	"testing"
	"time"
)

func TestSettlerFinishWaitsForSettle(t *testing.T) {
	var s Settler
	s.Finish(time.Nanosecond) // not started: returns at once
	if s.Started() || s.Stopped() {
		t.Fatal("a Settler that never started reports started or stopped")
	}
	release := make(chan struct{})
	finished := false
	s.Start(func() { <-release; finished = true })
	if !s.Started() {
		t.Fatal("Started false after Start")
	}
	go close(release)
	s.Finish(0)
	if !finished || s.Stopped() {
		t.Errorf("Finish(0) returned with settle finished = %v, stopped = %v; want true, false", finished, s.Stopped())
	}
}

// Past the timeout Finish stops the settling and still waits for it.
func TestSettlerFinishStopsPastTimeout(t *testing.T) {
	var s Settler
	returned := false
	s.Start(func() {
		for !s.Stopped() {
			time.Sleep(time.Millisecond)
		}
		returned = true
	})
	s.Finish(5 * time.Millisecond)
	if !s.Stopped() || !returned {
		t.Errorf("Finish past its timeout: stopped = %v, settle returned = %v; want both", s.Stopped(), returned)
	}
}

func TestBackoffDoublesToOneMillisecond(t *testing.T) {
	var b Backoff
	want := []time.Duration{20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Microsecond {
			t.Errorf("pause %d = %v, want %v", i, got, w*time.Microsecond)
		}
	}
}

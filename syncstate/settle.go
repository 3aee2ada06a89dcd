package syncstate

import (
	"sync/atomic"
	"time"
)

// Settler runs a broken timeline's settling in the background: the work
// that completes its failed tickets in order, each once the device waits
// behind it allow (a queue completes their signals, a stream counts them
// complete). The timeline's Close waits for it up to the wait timeout and,
// past it, stops it. The zero value has not started.
type Settler struct {
	done atomic.Pointer[chan struct{}] // closed when settle returns
	stop atomic.Bool
}

// Start runs settle in a new goroutine. settle polls Stopped between its
// checks, and pauses with a Backoff. The owner calls Start at most once,
// under its lock (Started says whether it has).
func (s *Settler) Start(settle func()) {
	done := make(chan struct{})
	s.done.Store(&done)
	go func() {
		defer close(done)
		settle()
	}()
}

// Started reports whether Start ran.
func (s *Settler) Started() bool { return s.done.Load() != nil }

// Stopped reports whether Finish ran out of time: settle is to complete
// what is left at once.
func (s *Settler) Stopped() bool { return s.stop.Load() }

// Finish waits for the settling to end, for at most timeout (0: no
// limit); past it, it stops the settling and waits for settle to return.
// Without Start it returns at once.
func (s *Settler) Finish(timeout time.Duration) {
	p := s.done.Load()
	if p == nil {
		return
	}
	var expired <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		expired = tm.C
	}
	select {
	case <-*p:
	case <-expired:
		s.stop.Store(true)
		<-*p
	}
}

// Backoff paces a host polling loop: its pauses start at 20µs and double up
// to 1ms. The zero value is ready.
type Backoff struct{ pause time.Duration }

// Next returns the pause to sleep now and doubles the next one.
func (b *Backoff) Next() time.Duration {
	if b.pause == 0 {
		b.pause = 20 * time.Microsecond
	}
	p := b.pause
	b.pause = min(2*b.pause, time.Millisecond)
	return p
}

// Sleep sleeps for Next().
func (b *Backoff) Sleep() { time.Sleep(b.Next()) }

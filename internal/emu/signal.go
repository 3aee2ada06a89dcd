package emu

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
)

// signal is an HSA signal: a 64-bit value with blocking waits. Its clock is
// what a waiter that observes the value learns (release/acquire).
type signal struct {
	v         atomic.Int64
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change with waiters
	vc        vclock
	interrupt bool   // interrupt signals refuse hsa_amd_signal_value_pointer
	doorbell  *queue // set for a queue's doorbell signal
	destroyed bool
}

func (m *Machine) newSignal(initial int64, interrupt bool) hsa.Signal {
	s := &signal{interrupt: interrupt}
	s.v.Store(initial)
	m.sigMu.Lock()
	defer m.sigMu.Unlock()
	m.signals = append(m.signals, s)
	return hsa.Signal(len(m.signals))
}

func (m *Machine) signal(h hsa.Signal) *signal {
	m.sigMu.RLock()
	defer m.sigMu.RUnlock()
	if h == 0 || int(h) > len(m.signals) {
		return nil
	}
	return m.signals[h-1]
}

// signalAt finds the signal whose value lives at p (for the HIP stream
// wait/write value calls used by the bridge policy).
func (m *Machine) signalAt(p unsafe.Pointer) *signal {
	m.sigMu.RLock()
	defer m.sigMu.RUnlock()
	for _, s := range m.signals {
		if unsafe.Pointer(&s.v) == p {
			return s
		}
	}
	return nil
}

// notify wakes the waiters after a change.
func (s *signal) notify() {
	s.mu.Lock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
}

// storeFrom sets the value; vc (if any) replaces the signal's clock, as a
// release store starts a new release sequence.
func (s *signal) storeFrom(v int64, vc vclock) {
	if vc != nil {
		s.mu.Lock()
		s.vc = vc.clone()
		s.mu.Unlock()
	}
	s.v.Store(v)
	s.notify()
}

// addFrom adds delta atomically (a device-side completion decrement); the
// clock is joined, since a read-modify-write continues the release sequence.
func (s *signal) addFrom(delta int64, vc vclock) {
	if vc != nil {
		s.mu.Lock()
		s.vc.join(vc)
		s.mu.Unlock()
	}
	s.v.Add(delta)
	s.notify()
}

func (s *signal) clock() vclock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vc.clone()
}

func satisfied(v int64, c hsa.SignalCondition, cmp int64) bool {
	switch c {
	case hsa.ConditionEq:
		return v == cmp
	case hsa.ConditionNe:
		return v != cmp
	case hsa.ConditionLt:
		return v < cmp
	case hsa.ConditionGte:
		return v >= cmp
	}
	return false
}

// wait blocks until the condition holds or timeout passes (0: forever) and
// returns the last value seen.
func (s *signal) wait(c hsa.SignalCondition, cmp int64, timeout time.Duration) int64 {
	var deadline <-chan time.Time
	for {
		v := s.v.Load()
		if satisfied(v, c, cmp) {
			return v
		}
		s.mu.Lock()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		// Re-check after registering, so a change in between is not missed.
		if v := s.v.Load(); satisfied(v, c, cmp) {
			return v
		}
		if timeout > 0 && deadline == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-ch:
		case <-deadline:
			return s.v.Load()
		}
	}
}

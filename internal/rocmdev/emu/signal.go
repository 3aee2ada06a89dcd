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
	v    atomic.Int64
	mu   sync.Mutex
	cond sync.Cond // every waiter, host or device
	// waiters counts the goroutines in waitDevice, so that a change
	// nobody waits for (most completions) takes no lock: a waiter counts
	// itself before it reads the value, a notifier reads the count after
	// it changes the value, and both are sequentially consistent, so one
	// of them sees the other.
	waiters   atomic.Int32
	vc        vclock
	interrupt bool   // interrupt signals refuse hsa_amd_signal_value_pointer
	doorbell  *queue // set for a queue's doorbell signal
	destroyed bool
	// hipMemory marks the signal behind hipExtMallocWithFlags(...,
	// hipMallocSignalMemory): HIP allocated it, so every HIP release
	// accepts its address in stream memory operations.
	hipMemory bool
	// startTS and endTS are the newest profiled dispatch's times
	// (amd_signal_t's start_ts and end_ts), in system-clock ticks.
	startTS, endTS atomic.Uint64
}

func (m *Machine) newSignal(initial int64, interrupt bool) hsa.Signal {
	s := &signal{interrupt: interrupt}
	s.v.Store(initial)
	m.sigMu.Lock()
	defer m.sigMu.Unlock()
	var old []*signal
	if p := m.sigTab.Load(); p != nil {
		old = *p
	}
	// Appending in place is safe: a reader holding the old slice never
	// reads past its length, and the Store publishes the new entry.
	tab := append(old, s)
	m.sigTab.Store(&tab)
	return hsa.Signal(len(tab))
}

// signalTable is the current table of signals (handle = index+1).
func (m *Machine) signalTable() []*signal {
	if p := m.sigTab.Load(); p != nil {
		return *p
	}
	return nil
}

func (m *Machine) signal(h hsa.Signal) *signal {
	tab := m.signalTable()
	if h == 0 || int(h) > len(tab) {
		return nil
	}
	return tab[h-1]
}

// signalAt finds the signal whose value lives at p (for the HIP stream
// wait/write value calls used by the bridge policy).
func (m *Machine) signalAt(p unsafe.Pointer) *signal { return m.signalAtAddr(uintptr(p)) }

func (m *Machine) signalAtAddr(p uintptr) *signal {
	for _, s := range m.signalTable() {
		if uintptr(unsafe.Pointer(&s.v)) == p {
			return s
		}
	}
	return nil
}

// notify wakes the waiters after a change.
func (s *signal) notify() {
	if s.waiters.Load() == 0 {
		return
	}
	s.mu.Lock()
	if s.cond.L != nil {
		s.cond.Broadcast()
	}
	s.mu.Unlock()
}

// waitDevice blocks until pred holds for the value or stop reports true,
// without timers or channels: the packet processor waits this way for
// every barrier, so it must not allocate. Whoever sets stop must call
// notify afterwards.
func (s *signal) waitDevice(pred func(int64) bool, stop func() bool) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cond.L == nil {
		s.cond.L = &s.mu
	}
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	for {
		v := s.v.Load()
		if pred(v) || stop() {
			return v
		}
		s.cond.Wait()
	}
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

// wakeTimer wakes a timed waiter without allocating: timers are pooled
// and re-aimed at the signal being waited on.
type wakeTimer struct {
	t      *time.Timer
	target atomic.Pointer[signal]
	fired  atomic.Bool
}

var wakeTimers = sync.Pool{New: func() any {
	w := &wakeTimer{}
	w.t = time.AfterFunc(time.Hour, func() {
		w.fired.Store(true)
		if s := w.target.Load(); s != nil {
			s.notify()
		}
	})
	w.t.Stop()
	return w
}}

// wait blocks until the condition holds or timeout passes (0: forever) and
// returns the last value seen.
func (s *signal) wait(c hsa.SignalCondition, cmp int64, timeout time.Duration) int64 {
	if v := s.v.Load(); satisfied(v, c, cmp) {
		return v
	}
	pred := func(v int64) bool { return satisfied(v, c, cmp) }
	if timeout <= 0 {
		return s.waitDevice(pred, func() bool { return false })
	}
	w := wakeTimers.Get().(*wakeTimer)
	w.fired.Store(false)
	w.target.Store(s)
	w.t.Reset(timeout)
	v := s.waitDevice(pred, w.fired.Load)
	w.t.Stop()
	w.target.Store(nil)
	wakeTimers.Put(w)
	return v
}

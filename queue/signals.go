package queue

import (
	"sync"
	"sync/atomic"

	"github.com/rocsync/rocsync/hsa"
)

// Signal is a pooled HSA completion signal. It is reference counted: the
// queue entry of the packet that completes it holds one reference, and so
// does every barrier-AND packet or host waiter that depends on it, so a
// signal is never reused while anything may still look at its value.
type Signal struct {
	H    hsa.Signal
	refs atomic.Int32
	pool *SignalPool
}

// interrupt says whether a host may block on s: ROCr serves a blocking
// wait on a GPU-only signal by polling. A foreign signal is waited as
// given.
func (s *Signal) interrupt() bool {
	return s.pool == nil || s.pool.attributes&(hsa.SignalAttrAMDGPUOnly|hsa.SignalAttrIPC) == 0
}

// Retain adds a reference.
func (s *Signal) Retain() { s.refs.Add(1) }

// Complete stores 0 into the signal, as the packet that owns it would on
// completion.
func (s *Signal) Complete() { s.pool.rt.SignalStoreScrelease(s.H, 0) }

// Release drops a reference; the last one returns the signal to its pool
// (a foreign signal has none: its owner destroys it).
func (s *Signal) Release() {
	if n := s.refs.Add(-1); n == 0 {
		if s.pool != nil {
			s.pool.put(s)
		}
	} else if n < 0 {
		panic("queue: signal released too often")
	}
}

// Foreign wraps a signal rocsync did not create (a producer's outside
// rocsync) so a barrier-AND packet can depend on it; it has one reference
// and is never destroyed by rocsync.
func Foreign(h hsa.Signal) *Signal {
	s := &Signal{H: h}
	s.refs.Store(1)
	return s
}

// SignalPool hands out completion signals set to 1, so that a packet's
// completion (a decrement) takes them to 0. No signal is created per op in
// steady state.
type SignalPool struct {
	rt         hsa.Runtime
	attributes uint64
	mu         sync.Mutex
	free       []*Signal
	all        []*Signal
	created    atomic.Uint64
}

// NewSignalPool makes a pool. attributes are hsa_amd_signal_create
// attributes; 0 gives ordinary (interrupt-capable) signals.
func NewSignalPool(rt hsa.Runtime, attributes uint64) *SignalPool {
	return &SignalPool{rt: rt, attributes: attributes}
}

// Created is how many signals the pool has ever created.
func (p *SignalPool) Created() uint64 { return p.created.Load() }

// Get returns a signal with value 1 and one reference.
func (p *SignalPool) Get() (*Signal, error) {
	p.mu.Lock()
	var s *Signal
	if n := len(p.free); n > 0 {
		s = p.free[n-1]
		p.free = p.free[:n-1]
	}
	p.mu.Unlock()
	if s == nil {
		h, err := p.rt.AMDSignalCreate(1, nil, p.attributes)
		if err != nil {
			return nil, err
		}
		s = &Signal{H: h, pool: p}
		p.created.Add(1)
		p.mu.Lock()
		p.all = append(p.all, s)
		p.mu.Unlock()
	} else {
		p.rt.SignalStoreRelaxed(s.H, 1)
	}
	s.refs.Store(1)
	return s, nil
}

func (p *SignalPool) put(s *Signal) {
	p.mu.Lock()
	p.free = append(p.free, s)
	p.mu.Unlock()
}

// Destroy destroys every signal the pool created. Call it only when no
// queue that used the pool has work in flight.
func (p *SignalPool) Destroy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for _, s := range p.all {
		if err := p.rt.SignalDestroy(s.H); err != nil && first == nil {
			first = err
		}
	}
	p.all, p.free = nil, nil
	return first
}

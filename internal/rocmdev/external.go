package rocmdev

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/queue"
)

// Signals exchanged with HSA code outside rocsync (the HSA form of the
// DLPack-style handshake): an exported signal is an interrupt signal at 1
// that a marker packet on the task's queue completes; an imported one is
// the foreign producer's, which a barrier-AND packet on the queue waits
// for. Both are ops of the kernel lane, so rocsync orders them with the
// operands like any op.

// exportedSignals are the signals handed to the user, by handle, with
// the reference the user holds.
type exportedSignals struct {
	once sync.Once
	pool *queue.SignalPool
	mu   sync.Mutex
	out  map[uint64]*queue.Signal
}

var _ driver.SignalFencer = (*Task)(nil)

// ErrNoQueue is why a task without an HSA queue (Unified: everything on
// the HIP stream) cannot exchange HSA signals.
var ErrNoQueue = errors.New("rocmdev: the task has no HSA queue (the Unified policy runs everything on its HIP stream)")

// ExternalSignals implements driver.SignalFencer.
func (t *Task) ExternalSignals() error {
	if t.st.Queue == nil {
		return ErrNoQueue
	}
	return nil
}

// NewExternalSignal implements driver.SignalFencer.
func (t *Task) NewExternalSignal() (uint64, error) {
	x := &t.d.exported
	x.once.Do(func() { x.pool = queue.NewSignalPool(t.d.rt.HSA, 0) })
	s, err := x.pool.Get()
	if err != nil {
		return 0, err
	}
	x.mu.Lock()
	if x.out == nil {
		x.out = map[uint64]*queue.Signal{}
	}
	x.out[uint64(s.H)] = s
	x.mu.Unlock()
	return uint64(s.H), nil
}

// ReleaseExternalSignal implements driver.SignalFencer. The signal goes
// back to the pool once its marker packet has also retired.
func (t *Task) ReleaseExternalSignal(h uint64) error {
	x := &t.d.exported
	x.mu.Lock()
	s, ok := x.out[h]
	delete(x.out, h)
	x.mu.Unlock()
	if !ok {
		return fmt.Errorf("rocmdev: signal %#x was not exported by this device, or was released already", h)
	}
	s.Release()
	return nil
}

// exportSignal submits the marker packet that completes exported signal h.
func (t *Task) exportSignal(h uint64) (uint64, error) {
	if t.st.Queue == nil {
		return 0, fmt.Errorf("%w: %w", driver.ErrUnsupported, ErrNoQueue)
	}
	x := &t.d.exported
	x.mu.Lock()
	s, ok := x.out[h]
	if ok {
		s.Retain() // the marker's reference
	}
	x.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: signal %#x is not an exported signal of this device", driver.ErrUnsupported, h)
	}
	return t.st.Queue.Marker(s)
}

// importSignal submits a barrier-AND packet waiting for foreign signal h.
func (t *Task) importSignal(h uint64) (uint64, error) {
	if t.st.Queue == nil {
		return 0, fmt.Errorf("%w: %w", driver.ErrUnsupported, ErrNoQueue)
	}
	if h == 0 {
		return 0, fmt.Errorf("%w: the null signal", driver.ErrUnsupported)
	}
	var deps [hsa.BarrierAndMaxDependencies]*queue.Signal
	deps[0] = queue.Foreign(hsa.Signal(h))
	// Whoever signals it wrote the operands outside this GPU's L2
	// (another process, GPU or the host): the op marks them so
	// (syncstate.Op.ForeignWrites), and the kernels that read them
	// acquire at system scope, on whichever queue.
	return t.st.Queue.BarrierAnd(deps)
}

// destroyExported destroys the export pool's signals; the queues are gone.
func (d *Device) destroyExported() error {
	x := &d.exported
	x.mu.Lock()
	x.out = nil
	x.mu.Unlock()
	if x.pool == nil {
		return nil
	}
	return x.pool.Destroy()
}

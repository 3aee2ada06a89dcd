// Package hostlane is a timeline of host work: Go functions that run in
// submission order on a goroutine of the lane's own, each once the fences
// it depends on have completed, without blocking the goroutine that
// submitted it (the role of MLX's CPU stream, XLA's ThenExecuteCallback and
// IREE's queue_host_call).
//
// A lane is a syncstate.Timeline of the host domain. Ordering a function
// after GPU work is the lane's "device wait": WaitDevice records the fences
// and the lane's goroutine waits for them on the host before the next
// function, so the submitter never waits. Ordering GPU work after a
// function is the GPU timeline's business: it asks the lane, with
// OnComplete, to release a signal or memory word it waits for on the
// device once the function's ticket completes.
//
// The package refuses to know about GPUs, runtimes or buffers: a function
// is a func() error, and completions are callbacks.
//
// The functions run on a rocsync-owned goroutine, not on a runtime's
// callback thread: CUDA forbids CUDA calls inside cuLaunchHostFunc
// callbacks, and HIP says the same of hipLaunchHostFunc, whereas a
// function here may copy device memory synchronously.
package hostlane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocsync/rocsync/internal/goid"
	"github.com/rocsync/rocsync/syncstate"
)

// DefaultMaxPending is the cap on a lane's functions in flight when
// Config.MaxPending is 0, the same as rocsync's default MaxInFlight.
const DefaultMaxPending = 1024

// maxDeps is the most fences one function waits for (syncstate collapses
// an op's dependencies to one per timeline, at most 16).
const maxDeps = 16

// ErrClosed is returned by Submit on a closed lane.
var ErrClosed = errors.New("hostlane: lane is closed")

// Config describes a lane.
type Config struct {
	// Name identifies the lane in errors and logs, such as "gpu0/host1".
	Name string
	// MaxPending caps the functions submitted and not yet complete (0:
	// DefaultMaxPending). Past it Submit waits on the host for the older
	// half, counted as a throttle wait.
	MaxPending int
	// WaitTimeout bounds each host wait on the lane (0: none).
	WaitTimeout time.Duration
	// Sinks receives the lane's counts (throttle waits).
	Sinks syncstate.Sinks
	// OnThrottle, if set, is told of every throttle wait before it is
	// made; an error refuses it and Submit fails with it.
	OnThrottle func(f syncstate.Fence) error
	// Publish, if set, receives every completed ticket (failed ones too),
	// in order, by an atomic store: a word in host memory mapped to a GPU,
	// which a stream waits on with a "greater or equal" stream memory
	// operation (cuStreamWaitValue64) instead of the host waiting.
	Publish *uint64
}

type entry struct {
	ticket uint64
	fn     func() error
	deps   [maxDeps]syncstate.Fence
	unpins [maxDeps]func() // for deps on syncstate.Pinner timelines
	ndeps  int
}

type notice struct {
	ticket uint64
	fn     func()
}

// Lane is a host timeline. Submit, WaitDevice and Close are called by the
// lane's task (one goroutine); everything else from any goroutine.
type Lane struct {
	cfg    Config
	health syncstate.Health

	mu       sync.Mutex
	work     []entry           // submitted, not yet started, in ticket order
	pending  []syncstate.Fence // waits for the next Submit (WaitDevice)
	unpins   []func()          // pending's pins, index for index
	notices  []notice
	changed  chan struct{} // closed and replaced at a completion once a waiter took it
	watched  bool          // a waiter took changed (under mu)
	wake     chan struct{} // the goroutine's doorbell (buffered, 1)
	closing  bool
	finished chan struct{} // closed when the goroutine ends

	last      atomic.Uint64
	completed atomic.Uint64
	// goroutine is the lane goroutine's id (goid), set as it starts.
	goroutine atomic.Uint64
}

var (
	_ syncstate.Timeline      = (*Lane)(nil)
	_ syncstate.ContextWaiter = (*Lane)(nil)
)

// New starts a lane and its goroutine; Close stops it.
func New(c Config) *Lane {
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	l := &Lane{cfg: c, changed: make(chan struct{}), wake: make(chan struct{}, 1), finished: make(chan struct{})}
	go l.run()
	return l
}

// Domain implements syncstate.Timeline.
func (l *Lane) Domain() syncstate.Domain { return syncstate.DomainHost }

// Name implements syncstate.Timeline.
func (l *Lane) Name() string { return l.cfg.Name }

// LastTicket implements syncstate.Timeline.
func (l *Lane) LastTicket() uint64 { return l.last.Load() }

// Completed implements syncstate.Timeline: every function up to the
// returned ticket has run (or failed).
func (l *Lane) Completed() uint64 { return l.completed.Load() }

// Failed implements syncstate.Timeline. A function's error, or the
// failure of a fence it waited for, breaks the lane from its ticket on,
// as a fault breaks a queue: later functions do not run.
func (l *Lane) Failed(t uint64) error { return l.health.Failed(t) }

// Break fails every function not yet complete with cause, as a fault
// breaks a queue: those not started never run, nor do later ones. A
// function already running finishes; waits for it return once it has. The
// first failure is kept.
func (l *Lane) Break(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.health.Fail(l.completed.Load()+1, fmt.Errorf("hostlane: %s: %w", l.cfg.Name, cause))
}

// Err is the lane's failure, nil while it is healthy.
func (l *Lane) Err() error { return l.health.Err() }

// CanWaitDevice implements syncstate.Timeline: the lane waits for any
// timeline, on its own goroutine.
func (l *Lane) CanWaitDevice(syncstate.Domain) bool { return true }

// WaitDevice implements syncstate.Timeline: the next function submitted
// runs only once the fences are complete. The lane's goroutine waits for
// them; the caller does not. A fence of a syncstate.Pinner timeline (a
// stream) is pinned now: the GPU work submitted after the function may
// wait for it, and a wait that took that work in would never end.
func (l *Lane) WaitDevice(fences []syncstate.Fence) error {
	if err := l.waitDevice(fences); err != nil {
		return err
	}
	// Outside l.mu: a queue takes its own lock to arm, and calls into
	// lanes under it.
	for _, f := range fences {
		if w, ok := f.TL.(WakeArmer); ok {
			w.ArmWake(f.Ticket)
		}
	}
	return nil
}

// WakeArmer is a timeline that prepares, at submission, a blocking host
// wait that comes later (queue.Queue: the marker with an interrupt signal
// goes in while the fence is still its newest packet).
type WakeArmer interface {
	ArmWake(ticket uint64)
}

func (l *Lane) waitDevice(fences []syncstate.Fence) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range fences {
		merged := -1
		for i := range l.pending {
			if l.pending[i].TL == f.TL {
				merged = i
			}
		}
		if merged < 0 && len(l.pending) == maxDeps {
			return fmt.Errorf("hostlane: %s: more than %d fences for one function", l.cfg.Name, maxDeps)
		}
		unpin := func() {}
		if p, ok := f.TL.(syncstate.Pinner); ok {
			var err error
			if unpin, err = p.Pin(f.Ticket); err != nil {
				return err
			}
		}
		if merged >= 0 {
			l.pending[merged].Ticket = max(l.pending[merged].Ticket, f.Ticket)
			prev := l.unpins[merged]
			l.unpins[merged] = func() { prev(); unpin() }
			continue
		}
		l.pending = append(l.pending, f)
		l.unpins = append(l.unpins, unpin)
	}
	return nil
}

// Submit queues fn after the fences given to WaitDevice since the last
// Submit and returns its ticket. It waits on the host only when MaxPending
// functions are in flight (a throttle wait for the older half).
func (l *Lane) Submit(fn func() error) (uint64, error) {
	if fn == nil {
		return 0, errors.New("hostlane: nil function")
	}
	if err := l.throttle(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	t := l.last.Load() + 1
	e := entry{ticket: t, fn: fn}
	e.ndeps = copy(e.deps[:], l.pending)
	copy(e.unpins[:], l.unpins)
	clear(l.pending)
	l.pending = l.pending[:0]
	clear(l.unpins)
	l.unpins = l.unpins[:0]
	l.work = append(l.work, e)
	l.last.Store(t)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return t, nil
}

func (l *Lane) throttle() error {
	last, done := l.last.Load(), l.completed.Load()
	limit := uint64(l.cfg.MaxPending)
	if last-done < limit {
		return nil
	}
	target := last - limit/2
	f := syncstate.Fence{TL: l, Ticket: target}
	if l.cfg.OnThrottle != nil {
		if err := l.cfg.OnThrottle(f); err != nil {
			return err
		}
	}
	l.cfg.Sinks.HostWait(syncstate.ReasonThrottle)
	if err := l.WaitHost(target); err != nil && l.Failed(target) == nil {
		return err
	}
	return nil
}

// OnComplete arranges for fn to run on the lane's goroutine once ticket t
// has completed, or failed (a GPU timeline waiting on the device for the
// lane must be released either way; it learns of the failure from its
// upstream record). It returns false, and never calls fn, when t is
// already complete.
func (l *Lane) OnComplete(t uint64, fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t <= l.completed.Load() {
		return false
	}
	l.notices = append(l.notices, notice{ticket: t, fn: fn})
	return true
}

// WaitHost implements syncstate.Timeline.
func (l *Lane) WaitHost(t uint64) error { return l.WaitHostContext(context.Background(), t) }

// WaitHostContext implements syncstate.ContextWaiter: it waits until
// ticket t has completed, ctx is done (nil: never) or Config.WaitTimeout
// has passed, and returns the ticket's failure.
func (l *Lane) WaitHostContext(ctx context.Context, t uint64) error {
	if t > l.completed.Load() && goid.ID() == l.goroutine.Load() {
		// The function running now, or one behind it, which cannot run
		// until it returns: refused at once rather than blocking until
		// the wait's timeout, or for ever without one.
		return fmt.Errorf("%w: %s#%d is not complete, and this is the lane's goroutine (its function #%d or later would have to return first)",
			syncstate.ErrSelfWait, l.cfg.Name, t, l.completed.Load()+1)
	}
	var timeout <-chan time.Time
	if l.cfg.WaitTimeout > 0 && t > l.completed.Load() {
		tm := time.NewTimer(l.cfg.WaitTimeout)
		defer tm.Stop()
		timeout = tm.C
	}
	var done <-chan struct{}
	if syncstate.Cancellable(ctx) {
		done = ctx.Done()
	}
	start := time.Now()
	for {
		l.mu.Lock()
		ch := l.changed
		l.watched = true
		l.mu.Unlock()
		if t <= l.completed.Load() {
			return l.Failed(t)
		}
		select {
		case <-ch:
		case <-timeout:
			return &syncstate.TimeoutError{Fence: syncstate.Fence{TL: l, Ticket: t}, After: time.Since(start)}
		case <-done:
			return fmt.Errorf("waiting for %s#%d: %w", l.cfg.Name, t, ctx.Err())
		case <-l.finished:
			if t <= l.completed.Load() {
				return l.Failed(t)
			}
			return fmt.Errorf("%w: %s#%d will not run", ErrClosed, l.cfg.Name, t)
		}
	}
}

// Close waits for the functions submitted (bounded by WaitTimeout), then
// stops the lane's goroutine. Functions not yet run when the wait ends run
// before the goroutine stops; a second Close does nothing.
func (l *Lane) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	err := l.WaitHost(l.last.Load())
	if errors.Is(err, syncstate.ErrWaitTimeout) {
		return err // the lane stays open: its goroutine still has work
	}
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.finished
	// Fences recorded for a function that was never submitted (its op
	// failed after ordering) hold pins: let them go.
	l.mu.Lock()
	for _, unpin := range l.unpins {
		unpin()
	}
	clear(l.pending)
	clear(l.unpins)
	l.pending, l.unpins = l.pending[:0], l.unpins[:0]
	l.mu.Unlock()
	return err
}

// run is the lane's goroutine.
func (l *Lane) run() {
	defer close(l.finished)
	l.goroutine.Store(goid.ID())
	for {
		l.mu.Lock()
		if len(l.work) == 0 {
			closing := l.closing
			l.mu.Unlock()
			if closing {
				return
			}
			<-l.wake
			continue
		}
		e := l.work[0]
		l.work[0] = entry{}
		l.work = l.work[1:]
		if len(l.work) == 0 {
			l.work = l.work[:0:0] // let the backing array go once idle
		}
		l.mu.Unlock()
		l.runOne(&e)
	}
}

// runOne waits for e's fences, runs it unless the lane is broken, and
// completes its ticket.
func (l *Lane) runOne(e *entry) {
	defer func() {
		for _, unpin := range e.unpins[:e.ndeps] {
			unpin()
		}
	}()
	if l.health.Failed(e.ticket) == nil {
		if err := l.waitDeps(e); err != nil {
			l.health.Fail(e.ticket, err)
		} else if err := call(e.fn); err != nil {
			l.health.Fail(e.ticket, err)
		}
	}
	l.mu.Lock()
	l.completed.Store(e.ticket)
	if l.cfg.Publish != nil {
		atomic.StoreUint64(l.cfg.Publish, e.ticket)
	}
	if l.watched {
		// Only a waiter needs the broadcast: a run of functions nobody
		// waits for makes no channel each.
		close(l.changed)
		l.changed = make(chan struct{})
		l.watched = false
	}
	var due []notice
	kept := l.notices[:0]
	for _, n := range l.notices {
		if n.ticket <= e.ticket {
			due = append(due, n)
		} else {
			kept = append(kept, n)
		}
	}
	clear(l.notices[len(kept):])
	l.notices = kept
	l.mu.Unlock()
	for _, n := range due {
		n.fn()
	}
}

// waitDeps waits on the host for e's fences. A wait that times out is
// retried while its producer has not failed: the function must not run
// before its inputs exist, and a hung producer is reported by whoever
// waits for the lane.
func (l *Lane) waitDeps(e *entry) error {
	for _, f := range e.deps[:e.ndeps] {
		for {
			err := f.TL.WaitHost(f.Ticket)
			if err == nil {
				break
			}
			if ferr := f.TL.Failed(f.Ticket); ferr != nil || !errors.Is(err, syncstate.ErrWaitTimeout) {
				if ferr != nil {
					err = ferr
				}
				return &syncstate.UpstreamError{Consumer: l.cfg.Name, Producer: f, Err: err}
			}
		}
	}
	return nil
}

// PanicError is a function's panic, recovered: the lane fails the
// function's ticket with it instead of taking the process down.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return fmt.Sprintf("hostlane: function panicked: %v", e.Value) }

func call(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r}
		}
	}()
	return fn()
}

package syncstate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrWaitTimeout is matched (errors.Is) by every host wait that ran past
// its timeout.
var ErrWaitTimeout = errors.New("wait timed out")

// ErrSelfWait is matched (errors.Is) by the error of a host wait refused
// because it waits for work that cannot complete until the waiter returns:
// a host lane's function waiting for its own lane (hostlane).
var ErrSelfWait = errors.New("a host function waits for its own lane")

// TimeoutError is a host wait that ran past its timeout: the fence it
// waited for, and for how long. The GPU work is not cancelled.
type TimeoutError struct {
	Fence Fence
	After time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("waited %v for %v, which has not completed", e.After, e.Fence)
}

// Is makes errors.Is(err, ErrWaitTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrWaitTimeout }

// ContextWaiter is a timeline whose host waits can be cancelled: the wait
// returns ctx's error (wrapped) when ctx is done, leaving the GPU work
// running. Queues and streams implement it.
type ContextWaiter interface {
	WaitHostContext(ctx context.Context, t uint64) error
}

// Cancellable reports whether ctx can end a wait: nil and
// context.Background() cannot, and waits without one may block in the
// runtime instead of polling.
func Cancellable(ctx context.Context) bool { return ctx != nil && ctx.Done() != nil }

// WaitHostContext waits for f with ctx when its timeline supports it, and
// plainly otherwise.
func WaitHostContext(ctx context.Context, f Fence) error {
	if cw, ok := f.TL.(ContextWaiter); ok && Cancellable(ctx) {
		return cw.WaitHostContext(ctx, f.Ticket)
	}
	return f.TL.WaitHost(f.Ticket)
}

// Bound is the limit of one host wait: a timeout (0: none) and a context
// (nil: none). Check costs a clock read; it allocates only on failure.
type Bound struct {
	Ctx     context.Context
	Timeout time.Duration
	Start   time.Time
}

// Check returns the error that ends the wait for f, or nil to go on.
func (b *Bound) Check(f Fence) error {
	var el time.Duration
	if b.Timeout > 0 {
		el = time.Since(b.Start)
	}
	if !b.Ended(el) {
		return nil
	}
	if Cancellable(b.Ctx) && b.Ctx.Err() != nil {
		return fmt.Errorf("waiting for %v: %w", f, b.Ctx.Err())
	}
	return &TimeoutError{Fence: f, After: el}
}

// Ended reports whether the bound ends a wait that has lasted el since
// Start: its context is done, or el is past its timeout. Unlike Check it
// reads no clock and allocates nothing, for a spin that keeps its own.
func (b *Bound) Ended(el time.Duration) bool {
	return (Cancellable(b.Ctx) && b.Ctx.Err() != nil) || (b.Timeout > 0 && el > b.Timeout)
}

// Pinner is a timeline whose host wait for a ticket depends on when it is
// asked for: a stream records the event it waits on lazily, at its end at
// the time, so a wait asked for later may also wait for work submitted
// meanwhile, and that work may itself wait for the waiter (a host lane's
// function, which a later GPU op waits for on the device). Pin fixes now
// what a later WaitHost(t) waits for; unpin once the wait is done.
type Pinner interface {
	Pin(t uint64) (unpin func(), err error)
}

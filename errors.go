package rocsync

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/syncstate"
)

// Sentinel errors. Every error rocsync returns for bad input is an *Error
// whose Kind is one of these, so both errors.Is(err, rocsync.ErrShape) and
// errors.As(err, &e) work.
var (
	ErrShape          = errors.New("shape mismatch")
	ErrDType          = errors.New("dtype mismatch")
	ErrFreed          = errors.New("array already freed")
	ErrNilArray       = errors.New("nil array")
	ErrDeviceMismatch = errors.New("arrays on different devices")
	ErrClosed         = errors.New("closed")
	ErrUnavailable    = errors.New("backend unavailable")
	ErrInvalid        = errors.New("invalid argument")
	// ErrFault: work on the device failed (a kernel fault, a queue or
	// library error), or the op depends on work that did. The error wraps
	// the original failure, which errors.Is and errors.As find.
	ErrFault = errors.New("device work failed")
	// ErrTimeout: a host wait ran past Options.WaitTimeout (the error
	// wraps a *syncstate.TimeoutError naming the fence).
	ErrTimeout = syncstate.ErrWaitTimeout
	// ErrHostWait: sync-debug mode (SyncDebugFail) refused an implicit
	// host wait.
	ErrHostWait = errors.New("implicit host wait refused by sync-debug mode")
)

// Error is a failed rocsync call: which operation, what kind of failure,
// and the details.
type Error struct {
	Op     string // e.g. "Mul", "MatMul", "Free"
	Kind   error  // one of the Err* sentinels
	Detail string
	Err    error // an underlying cause, if any
}

func (e *Error) Error() string {
	s := "rocsync: " + e.Op + ": " + e.Kind.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

func newErr(op string, kind error, format string, args ...any) *Error {
	return &Error{Op: op, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

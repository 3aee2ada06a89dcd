package rocsync

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
)

// Sentinel errors. Every error rocsync returns for bad input is an *Error
// whose Kind is one of these, so both errors.Is(err, rocsync.ErrShape) and
// errors.As(err, &e) work.
var (
	// ErrShape: operands' shapes do not fit the op, or a dimension is
	// not positive.
	ErrShape = errors.New("shape mismatch")
	// ErrDType: operands' element types differ, or one is unsupported.
	ErrDType = errors.New("dtype mismatch")
	// ErrFreed: an array was used, or freed again, after Free.
	ErrFreed = errors.New("array already freed")
	// ErrNilArray: a nil *Array was passed.
	ErrNilArray = errors.New("nil array")
	// ErrDeviceMismatch: an array was used on a task of another device
	// (each Open makes a separate device, even of the same GPU).
	ErrDeviceMismatch = errors.New("arrays on different devices")
	// ErrClosed: the device, or the task, is closed.
	ErrClosed = errors.New("closed")
	// ErrUnavailable: the backend, or one of its calls, failed for a
	// reason other than those below (a library missing, a runtime error).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrOutOfMemory: device memory ran out (hipErrorOutOfMemory,
	// CUDA_ERROR_OUT_OF_MEMORY, HSA out of resources on allocation, the
	// emulator's MemoryPerDevice), after rocsync released what its cache
	// and freed arrays held. The error wraps the runtime's.
	ErrOutOfMemory = errors.New("out of device memory")
	// ErrInvalid: a bad argument or option (nil task or device, unknown
	// policy, a QueueSize that is not a power of two, ...).
	ErrInvalid = errors.New("invalid argument")
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
	// ErrRecording: a call that waits on the host (Synchronize, Download,
	// reading back an array the recording touches) inside Task.Record, a
	// Record inside another, or freeing a buffer a live Recording uses.
	ErrRecording = errors.New("not allowed while recording, or on what a recording uses")
	// ErrConcurrentUse: a Task (or a Recording, through its task) was
	// used by two goroutines at once. The error wraps a
	// *ConcurrentUseError naming both calls' ops.
	ErrConcurrentUse = errors.New("task used by two goroutines at once")
)

// Error is a failed rocsync call: which operation, what kind of failure,
// and the details.
type Error struct {
	Op     string // the function the user called, e.g. "Mul", "MatMul", "Free"
	Kind   error  // one of the Err* sentinels
	Detail string // what went wrong, naming the operands as the user wrote them
	Err    error  // an underlying cause, if any
}

// Error reads "rocsync: Op: kind: detail: cause".
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

// outOfMemory reports whether an allocation failed for want of device
// memory: the driver says so with the kind driver.ErrOutOfMemory.
func outOfMemory(err error) bool { return errors.Is(err, driver.ErrOutOfMemory) }

// asError makes err, returned by an exported function op, an *Error: an
// *Error is returned as it is, anything else (several errors joined, a
// runtime's error) is wrapped, its kind that of the first *Error inside
// it, or of the wait or call that failed.
func asError(op string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if errs := j.Unwrap(); len(errs) == 1 {
			return asError(op, errs[0]) // errors.Join of one error
		}
	}
	return &Error{Op: op, Kind: kindOf(err), Err: err}
}

// kindOf is the kind of the first *Error inside err, or else that of a
// failed wait (ErrTimeout or ErrFault).
func kindOf(err error) error {
	var inner *Error
	if errors.As(err, &inner) {
		return inner.Kind
	}
	return ownWaitKind(err)
}

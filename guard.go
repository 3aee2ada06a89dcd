package rocsync

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// A Task serves one goroutine at a time: its op under construction, its
// operands and its driver task (an HSA queue's ring, a stream's tickets)
// are not shared-safe. Each call that uses them marks the task in use for
// its duration with one compare-and-swap of the op's name (begin) and one
// store (end), so a call from a second goroutine that overlaps it fails at
// once with ErrConcurrentUse, naming both ops, instead of corrupting the
// first one's op or the queue. Uses that do not overlap are not errors
// (the atomics order them), and a Recording is used through its task.

// ErrConcurrentUse: a Task (or a Recording, through its task) was used by
// two goroutines at once. The error wraps a *ConcurrentUseError naming
// both calls' ops.
var ErrConcurrentUse = errors.New("task used by two goroutines at once")

// ConcurrentUseError names the two overlapping calls on one Task: Op, the
// call refused, and Other, the call already running on the task.
type ConcurrentUseError struct {
	Op, Other string
}

func (e *ConcurrentUseError) Error() string {
	return fmt.Sprintf("%s called while %s runs on the task in another goroutine: a Task serves one goroutine at a time (give each goroutine its own)", e.Op, e.Other)
}

// begin marks the task in use by op name, or fails with ErrConcurrentUse
// if another call is using it. end must follow, deferred, so that a panic
// ends the use too.
func (t *Task) begin(name string) error {
	if t.using.CompareAndSwap(nil, opTag(name)) {
		return nil
	}
	return t.concurrent(name)
}

// end ends the use begin marked.
func (t *Task) end() { t.using.Store(nil) }

// swapRec replaces the task's recorder, once no other call uses the task:
// Record must end its recording whatever another goroutine does.
func (t *Task) swapRec(r *recorder) *recorder {
	tag := opTag("Record")
	for !t.using.CompareAndSwap(nil, tag) {
		runtime.Gosched()
	}
	old := t.rec
	t.rec = r
	t.end()
	return old
}

// concurrent is the error of a call name that found the task in use.
func (t *Task) concurrent(name string) error {
	other := "an op"
	if p := t.using.Load(); p != nil {
		other = *p
	}
	ce := &ConcurrentUseError{Op: name, Other: other}
	return &Error{Op: name, Kind: ErrConcurrentUse, Detail: ce.Error(), Err: ce}
}

// opTags interns op names for begin: a fixed open-addressed table of
// immutable strings, found by the address and length of the name's bytes
// (op names are constants, so a lookup costs a hash, a load and a pointer
// comparison). A name that finds no room shares the tag of anyOp.
var opTags [256]atomic.Pointer[string]

var anyOp = "an op"

func opTag(name string) *string {
	h := (uint64(uintptr(unsafe.Pointer(unsafe.StringData(name)))) ^ uint64(len(name))) * 0x9E3779B97F4A7C15 >> 56
	for i := uint64(0); i < 8; i++ {
		e := &opTags[(h+i)%uint64(len(opTags))]
		p := e.Load()
		if p == nil {
			np := new(string)
			*np = name
			if e.CompareAndSwap(nil, np) {
				return np
			}
			p = e.Load()
		}
		if unsafe.StringData(*p) == unsafe.StringData(name) && len(*p) == len(name) || *p == name {
			return p
		}
	}
	return &anyOp
}

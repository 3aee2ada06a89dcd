package rocsync

import (
	"fmt"
	"runtime"
	"sync"
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

// ConcurrentUseError names the two overlapping calls on one Task: Op, the
// call refused, and Other, the call already running on the task.
type ConcurrentUseError struct {
	// Op is the call refused.
	Op string
	// Other is the call that was running on the task.
	Other string
}

// Error names both calls and the rule.
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
	return &Error{Op: name, Kind: ErrConcurrentUse, Err: ce}
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

// A host function runs on its task's host lane, one goroutine per lane
// for the lane's life. A host wait made from it for its own task's work
// (Synchronize, a read-back of what it writes, Close) would wait for the
// function itself, and rocsync's waits are refused there at once
// (fromHostFunc). The check costs nothing while no host function runs
// anywhere; otherwise it reads the calling goroutine's id, once per wait
// that would block.
var (
	hostFuncsRunning atomic.Int32
	laneGoroutines   sync.Map // goroutine id of a host lane → *Task
)

// runHostFunc runs fn, a host function of t, on t's lane.
func (t *Task) runHostFunc(fn func(*HostAccess) error, h *HostAccess) error {
	if t.laneG.Load() == 0 {
		g := goid()
		laneGoroutines.Store(g, t)
		t.laneG.Store(g)
	}
	hostFuncsRunning.Add(1)
	defer hostFuncsRunning.Add(-1)
	return fn(h)
}

// forgetLane drops t's lane from laneGoroutines; t's driver task is
// released.
func (t *Task) forgetLane() {
	if g := t.laneG.Load(); g != 0 {
		laneGoroutines.Delete(g)
	}
}

// fromHostFunc is the error of a host wait (op) made from inside a host
// function, nil elsewhere.
func fromHostFunc(op string) error {
	if hostFuncsRunning.Load() == 0 {
		return nil
	}
	v, ok := laneGoroutines.Load(goid())
	if !ok {
		return nil
	}
	return newErr(op, ErrInvalid, "called from a host function of %v's task: a host wait there waits for the function itself, or for work behind it (a host function reaches its operands through its HostAccess only)", v.(*Task).dev)
}

// goid is the calling goroutine's id, from the first line of its stack
// trace ("goroutine 42 [running]:").
func goid() uint64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	const prefix = "goroutine "
	var id uint64
	for _, c := range buf[min(len(prefix), n):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

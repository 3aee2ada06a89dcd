package rocsync

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/internal/goid"
	"github.com/rocsync/rocsync/syncstate"
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
		if t.rec == nil {
			return nil
		}
		return t.beginRecording(name)
	}
	return t.concurrent(name)
}

// beginRecording admits a call on a task that Record is recording only
// from Record's own goroutine: its function's ops are recorded, and an op
// from another goroutine would land in the recording silently, never run
// and be replayed with it.
func (t *Task) beginRecording(name string) error {
	if goid.ID() == t.rec.g {
		return nil
	}
	t.end()
	ce := &ConcurrentUseError{Op: name, Other: "Record"}
	return &Error{Op: name, Kind: ErrConcurrentUse, Err: ce}
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
		g := goid.ID()
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
	v, ok := laneGoroutines.Load(goid.ID())
	if !ok {
		return nil
	}
	return newErr(op, ErrInvalid, "called from a host function of %v's task: a host wait there waits for the function itself, or for work behind it (a host function reaches its operands through its HostAccess only)", v.(*Task).dev)
}

// guardShards is how many counters closeGuard spreads its readers over:
// shard 0 for calls on the device itself, the rest for tasks in turn
// (Task.shard). It is the device counters' shard count, so that a task's
// shard is one index for both.
const guardShards = syncstate.StatShards

var _ = [1]struct{}{}[guardShards&(guardShards-1)] // a power of two (reader masks)

// closeGuard is the device's close guard: every op holds it for reading,
// Close for writing. It is sync.RWMutex's contract without its one
// reader count, which every op of every task would increment and
// decrement on a single cache line, so that tasks submitting from
// several cores waited on one another (golang/go#17973). Readers count in
// the shard they are given, each on cache lines of its own, with
// RWMutex's own scheme per shard: the writer subtracts guardBias from
// every shard, so a reader whose increment leaves its shard negative
// knows a writer holds or wants the guard, steps back and waits for it;
// the writer waits until each shard holds only its bias. Read locks must
// not nest, as with sync.RWMutex while a writer waits.
type closeGuard struct {
	writer  sync.Mutex   // held by the writer from lock to unlock
	waiting atomic.Int32 // readers waiting for the writer (for tests)
	_       [128]byte    // keeps shard 0 off the lines above
	readers [guardShards]struct {
		n atomic.Int32
		_ [124]byte // a shard per pair of 64-byte lines (adjacent-line prefetch)
	}
}

// guardBias is what the writer subtracts from every shard: more than
// readers could ever add.
const guardBias = 1 << 30

// reader is shard's count.
func (g *closeGuard) reader(shard int) *atomic.Int32 {
	return &g.readers[shard&(guardShards-1)].n
}

// tryRLock takes the guard for reading in shard with one atomic add
// (inlined into Device.enterShard): false when a writer holds or wants the
// guard, and then the caller must finish with rlockSlow.
func (g *closeGuard) tryRLock(shard int) bool { return g.reader(shard).Add(1) >= 0 }

// rlockSlow is tryRLock's wait for a writer: the reader counted in shard
// steps back and waits for the writer's unlock, as a reader of
// sync.RWMutex waits behind a pending writer, then counts itself in again.
func (g *closeGuard) rlockSlow(shard int) {
	r := g.reader(shard)
	for {
		r.Add(-1)
		g.waiting.Add(1)
		g.writer.Lock()
		//lint:ignore SA2001 the writer's lock is only waited for
		g.writer.Unlock()
		g.waiting.Add(-1)
		if r.Add(1) >= 0 {
			return
		}
	}
}

// runlock ends a read lock of shard.
func (g *closeGuard) runlock(shard int) { g.reader(shard).Add(-1) }

// lock takes the guard for writing, once every reader has left; readers
// that come meanwhile wait for unlock.
func (g *closeGuard) lock() {
	g.writer.Lock()
	for i := range g.readers {
		g.readers[i].n.Add(-guardBias)
	}
	for i := range g.readers {
		for spin := 0; g.readers[i].n.Load() != -guardBias; spin++ {
			if spin < 64 {
				runtime.Gosched()
				continue
			}
			// A reader in a long call (a host wait): sleep, not spin.
			time.Sleep(time.Duration(min(spin-63, 100)) * 10 * time.Microsecond)
		}
	}
}

// unlock ends lock.
func (g *closeGuard) unlock() {
	for i := range g.readers {
		g.readers[i].n.Add(guardBias)
	}
	g.writer.Unlock()
}

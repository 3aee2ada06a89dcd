package syncstate

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rocsync/rocsync/internal/testhooks"
)

// MaxOperands is the most arrays one op may touch.
const MaxOperands = 8

// maxDeps bounds the distinct producer timelines of one op: each operand
// contributes its writer and one reader per timeline.
const maxDeps = 16

var stateIDs atomic.Uint64

// State is the sync record of one array: the fence of its last writer and,
// per timeline, the fence of its newest reader since that write.
//
// Readers are cleared by every write, so any reader present is ordered
// after the current writer.
type State struct {
	mu       sync.Mutex
	id       uint64 // lock order across the operands of one op
	writer   Fence
	writerOp string // the name of the op that wrote it, for errors
	// err poisons the array: an op that was to write it failed before it
	// ran, so its contents are not what the program says. The next
	// complete write clears it.
	err error
	// writtenOutside says the contents were last written outside every
	// timeline: by the host itself (a synchronous copy into a new array,
	// MarkHostWritten), or by foreign work the writer only waited for
	// (Op.ForeignWrites). An Acquirer's op that uses them asks for a
	// system-scope acquire. The next write clears it.
	writtenOutside bool
	readers        []Fence
	// inline holds the first readers, so that a State embedded in its
	// array needs no allocation of its own in the common case (one or
	// two timelines reading).
	inline [2]Fence
	// grp is the Group of the replayed op the State is an operand of, if
	// any; gwrite says whether that op writes it, gidx which member of
	// the group it is, epoch how many of the group's replays the fields
	// above have taken (see Group).
	grp    *Group
	gwrite bool
	gidx   int32
	epoch  uint64
}

// NewState returns an empty State.
func NewState() *State {
	s := new(State)
	s.Init()
	return s
}

// Init prepares a State embedded in another value; call it once, before
// any other method.
func (s *State) Init() {
	s.id = stateIDs.Add(1)
	s.readers = s.inline[:0]
}

// Writer returns the current writer fence.
func (s *State) Writer() Fence {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fold(false, 0)
	return s.writer
}

// PendingFences appends the writer and reader fences not yet known complete.
func (s *State) PendingFences(dst []Fence) []Fence {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fold(false, 0)
	return s.pendingLocked(dst)
}

func (s *State) pendingLocked(dst []Fence) []Fence {
	if !s.writer.Done() {
		dst = append(dst, s.writer)
	}
	for _, r := range s.readers {
		if !r.Done() {
			dst = append(dst, r)
		}
	}
	return dst
}

// PendingCount is the number of pending fences (for tests and stats).
func (s *State) PendingCount() int {
	var buf [maxDeps]Fence
	return len(s.PendingFences(buf[:0]))
}

// Lock and Unlock let the host take an array for itself (read-back, free):
// no op can commit on it in between, nor a replay of its group run.
func (s *State) Lock() {
	s.mu.Lock()
	s.fold(false, 1)
}

// Unlock ends Lock.
func (s *State) Unlock() {
	if g := s.grp; g != nil {
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}
	s.mu.Unlock()
}

// WriterLocked returns the writer while the caller holds the lock.
func (s *State) WriterLocked() Fence { return s.writer }

// PendingLocked is PendingFences for a caller that holds the lock.
func (s *State) PendingLocked(dst []Fence) []Fence { return s.pendingLocked(dst) }

func (s *State) recordRead(f Fence) {
	for i := range s.readers {
		if s.readers[i].TL == f.TL {
			s.readers[i] = f
			return
		}
	}
	// Drop completed readers before growing, so the slice stays as long
	// as the number of timelines with reads in flight.
	kept := s.readers[:0]
	for _, r := range s.readers {
		if !r.Done() {
			kept = append(kept, r)
		}
	}
	s.readers = append(kept, f)
}

// MarkHostWritten records that the host has written the contents itself,
// outside any timeline (a synchronous copy into an array no op has used
// yet): an Acquirer's op that uses it first asks for a system-scope acquire.
func (s *State) MarkHostWritten() {
	s.mu.Lock()
	s.writtenOutside = true
	s.mu.Unlock()
}

func (s *State) recordWrite(f Fence, op string) {
	s.writer = f
	s.writerOp = op
	s.err = nil
	s.writtenOutside = false
	clear(s.readers)
	s.readers = s.readers[:0]
}

// ErrTooManyOperands is returned when an op names more than MaxOperands arrays.
var ErrTooManyOperands = errors.New("syncstate: too many operands")

type access struct {
	s     *State
	write bool
	read  bool
}

// DependencyError is the error of an op that was not submitted because
// work it depends on failed. errors.Is and errors.As see the original
// failure through it.
type DependencyError struct {
	Fence    Fence  // the failed fence
	WriterOp string // the op at Fence, when it wrote the array
	Err      error  // its failure
}

func (e *DependencyError) Error() string {
	if e.WriterOp != "" {
		return fmt.Sprintf("depends on %s at %v, which failed: %v", e.WriterOp, e.Fence, e.Err)
	}
	return fmt.Sprintf("depends on %v, which failed: %v", e.Fence, e.Err)
}

func (e *DependencyError) Unwrap() error { return e.Err }

// PoisonLocked is the array's failure: the error of a failed op that wrote
// it (or was to), nil if its contents are sound as far as is known. The
// caller holds the lock.
func (s *State) PoisonLocked() error {
	if s.err != nil {
		return s.err
	}
	if err := s.writer.Err(); err != nil {
		return &DependencyError{Fence: s.writer, WriterOp: s.writerOp, Err: err}
	}
	return nil
}

// Poison is PoisonLocked for a caller that does not hold the lock.
func (s *State) Poison() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fold(false, 0)
	return s.PoisonLocked()
}

// Op orders one op on a timeline against earlier work on its operands. Use
// it as a value on the stack:
//
//	var op syncstate.Op
//	op.Read(a); op.Read(b); op.Write(out)
//	if err := op.Begin(engine, q); err != nil { ... }
//	ticket, err := submit()
//	op.Commit(ticket) // or op.Abort() if submit failed
//
// Begin locks the operands (in a global order, so ops never deadlock),
// waits for what the op must follow, and Commit records the op's fence.
type Op struct {
	// Name names the op in the arrays it writes, for errors.
	Name string
	// ForeignWrites says that what the op writes is written by work
	// outside every timeline, which the op only waits for (a foreign
	// signal's): Commit records the op as the writer and marks the
	// contents as MarkHostWritten does, so that an Acquirer's op that
	// uses them asks for a system-scope acquire, on any timeline.
	ForeignWrites bool
	acc           [MaxOperands]access
	n             int
	tooMny        bool
	locked        bool
	e             *Engine
	tl            Timeline
}

// Read adds an operand the op reads.
func (o *Op) Read(s *State) { o.add(s, false) }

// Write adds an operand the op writes.
func (o *Op) Write(s *State) { o.add(s, true) }

// add merges aliases: an array that is both read and written is one write
// operand, so y = f(x, x) and x = x*x record one fence, not two.
func (o *Op) add(s *State, write bool) {
	for i := 0; i < o.n; i++ {
		if o.acc[i].s == s {
			o.acc[i].write = o.acc[i].write || write
			o.acc[i].read = o.acc[i].read || !write
			return
		}
	}
	if o.n == MaxOperands {
		o.tooMny = true
		return
	}
	o.acc[o.n] = access{s: s, write: write, read: !write}
	o.n++
}

// Engine applies a policy and counts what it does.
type Engine struct {
	Policy Policy
	// Test are the engine's test switches (docs/testing.md).
	Test testhooks.Engine
	// OnHostWait, if set, is told of every host wait the engine is about
	// to make (op names the op, consumer its timeline, f what it waits
	// for); an error refuses the wait, and the op fails with it
	// (sync-debug mode).
	OnHostWait func(op string, consumer Timeline, f Fence, r Reason) error
	// Observer, if set, is told of every decision (see Observer).
	Observer Observer
}

// decided tells the observer, if any, of one decision.
func (e *Engine) decided(op string, consumer Timeline, f Fence, d Decision, r Reason) {
	if e.Observer != nil {
		e.Observer.Decided(op, consumer, f, d, r)
	}
}

// waited tells a WaitObserver, if the observer is one, that a host wait
// it heard of has ended. Only host waits pay for the type assertion.
func (e *Engine) waited(consumer Timeline, f Fence, err error) {
	if w, ok := e.Observer.(WaitObserver); ok {
		w.HostWaitEnded(consumer, f, err)
	}
}

var depBufs = sync.Pool{New: func() any { return new([maxDeps]Fence) }}

// depSet collapses fences to the newest one per timeline.
type depSet struct {
	f [maxDeps]Fence
	n int
}

func (d *depSet) add(f Fence) bool {
	for i := 0; i < d.n; i++ {
		if d.f[i].TL == f.TL {
			if f.Ticket > d.f[i].Ticket {
				d.f[i].Ticket = f.Ticket
			}
			return true
		}
	}
	if d.n == maxDeps {
		return false
	}
	d.f[d.n] = f
	d.n++
	return true
}

// Begin locks the operands and orders the op after everything it must
// follow on timeline tl. On error the operands are unlocked.
func (o *Op) Begin(e *Engine, tl Timeline, sinks Sinks) error {
	if o.tooMny {
		return fmt.Errorf("%w: an op may touch at most %d arrays", ErrTooManyOperands, MaxOperands)
	}
	o.e, o.tl = e, tl
	o.lock()
	return o.order(e, tl, sinks)
}

// BeginLocked is Begin for an op whose operands LockAll locked.
func (o *Op) BeginLocked(e *Engine, tl Timeline, sinks Sinks) error {
	if !o.locked {
		return errors.New("syncstate: BeginLocked of an op LockAll did not lock")
	}
	o.e, o.tl = e, tl
	return o.order(e, tl, sinks)
}

// LockAll locks the operands of several ops, which are to be submitted
// together, in the one global order every op locks in (so they never
// deadlock with other ops, whatever their operands), for BeginLocked.
// The ops' operands must be distinct. An op with too many operands is an
// error, and then nothing is locked.
func LockAll(ops ...*Op) error {
	n := 0
	for _, o := range ops {
		if o.tooMny {
			return fmt.Errorf("%w: an op may touch at most %d arrays", ErrTooManyOperands, MaxOperands)
		}
		n += o.n
	}
	all := make([]*State, 0, n)
	for _, o := range ops {
		for i := 0; i < o.n; i++ {
			all = append(all, o.acc[i].s)
		}
	}
	slices.SortFunc(all, func(a, b *State) int { return cmp.Compare(a.id, b.id) })
	for _, s := range all {
		s.mu.Lock()
	}
	for _, s := range all {
		if s.grp != nil {
			s.fold(true, 0)
		}
	}
	for _, o := range ops {
		o.locked = true
	}
	return nil
}

// order is Begin once the operands are locked.
func (o *Op) order(e *Engine, tl Timeline, sinks Sinks) error {
	acquire := o.needsAcquire(tl)
	if e.Test.DisableWaits {
		// Not even a completion poll, which would let the host observe
		// the producer and order the op after it.
		if acquire != nil {
			acquire.AcquireSystem()
		}
		return nil
	}
	// Errors travel with fences: an op whose input is poisoned, or that
	// must follow work that failed and may still run, fails here and is
	// not submitted; what it was to write is poisoned in turn.
	if err := o.failedDependency(); err != nil {
		o.poison(err)
		o.unlock()
		return err
	}
	var deps depSet
	var skipped uint64
	var waitErr error
	foundFailed := false
	consider := func(f Fence) {
		switch {
		case f.TL == nil:
		case e.Test.DisableCrossDeviceWaits && CrossDevice(tl, f.TL):
			// Not even a completion poll (see Test.DisableWaits).
		case f.TL == tl:
			skipped++ // in-order execution on tl already orders it
			e.decided(o.Name, tl, f, SkipSameTimeline, 0)
		case f.Ticket <= f.TL.Completed():
			skipped++
			e.decided(o.Name, tl, f, SkipComplete, 0)
			// Asking may have just taught the producer's timeline that
			// the fence failed (a stream learns its fault from the
			// event it queries): the inputs are checked again below.
			foundFailed = foundFailed || f.Err() != nil
		case !deps.add(f):
			// More producer timelines than one op tracks: the excess
			// are waited for on the host, which is always correct.
			if waitErr == nil {
				waitErr = e.hostWait(o.Name, tl, f, sinks)
			}
		}
	}
	for i := 0; i < o.n; i++ {
		a := &o.acc[i]
		if a.write {
			// Write after write and write after read.
			consider(a.s.writer)
			for _, r := range a.s.readers {
				consider(r)
			}
			continue
		}
		// A reader already on tl was ordered after the writer when it
		// was recorded, so this read is too.
		if readerOn(a.s, tl) {
			if !a.s.writer.IsZero() {
				skipped++
				e.decided(o.Name, tl, a.s.writer, SkipSameTimeline, 0)
			}
			continue
		}
		consider(a.s.writer)
	}
	sinks.Skipped(skipped)
	if foundFailed {
		// A failed producer that is complete will not run, so there is
		// nothing to wait for; but an op that reads what it was to write
		// must fail, not run on what it left (a complete failed writer
		// or reader of an output is fine: the op overwrites it).
		if err := o.failedDependency(); err != nil {
			o.poison(err)
			o.unlock()
			return err
		}
	}
	if waitErr == nil {
		waitErr = e.resolve(o.Name, tl, deps.f[:deps.n], sinks)
	}
	if waitErr != nil {
		// The op will not run: what it was to write no longer holds
		// what the program says, unless the wait was only refused or
		// ended on its own (the arrays then hold what they held before
		// the op).
		if !errors.Is(waitErr, ErrWaitRefused) && !endedOnItsOwn(waitErr) {
			o.poison(waitErr)
		}
		o.unlock()
		return waitErr
	}
	if acquire != nil {
		// After the waits: the op's packet, or an earlier one of the
		// timeline, acquires once what it waits for is done.
		acquire.AcquireSystem()
	}
	if e.Policy == WaitAlways && e.OnHostWait != nil {
		// Commit's wait for the op is certain: asked now, before the op
		// is submitted, so that a refusal leaves nothing submitted.
		f := Fence{TL: tl, Ticket: tl.LastTicket() + 1}
		if err := e.OnHostWait(o.Name, tl, f, ReasonWaitAlways); err != nil {
			o.unlock()
			return err
		}
	}
	return nil
}

// endedOnItsOwn reports whether err is a host wait's own end (its
// timeout, its context): a *WaitEndedError itself, not one that a
// failure's cause wraps.
func endedOnItsOwn(err error) bool {
	_, ok := err.(*WaitEndedError)
	return ok
}

// ErrWaitRefused is wrapped by an OnHostWait error that refuses a wait:
// the op fails without poisoning what it was to write.
var ErrWaitRefused = errors.New("syncstate: host wait refused")

// failedDependency returns the failure the op depends on: a poisoned or
// failed input, or a failed write or read of an output that has not
// completed (it may still touch the memory). The caller holds the locks.
func (o *Op) failedDependency() error {
	for i := 0; i < o.n; i++ {
		a := &o.acc[i]
		if a.read {
			if err := a.s.PoisonLocked(); err != nil {
				return err
			}
		}
		if !a.write {
			continue
		}
		if err := a.s.writer.Err(); err != nil && !a.s.writer.Done() {
			return &DependencyError{Fence: a.s.writer, WriterOp: a.s.writerOp, Err: err}
		}
		for _, r := range a.s.readers {
			if err := r.Err(); err != nil && !r.Done() {
				return &DependencyError{Fence: r, Err: err}
			}
		}
	}
	return nil
}

// poison marks what the op writes as failed with err.
func (o *Op) poison(err error) {
	for i := 0; i < o.n; i++ {
		if o.acc[i].write {
			o.acc[i].s.err = err
		}
	}
}

// Fail unlocks the operands after the op could not be submitted, poisoning
// what it was to write: the arrays no longer hold what the program says.
func (o *Op) Fail(err error) {
	if o.locked {
		o.poison(err)
	}
	o.unlock()
}

// needsAcquire returns tl as an Acquirer when the op needs a system-scope
// acquire on it (see Acquirer), nil otherwise.
func (o *Op) needsAcquire(tl Timeline) Acquirer {
	acq, ok := tl.(Acquirer)
	if !ok {
		return nil
	}
	for i := 0; i < o.n; i++ {
		s := o.acc[i].s
		if readerOn(s, tl) {
			continue // tl read it since its last write, and acquired then
		}
		if w := s.writer.TL; s.writtenOutside || (w != nil && w != tl && !acq.SharesWritesOf(w)) {
			return acq
		}
	}
	return nil
}

func readerOn(s *State, tl Timeline) bool {
	for _, r := range s.readers {
		if r.TL == tl {
			return true
		}
	}
	return false
}

// resolve emits the waits for deps: on the device where the policy and the
// consumer allow, otherwise on the host.
func (e *Engine) resolve(op string, tl Timeline, deps []Fence, sinks Sinks) error {
	if len(deps) == 0 || e.Test.DisableWaits {
		return nil
	}
	// The device-side list goes through an interface call, where Go's
	// escape analysis gives up; a pooled buffer keeps this allocation-free.
	buf := depBufs.Get().(*[maxDeps]Fence)
	defer func() { clear(buf[:]); depBufs.Put(buf) }()
	dev := buf
	nd := 0
	for _, f := range deps {
		pd := f.TL.Domain()
		if CrossDevice(tl, f.TL) {
			// Another device's work: events and signals reach across
			// devices, where the consumer says its runtime allows it.
			if e.Policy.deviceWaitAllowed(tl.Domain(), pd) && tl.(Placed).CanWaitPeer(pd) {
				dev[nd] = f
				nd++
				continue
			}
		} else if e.Policy.deviceWaitAllowed(tl.Domain(), pd) && tl.CanWaitDevice(pd) {
			dev[nd] = f
			nd++
			continue
		}
		if err := e.hostWait(op, tl, f, sinks); err != nil {
			return err
		}
	}
	if nd > 0 {
		if err := tl.WaitDevice(dev[:nd]); err != nil {
			return err
		}
		sinks.DeviceWait(uint64(nd))
		if e.Observer != nil {
			for _, f := range dev[:nd] {
				e.Observer.Decided(op, tl, f, DeviceWait, 0)
			}
		}
	}
	return nil
}

func (e *Engine) hostWait(op string, tl Timeline, f Fence, sinks Sinks) error {
	if e.Test.DisableWaits {
		return nil
	}
	r := ReasonCrossQueue
	switch {
	case CrossDevice(tl, f.TL):
		r = ReasonCrossDevice
	case f.TL.Domain() != tl.Domain():
		r = ReasonBoundary
	}
	if e.OnHostWait != nil {
		if err := e.OnHostWait(op, tl, f, r); err != nil {
			return err
		}
	}
	sinks.HostWait(r)
	e.decided(op, tl, f, HostWait, r)
	err := f.TL.WaitHost(f.Ticket)
	e.waited(tl, f, err)
	return WaitError(f, err)
}

// WaitEndedError is a host wait that ended before the work it waited for
// did, without that work failing: it ran past its timeout or its context
// ended. An op whose ordering wait ended so is not submitted, and what it
// was to write is not poisoned: it holds what it held before the op.
type WaitEndedError struct {
	Fence Fence // what the wait was for
	Err   error // why it ended (a *TimeoutError, a context's error)
}

func (e *WaitEndedError) Error() string { return fmt.Sprintf("waiting for %v: %v", e.Fence, e.Err) }

func (e *WaitEndedError) Unwrap() error { return e.Err }

// WaitError classifies the error of a host wait for f by where it arose,
// never by what it wraps: when f's timeline records f as failed, the work
// failed (a *DependencyError, whatever its error wraps: a host function's
// error may wrap a timeout); otherwise the wait ended on its own (a
// *WaitEndedError). nil stays nil.
func WaitError(f Fence, err error) error {
	if err == nil {
		return nil
	}
	if f.Err() != nil {
		return &DependencyError{Fence: f, Err: err}
	}
	return &WaitEndedError{Fence: f, Err: err}
}

// Commit records the op, submitted as ticket on the Begin timeline, on its
// operands and unlocks them. Under WaitAlways it then waits for the op.
func (o *Op) Commit(ticket uint64, sinks Sinks) error {
	f := o.record(ticket)
	o.unlock()
	return o.e.waitAlways(o.Name, f, sinks)
}

// record records the op, submitted as ticket on the Begin timeline, on
// its operands (which stay locked) and returns its fence.
func (o *Op) record(ticket uint64) Fence {
	f := Fence{TL: o.tl, Ticket: ticket}
	for i := 0; i < o.n; i++ {
		if o.acc[i].write {
			o.acc[i].s.recordWrite(f, o.Name)
			o.acc[i].s.writtenOutside = o.ForeignWrites
		} else {
			o.acc[i].s.recordRead(f)
		}
	}
	return f
}

// waitAlways is WaitAlways' host wait for f, the fence of op name just
// recorded; other policies do nothing. OnHostWait allowed the wait in
// Begin (a replay that skips Begin runs only without OnHostWait).
func (e *Engine) waitAlways(name string, f Fence, sinks Sinks) error {
	if e.Policy != WaitAlways || e.Test.DisableWaits {
		return nil
	}
	sinks.HostWait(ReasonWaitAlways)
	e.decided(name, f.TL, f, HostWait, ReasonWaitAlways)
	err := f.TL.WaitHost(f.Ticket)
	e.waited(f.TL, f, err)
	return err
}

// CommitFailed records the op, submitted as ticket on the Begin timeline,
// on its operands as Commit does, poisons what it writes with err, and
// unlocks them: for an op whose work may have reached the timeline and
// failed there (a collective of a group whose launch failed). Later ops
// are ordered after the ticket; those that read what it wrote fail.
func (o *Op) CommitFailed(ticket uint64, err error) {
	o.record(ticket)
	o.poison(err)
	o.unlock()
}

// Abort unlocks the operands without recording anything.
func (o *Op) Abort() { o.unlock() }

func (o *Op) lock() {
	// Insertion sort by id: at most MaxOperands entries.
	for i := 1; i < o.n; i++ {
		for j := i; j > 0 && o.acc[j].s.id < o.acc[j-1].s.id; j-- {
			o.acc[j], o.acc[j-1] = o.acc[j-1], o.acc[j]
		}
	}
	for i := 0; i < o.n; i++ {
		o.acc[i].s.mu.Lock()
	}
	for i := 0; i < o.n; i++ {
		if o.acc[i].s.grp != nil {
			o.acc[i].s.fold(true, 0)
		}
	}
	o.locked = true
}

func (o *Op) unlock() {
	if !o.locked {
		return
	}
	for i := o.n - 1; i >= 0; i-- {
		o.acc[i].s.mu.Unlock()
	}
	o.locked = false
}

// ReadersLocked is the number of reader fences, for a caller that holds the lock.
func (s *State) ReadersLocked() int { return len(s.readers) }

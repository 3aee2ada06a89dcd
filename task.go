package rocsync

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/userkernel"
)

// Task is the task-local state of the design: on ROCm one HSA queue
// for rocsync's kernels, one HIP stream, and a rocBLAS handle bound to that
// stream. Ops submitted through a task run in order; a Task serves one
// goroutine at a time (give each goroutine its own): a call made while
// another goroutine's call runs on it fails with ErrConcurrentUse.
type Task struct {
	dev   *Device
	drv   driver.Task
	stats syncstate.Stats
	sinks syncstate.Sinks
	// shard is the task's shard of the device's close guard and counters,
	// which its ops use, so that tasks on different cores share no cache
	// line there.
	shard  int
	err    error // set when the default task could not be made
	closed atomic.Bool
	// using is the name of the op a call is running on the task, nil
	// while none is (guard.go).
	using atomic.Pointer[string]
	// laneG is the goroutine id of the task's host lane, once it has run
	// a host function (guard.go).
	laneG atomic.Uint64
	// lifeMu orders draining (Synchronize, Device.Synchronize) with
	// releasing the driver task (Close); released is set under it.
	lifeMu   sync.Mutex
	released bool

	// The op being submitted and its operands: owned by the task (which
	// serves one goroutine), so that an op passed to the driver through
	// its interface costs no allocation.
	ops      taskOps
	operands [syncstate.MaxOperands]access
	kargs    [maxKernelArgs]userkernel.Arg
	// lanes caches drv.Timeline per lane (a driver task's timelines are
	// fixed for its life), saving an interface call per op.
	lanes [driver.LaneHost + 1]syncstate.Timeline

	traceHost int // the task's host track in a trace

	rec *recorder // set while Record runs: ops are recorded, not submitted (record.go)
	// traceBegan and traceIssued are when the op being submitted began and
	// went to the driver, while tracing: fields, not locals, so that the
	// untraced path keeps no trace state live across its calls.
	traceBegan, traceIssued time.Duration
}

// access is one Operand of an op: a buffer and how the op uses it.
type access struct {
	b      *buffer
	who    Operand
	access Access
}

// Stats returns the task's counters (zero for a nil task).
func (t *Task) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	return statsOf(t.stats.Snapshot())
}

// Device returns the task's device.
func (t *Task) Device() *Device {
	if t == nil {
		return nil
	}
	return t.dev
}

// Synchronize waits on the host for all work the task submitted. It
// returns an ErrFault error if any of that work failed (and keeps
// returning it: the task's queue or stream is broken), and an ErrTimeout
// error past Options.WaitTimeout.
func (t *Task) Synchronize() error { return t.SynchronizeContext(context.Background()) }

// SynchronizeContext is Synchronize that also returns when ctx is done,
// with an error that wraps ctx's. It cancels the wait, not the GPU work.
func (t *Task) SynchronizeContext(ctx context.Context) error {
	if err := t.check("Synchronize"); err != nil {
		return err
	}
	if err := fromHostFunc("Synchronize"); err != nil {
		return err // it would wait for the function itself
	}
	if err := t.begin("Synchronize"); err != nil {
		return err
	}
	defer t.end()
	if t.rec != nil {
		return newErr("Synchronize", ErrRecording, "inside Task.Record: the recorded ops have not run")
	}
	if err := t.dev.enter("Synchronize"); err != nil {
		return err
	}
	defer t.dev.leave()
	t.lifeMu.Lock()
	var err error
	if t.released {
		err = newErr("Synchronize", ErrClosed, "task is closed")
	} else {
		err = t.drain(ctx)
	}
	t.lifeMu.Unlock()
	return asError("Synchronize", errors.Join(err, t.dev.frees.poll(t.dev, false, true)))
}

// drain host-waits for the task's timelines (one wait each, counted as a
// sync wait, only where work is pending): the host lane first, since its
// functions may be what the GPU work behind them waits for.
func (t *Task) drain(ctx context.Context) error {
	err := t.drainOne(ctx, t.hostLane())
	k, l := t.drv.Timeline(driver.LaneKernel), t.drv.Timeline(driver.LaneLibrary)
	err = errors.Join(err, t.drainOne(ctx, k))
	if l != k {
		err = errors.Join(err, t.drainOne(ctx, l))
	}
	return err
}

func (t *Task) drainOne(ctx context.Context, tl syncstate.Timeline) error {
	last := tl.LastTicket()
	if tl.Completed() >= last {
		return faultIn("Synchronize", syncstate.Fence{TL: tl, Ticket: last}, tl.Failed(last))
	}
	if err := fromHostFunc("Synchronize"); err != nil {
		return err
	}
	t.sinks.HostWait(ReasonSync)
	tw := t.dev.obs.waitBegin("Synchronize", syncstate.Fence{TL: tl, Ticket: last}, ReasonSync, t.traceHost)
	f := syncstate.Fence{TL: tl, Ticket: last}
	err := syncstate.WaitHostContext(ctx, f)
	t.dev.obs.waitEnd(tw, err)
	return faultIn("Synchronize", f, err)
}

// faultIn wraps the error of a host wait for f, naming the timeline, with
// the kind waitKind gives it. The cause is wrapped even when it is an
// *Error of rocsync's own (a host function may return one): its kind is
// the work's, not the wait's.
func faultIn(op string, f syncstate.Fence, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Kind: waitKind(f, err), Detail: "waiting for " + f.TL.Name(), Err: err}
}

// waitKind classifies the error of a host wait for f by where it arose,
// never by what it wraps: when f's timeline records f as failed, the work
// failed (ErrFault), whatever its error wraps (a host function's error
// may wrap a timeout or a context's end); otherwise the wait ended on its
// own, past its timeout or when its context ended (ErrTimeout). A wait
// that ended for another reason (a lane closed under it) is ErrFault.
func waitKind(f syncstate.Fence, err error) error {
	if f.TL != nil && f.Err() != nil {
		return ErrFault
	}
	return ownWaitKind(err)
}

// ownWaitKind is the kind of an error that a wait returned while the work
// it waited for had not failed.
func ownWaitKind(err error) error {
	if errors.Is(err, syncstate.ErrSelfWait) {
		return ErrInvalid // a host function waited for its own lane
	}
	if errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return ErrFault
}

// unsubmitted is the error of op name, whose driver Submit on tl failed
// with err, when err says that nothing was enqueued (ok): the caller then
// aborts the op, which changes nothing. Such an err is a sync-debug
// refusal of a throttle wait (returned as op name's: the drivers' throttle
// hook, Config.OnThrottle, cannot know the op and says "submit"), one of
// the waits a driver makes before it enqueues, ended on its own (a
// *syncstate.WaitEndedError from awaitHostDeps, a *syncstate.TimeoutError
// from a throttle, a host function's wait for its own lane), or a
// handshake's foreign stream refused by the runtime (ErrInvalid). Only
// the error itself counts, not one its chain wraps: a library call's
// function may return an error that wraps a wait of its own after
// enqueueing work.
func unsubmitted(name string, tl syncstate.Timeline, err error) (error, bool) {
	if errors.Is(err, syncstate.ErrWaitRefused) {
		if e, ok := err.(*Error); ok && e.Op != name {
			out := *e
			out.Op = name
			return &out, true
		}
		return err, true
	}
	var kind error
	switch e := err.(type) {
	case *syncstate.WaitEndedError, *syncstate.TimeoutError:
		kind = ownWaitKind(err)
	case *foreignStreamError:
		kind = ErrInvalid
	default:
		if errors.Unwrap(e) != syncstate.ErrSelfWait {
			return nil, false
		}
		kind = ErrInvalid
	}
	return &Error{Op: name, Kind: kind, Detail: "not submitted on " + tl.Name(), Err: err}, true
}

// timedOut reports whether err, the joined errors of several waits, holds
// an *Error of kind ErrTimeout: a wait that ran out of time. It looks into
// joined errors but not into an *Error's cause, which is the work's.
func timedOut(err error) bool {
	switch e := err.(type) {
	case *Error:
		return e.Kind == ErrTimeout
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			if timedOut(x) {
				return true
			}
		}
	}
	return false
}

// Close waits for the task's work and releases its resources. The default
// task is closed with its device. Closing a task again, or after its
// device, returns nil, as Device.Close does: a deferred Close after an
// explicit one is harmless, and the first Close reported whatever there
// was to report. Other calls on a closed task return ErrClosed.
func (t *Task) Close() error {
	if t != nil && t.closed.Load() {
		return nil
	}
	if err := t.check("Close"); err != nil {
		if errors.Is(err, ErrClosed) {
			return nil // a default task asked for after its device closed
		}
		return err
	}
	d := t.dev
	if err := d.enter("Close"); err != nil {
		if errors.Is(err, ErrClosed) {
			return nil // the device's Close released the task
		}
		return err
	}
	defer d.leave()
	if t == d.defaultTask {
		return nil
	}
	if err := fromHostFunc("Close"); err != nil {
		return err
	}
	if err := t.begin("Close"); err != nil {
		return err
	}
	defer t.end()
	if t.closed.Swap(true) {
		return nil
	}
	t.lifeMu.Lock()
	defer t.lifeMu.Unlock()
	err := t.drain(context.Background())
	d.trace.drained(t)
	d.mu.Lock()
	for i, x := range d.tasks {
		if x == t {
			d.tasks = append(d.tasks[:i], d.tasks[i+1:]...)
			break
		}
	}
	d.mu.Unlock()
	t.released = true
	t.forgetLane()
	return asError("Close", errors.Join(err, t.drv.Close()))
}

// check validates an op's operands: non-nil, on the task's device.
func (t *Task) check(op string, arrays ...*Array) error {
	if t == nil {
		return newErr(op, ErrInvalid, "nil task")
	}
	if t.err != nil {
		return &Error{Op: op, Kind: kindOf(t.err), Detail: "the default task could not be made", Err: t.err}
	}
	if t.closed.Load() {
		return newErr(op, ErrClosed, "task is closed")
	}
	if t.dev.closed.Load() {
		// Calls that do not enter the device (Record's function, the
		// BLAS handle) must not run on a closed one either.
		return newErr(op, ErrClosed, "%v is closed", t.dev)
	}
	for _, a := range arrays {
		if a == nil {
			return newErr(op, ErrNilArray, "")
		}
		if a.dev != t.dev {
			return mismatch(op, a, t.dev)
		}
	}
	return nil
}

// freedIn reports the first freed Operand; the caller holds their locks.
func freedIn(op string, operands []access) error {
	for _, x := range operands {
		if x.b.freed {
			return newErr(op, ErrFreed, "%v", x.who)
		}
	}
	return nil
}

// taskOps are a task's op values, one per op type. An op is built in its
// type's value, every field set, and passed to the driver by pointer: the
// task serves one goroutine, and a pointer in an interface costs no
// allocation.
type taskOps struct {
	dispatch driver.DispatchOp
	gemm     driver.GemmOp
	call     driver.LibraryCallOp
	copy     driver.CopyOp
	peer     driver.PeerCopyOp
	host     driver.HostFuncOp
	replay   driver.ReplayOp
	signal   driver.SignalOp
}

// drop clears what the ops hold of the caller's (its functions, its host
// memory, a recording), so that a submitted op keeps none of it alive.
func (o *taskOps) drop() {
	o.call.Call, o.host.Func, o.copy.Host, o.replay.Recorded = nil, nil, nil, nil
}

// submit orders op after what it must follow, submits it and records it:
// the one path every kind of op takes. operands are what it reads and
// writes; op says what it does, and its kind the lane it runs on. It
// returns the op's fence.
func (t *Task) submit(name string, op driver.Op, operands []access) (syncstate.Fence, error) {
	return t.submitFrom(name, op, operands, false)
}

// submitFrom is submit; foreign says that what the op writes is written by
// work outside the device's timelines, which the op only waits for (a
// signal import): an HSA queue's kernel that reads it first acquires at
// system scope (syncstate.Op.ForeignWrites).
func (t *Task) submitFrom(name string, op driver.Op, operands []access, foreign bool) (syncstate.Fence, error) {
	if t.rec != nil {
		return t.record(name, op, operands)
	}
	if err := t.dev.enterShard(name, t.shard); err != nil {
		return syncstate.Fence{}, err
	}
	// One defer and two returns: the compiler open-codes it, where the
	// submission's many returns would make it a deferred call record.
	defer t.leaveSubmit()
	s := opSync{sop: syncstate.Op{Name: name, ForeignWrites: foreign}, operands: operands}
	return t.submitEntered(name, op, &s)
}

// leaveSubmit ends a submission: the task's ops hold nothing of the
// caller's any more, and the device may close.
func (t *Task) leaveSubmit() {
	t.ops.drop()
	t.dev.leaveShard(t.shard)
}

// timeline returns the timeline of lane l.
func (t *Task) timeline(l driver.Lane) syncstate.Timeline {
	if int(l) >= len(t.lanes) {
		return t.drv.Timeline(l)
	}
	tl := t.lanes[l]
	if tl == nil {
		tl = t.drv.Timeline(l)
		t.lanes[l] = tl
	}
	return tl
}

// opSync is how the op being submitted orders itself after what its
// operands need and records its fence on them: one syncstate.Op over an
// eager op's operands, or a replay's group or parts (Recording.begin).
type opSync struct {
	sop      syncstate.Op
	operands []access
	r        *Recording // the replay's; nil for an eager op
}

// parts is how many driver submissions the op makes: one, or a replay's
// segments.
func (s *opSync) parts() int {
	if s.r != nil {
		return len(s.r.segs)
	}
	return 1
}

// begin orders the op on tl after what its operands need, holding them.
func (s *opSync) begin(e *syncstate.Engine, tl syncstate.Timeline, sinks syncstate.Sinks) error {
	if s.r != nil {
		return s.r.begin(e, tl, sinks)
	}
	for _, x := range s.operands {
		s.sop.Use(&x.b.st, x.access)
	}
	return s.sop.Begin(e, tl, sinks)
}

// freed reports the first freed operand, the op aborted if there is one.
func (s *opSync) freed(name string) error {
	if s.r != nil {
		return s.r.freed(name)
	}
	if err := freedIn(name, s.operands); err != nil {
		s.sop.Abort()
		return err
	}
	return nil
}

// abort ends a begun op that submitted nothing: nothing changes.
func (s *opSync) abort() {
	if s.r != nil {
		s.r.abort()
		return
	}
	s.sop.Abort()
}

// fail ends a begun op that failed after it may have run in part,
// poisoning what it writes with err.
func (s *opSync) fail(err error) {
	if s.r != nil {
		s.r.fail(err)
		return
	}
	s.sop.Fail(err)
}

// commit records the op's fence f on its operands and releases them.
func (s *opSync) commit(e *syncstate.Engine, name string, f syncstate.Fence, sinks syncstate.Sinks) error {
	if s.r != nil {
		return s.r.commit(e, name, f, sinks)
	}
	return s.sop.Commit(f.Ticket, sinks)
}

// submitEntered is submit once the device is entered, and Replay's
// submission: the one path every op takes, eager or replayed. It makes
// the run-ahead cap's wait, orders the op after what its operands need on
// its (first) timeline, checks that none was freed, submits its parts to
// the driver in order (one, or a replay's segments, each after the
// earlier segments of other timelines it depends on), records its fence
// on its operands and makes the waits that follow a submission. A
// failure before the first part is submitted leaves the operands as they
// were; one after it poisons what the op writes.
func (t *Task) submitEntered(name string, op driver.Op, s *opSync) (syncstate.Fence, error) {
	d := t.dev
	n := s.parts()
	if err := t.capWait(name, uint64(n)); err != nil {
		return syncstate.Fence{}, err
	}
	var tl syncstate.Timeline
	if s.r != nil {
		tl = s.r.segs[0].tl
	} else {
		tl = t.timeline(op.Lane())
	}
	tr := d.opObserver()
	if tr != nil {
		t.traceBegan = tr.now()
	}
	if err := s.begin(&d.engine, tl, t.sinks); err != nil {
		if tr != nil {
			tr.opFailed(tl, t.traceHost, t.traceBegan)
		}
		if errors.Is(err, syncstate.ErrTooManyOperands) {
			return syncstate.Fence{}, &Error{Op: name, Kind: ErrInvalid, Err: err}
		}
		return syncstate.Fence{}, notSubmitted(name, tl, err)
	}
	if err := s.freed(name); err != nil {
		if tr != nil {
			tr.opFailed(tl, t.traceHost, t.traceBegan)
		}
		return syncstate.Fence{}, err
	}
	var f syncstate.Fence
	for k := range n {
		// A replay's segment: its op, its timeline, the earlier
		// segments it follows (link, nil for none) and its own record
		// (mark).
		var link, mark *syncstate.Op
		if s.r != nil {
			op, tl, link, mark = s.r.segment(t, k)
			if tr != nil && k > 0 {
				t.traceBegan = tr.now()
			}
		}
		if link != nil {
			// The segment follows the earlier ones it depends on, as
			// an eager op on its timeline would: on the device where
			// the policy allows, else a counted host wait.
			if err := link.Begin(&d.engine, tl, t.sinks); err != nil {
				if tr != nil {
					tr.opFailed(tl, t.traceHost, t.traceBegan)
				}
				s.fail(err)
				return syncstate.Fence{}, &Error{Op: name, Kind: ErrFault, Detail: "segment on " + tl.Name(), Err: err}
			}
		}
		if tr != nil {
			t.traceIssued = tr.opIssued(t.traceBegan, t.traceHost)
		}
		var ticket uint64
		var err error
		switch op.(type) {
		case *driver.LibraryCallOp, *driver.ReplayOp:
			ticket, err = t.submitCall(op, s, link)
		default:
			ticket, err = t.drv.Submit(op)
		}
		if tr != nil {
			if err != nil {
				tr.opFailed(tl, t.traceHost, t.traceBegan)
			} else {
				tr.opSubmitted(op, name, tl, ticket, t.traceHost, t.traceBegan, t.traceIssued)
			}
		}
		if link != nil {
			link.Abort()
		}
		if err != nil {
			if e, ok := unsubmitted(name, tl, err); ok && k == 0 {
				// Nothing is on the timeline: what the op was to write
				// keeps what it held, as after Begin's waits.
				s.abort()
				return syncstate.Fence{}, e
			}
			kind := ErrUnavailable
			if _, call := op.(*driver.LibraryCallOp); k > 0 || tl.Failed(math.MaxUint64) != nil || call {
				// Earlier segments ran, or a library call's function
				// failed after it may have enqueued part of its work:
				// what the op writes is unknown.
				kind = ErrFault
			}
			s.fail(err)
			return syncstate.Fence{}, &Error{Op: name, Kind: kind, Detail: "submitting to " + tl.Name(), Err: err}
		}
		f = syncstate.Fence{TL: tl, Ticket: ticket}
		t.sinks.Dispatch() // one per driver submission, as the trace draws them
		if mark != nil {
			mark.RecordOn(f, name)
		}
		if tr != nil && k < n-1 {
			tr.opEnded(tl, ticket, t.traceHost, t.traceBegan)
		}
	}
	err := t.afterSubmit(name, s, f)
	if tr != nil {
		tr.opEnded(f.TL, f.Ticket, t.traceHost, t.traceBegan)
	}
	return f, err
}

// notSubmitted is the error of an op whose ordering (Begin) failed: a
// refused wait as it is, a wait that ended on its own (ErrTimeout; the op
// changed nothing), or else a failure it depends on (ErrFault).
func notSubmitted(name string, tl syncstate.Timeline, err error) error {
	if errors.Is(err, ErrHostWait) {
		return err
	}
	kind := ErrFault
	if _, ok := err.(*syncstate.WaitEndedError); ok {
		kind = ownWaitKind(err)
	}
	return &Error{Op: name, Kind: kind, Detail: "not submitted on " + tl.Name(), Err: err}
}

// errCallPanicked fails the op of a library call whose function panicked.
var errCallPanicked = errors.New("the library call's function panicked")

// submitCall is the driver's Submit of an op that runs the user's
// functions on this goroutine: a library call, or a replayed segment that
// may hold library calls. If a function panics, the op fails before the
// panic goes on: what it writes is poisoned (the function may have
// enqueued part of its work) and its operands are unlocked, so that a
// caller that recovers can still read, write and free them.
func (t *Task) submitCall(op driver.Op, s *opSync, link *syncstate.Op) (ticket uint64, err error) {
	returned := false
	defer func() {
		if !returned {
			if link != nil {
				link.Abort()
			}
			s.fail(errCallPanicked)
		}
	}()
	ticket, err = t.drv.Submit(op)
	returned = true
	return ticket, err
}

// afterSubmit records a submitted op's fence f on its operands and makes
// the waits that follow a submission.
func (t *Task) afterSubmit(name string, s *opSync, f syncstate.Fence) error {
	if err := s.commit(&t.dev.engine, name, f, t.sinks); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return err // refused by sync-debug mode
		}
		return &Error{Op: name, Kind: waitKind(f, err), Detail: "on " + f.TL.Name(), Err: err}
	}
	what := "op"
	if s.r != nil {
		what = "replay"
	}
	return t.submitWaits(name, what, f)
}

// capWait enforces the device's run-ahead cap ahead of a submission of
// submissions driver submissions (an op, a replay's segments): a throttle
// wait for older work, made before the op, so that a wait that is
// refused (sync-debug) or runs out of time leaves the op unsubmitted.
func (t *Task) capWait(name string, submissions uint64) error {
	d := t.dev
	if d.maxPerDevice == 0 || d.sinceCheck.Add(submissions) < max(d.maxPerDevice/2, 1) {
		return nil
	}
	d.sinceCheck.Store(0)
	err := d.throttleDevice(name, t.sinks, t.traceHost)
	if err == nil || errors.Is(err, ErrHostWait) {
		return err
	}
	return &Error{Op: name, Kind: ownWaitKind(err), Detail: "device run-ahead cap: not submitted", Err: err}
}

// submitWaits makes the waits that follow a submission once it is
// recorded on its operands: launch-blocking's wait for f (what names the
// submission in its error: an op, a replay) and the poll of pending
// frees. Eager ops and replays share it.
func (t *Task) submitWaits(name, what string, f syncstate.Fence) error {
	d := t.dev
	if d.launchBlocking {
		t.sinks.HostWait(ReasonLaunchBlocking)
		tw := d.obs.waitBegin(name, f, ReasonLaunchBlocking, t.traceHost)
		err := f.TL.WaitHost(f.Ticket)
		d.obs.waitEnd(tw, err)
		if err != nil {
			return &Error{Op: name, Kind: waitKind(f, err), Detail: "launch-blocking: the " + what + " at " + f.String(), Err: err}
		}
	}
	if d.frees.n.Load() != 0 {
		d.frees.pollSubmitted(d)
	}
	return nil
}

// elementwise runs out = op(a, b, alpha) as one of rocsync's kernels.
func (t *Task) elementwise(name string, op kernels.Op, out, a, b *Array, alpha float64) error {
	readA, readB := op.Reads()
	var buf [3]*Array
	reads := buf[:0]
	if readA {
		reads = append(reads, a)
	}
	if readB {
		reads = append(reads, b)
	}
	if err := t.check(name, out); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if err := t.check(name, reads...); err != nil {
		return err
	}
	if err := operandsAgree(name, op, out, reads); err != nil {
		return err
	}
	k, err := t.dev.drv.Builtin(op, out.dtype)
	if err != nil {
		if t.dev.closed.Load() {
			return newErr(name, ErrClosed, "device is closed")
		}
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "loading rocsync's kernels", Err: err}
	}
	args := kernels.Args{Out: uint64(out.ptr), Alpha: alpha, N: uint64(out.Len())}
	operands := t.operands[:0]
	if readA {
		args.A = uint64(a.ptr)
		operands = append(operands, access{&a.buffer, a, Read})
	}
	if readB {
		args.B = uint64(b.ptr)
		operands = append(operands, access{&b.buffer, b, Read})
	}
	operands = append(operands, access{&out.buffer, out, Write})
	dop := &t.ops.dispatch
	dop.SetBuiltin(k, out.dtype, &args)
	_, err = t.submit(name, dop, operands)
	return err
}

// Gemm computes c = alpha·op(a)·op(b) + beta·c with the vendor BLAS on the
// task's library stream, where op transposes when asked. Arrays are
// row-major and BLAS is column-major, so rocsync computes
// cᵀ = op(b)ᵀ·op(a)ᵀ, which reads the row-major buffers as they are.
func (t *Task) Gemm(transA, transB bool, alpha float64, a, b *Array, beta float64, c *Array) error {
	return t.gemm("Gemm", transA, transB, alpha, a, b, beta, c)
}

// gemm is Gemm under the name of the op the user called.
func (t *Task) gemm(name string, transA, transB bool, alpha float64, a, b *Array, beta float64, c *Array) error {
	if err := t.check(name, a, b, c); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	m, k := a.rows, a.cols
	if transA {
		m, k = k, m
	}
	kb, n := b.rows, b.cols
	if transB {
		kb, n = n, kb
	}
	if a.dtype != b.dtype || a.dtype != c.dtype {
		return newErr(name, ErrDType, "%v, %v, %v", a, b, c)
	}
	if c == a || c == b {
		// BLAS overwrites C while it still reads A and B.
		return newErr(name, ErrInvalid, "the output must not be one of the inputs")
	}
	if k != kb || c.rows != m || c.cols != n {
		return newErr(name, ErrShape, "op(a) is %dx%d, op(b) is %dx%d, c is %dx%d", m, k, kb, n, c.rows, c.cols)
	}
	if max(m, n, k) > math.MaxInt32 {
		return newErr(name, ErrShape, "dimensions %dx%dx%d exceed BLAS's 32-bit sizes", m, n, k)
	}
	out := Write
	if beta != 0 {
		out = ReadWrite
	}
	operands := append(t.operands[:0], access{&a.buffer, a, Read}, access{&b.buffer, b, Read}, access{&c.buffer, c, out})
	op := &t.ops.gemm
	*op = driver.GemmOp{DType: c.dtype, TransA: transB, TransB: transA,
		M: n, N: m, K: k, Alpha: alpha, Beta: beta, A: b.ptr, LDA: b.cols, B: a.ptr, LDB: a.cols, C: c.ptr, LDC: c.cols}
	_, err := t.submit(name, op, operands)
	return err
}

// MatMulInto computes c = op(a)·op(b).
func (t *Task) MatMulInto(c, a, b *Array, transA, transB bool) error {
	return t.gemm("MatMul", transA, transB, 1, a, b, 0, c)
}

// MatMul returns a new array op(a)·op(b).
func (t *Task) MatMul(a, b *Array, transA, transB bool) (*Array, error) {
	if err := t.check("MatMul", a, b); err != nil {
		return nil, err
	}
	m := a.rows
	if transA {
		m = a.cols
	}
	n := b.cols
	if transB {
		n = b.rows
	}
	c, err := t.dev.allocFor("MatMul", m, n, a.dtype)
	if err != nil {
		return nil, err
	}
	if err := t.gemm("MatMul", transA, transB, 1, a, b, 0, c); err != nil {
		_ = c.Free()
		return nil, err
	}
	return c, nil
}

package rocsync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// Task is the task-local state of the seed design: on ROCm one HSA queue
// for rocsync's kernels, one HIP stream, and a rocBLAS handle bound to that
// stream. Ops submitted through a task run in order; a Task must not be
// used by two goroutines at once (give each goroutine its own).
type Task struct {
	dev    *Device
	drv    driver.Task
	stats  syncstate.Stats
	sinks  syncstate.Sinks
	err    error // set when the default task could not be made
	closed atomic.Bool
	// lifeMu orders draining (Synchronize, Device.Synchronize) with
	// releasing the driver task (Close); released is set under it.
	lifeMu   sync.Mutex
	released bool
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
func (t *Task) Synchronize() error { return t.SynchronizeContext(nil) }

// SynchronizeContext is Synchronize that also returns when ctx is done,
// with an error that wraps ctx's. It cancels the wait, not the GPU work.
func (t *Task) SynchronizeContext(ctx context.Context) error {
	if err := t.check("Synchronize"); err != nil {
		return err
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
	return asError("Synchronize", errors.Join(err, t.dev.frees.poll(t.dev, false)))
}

// drain host-waits for the task's timelines (one wait each, counted as a
// sync wait, only where work is pending).
func (t *Task) drain(ctx context.Context) error {
	k, l := t.drv.KernelTimeline(), t.drv.LibraryTimeline()
	err := t.drainOne(ctx, k)
	if l != k {
		err = errors.Join(err, t.drainOne(ctx, l))
	}
	return err
}

func (t *Task) drainOne(ctx context.Context, tl syncstate.Timeline) error {
	last := tl.LastTicket()
	if tl.Completed() >= last {
		return faultIn("Synchronize", tl, tl.Failed(last))
	}
	t.sinks.HostWait(ReasonSync)
	t.dev.debugHostWait("Synchronize", syncstate.Fence{TL: tl, Ticket: last}, ReasonSync)
	return faultIn("Synchronize", tl, syncstate.WaitHostContext(ctx, syncstate.Fence{TL: tl, Ticket: last}))
}

// faultIn wraps the error of a wait on tl, naming the timeline.
func faultIn(op string, tl syncstate.Timeline, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Op: op, Kind: waitKind(err), Detail: "waiting for " + tl.Name(), Err: err}
}

// waitKind classifies the error of a host wait: it ran out of time (or its
// context ended), or the work failed.
func waitKind(err error) error {
	if errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return ErrFault
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
	if t.closed.Swap(true) {
		return nil
	}
	t.lifeMu.Lock()
	defer t.lifeMu.Unlock()
	err := t.drain(nil)
	d.mu.Lock()
	for i, x := range d.tasks {
		if x == t {
			d.tasks = append(d.tasks[:i], d.tasks[i+1:]...)
			break
		}
	}
	d.mu.Unlock()
	t.released = true
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

// freedIn reports the first freed operand; the caller holds their locks.
func freedIn(op string, arrays ...*Array) error {
	for _, a := range arrays {
		if a != nil && a.freed {
			return newErr(op, ErrFreed, "%v", a)
		}
	}
	return nil
}

// submit orders an op after what it must follow, submits it and records
// it: the one path every op takes. reads and write are its operands.
func (t *Task) submit(name string, tl syncstate.Timeline, reads []*Array, write *Array, c *call) error {
	d := t.dev
	if err := d.enter(name); err != nil {
		return err
	}
	defer d.leave()
	sop := syncstate.Op{Name: name}
	for _, x := range reads {
		sop.Read(&x.st)
	}
	sop.Write(&write.st)
	if err := sop.Begin(&d.engine, tl, t.sinks); err != nil {
		if errors.Is(err, syncstate.ErrTooManyOperands) {
			return &Error{Op: name, Kind: ErrInvalid, Err: err}
		}
		if errors.Is(err, ErrHostWait) {
			return err
		}
		return &Error{Op: name, Kind: ErrFault, Detail: "not submitted on " + tl.Name(), Err: err}
	}
	if err := freedIn(name, write); err != nil {
		sop.Abort()
		return err
	}
	if err := freedIn(name, reads...); err != nil {
		sop.Abort()
		return err
	}
	ticket, err := c.submit(t.drv)
	if err != nil {
		if errors.Is(err, syncstate.ErrWaitRefused) {
			sop.Abort() // sync-debug refused a throttle wait: nothing changed
			return err
		}
		kind := ErrUnavailable
		if tl.Failed(math.MaxUint64) != nil {
			kind = ErrFault
		}
		sop.Fail(err)
		return &Error{Op: name, Kind: kind, Detail: "submitting to " + tl.Name(), Err: err}
	}
	t.sinks.Dispatch()
	if err := sop.Commit(ticket, t.sinks); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return err // refused by sync-debug mode
		}
		return &Error{Op: name, Kind: ErrFault, Detail: "on " + tl.Name(), Err: err}
	}
	if d.maxPerDevice > 0 && d.sinceCheck.Add(1) >= max(d.maxPerDevice/2, 1) {
		d.sinceCheck.Store(0)
		if err := d.throttleDevice(t.sinks); err != nil {
			// The op itself was submitted; the wait for older work failed.
			return &Error{Op: name, Kind: waitKind(err), Detail: "device run-ahead cap", Err: err}
		}
	}
	if d.launchBlocking {
		t.sinks.HostWait(ReasonLaunchBlocking)
		if err := tl.WaitHost(ticket); err != nil {
			return &Error{Op: name, Kind: waitKind(err), Detail: fmt.Sprintf("launch-blocking: the op at %s#%d", tl.Name(), ticket), Err: err}
		}
	}
	if d.frees.n.Load() != 0 {
		_ = d.frees.poll(d, false)
	}
	return nil
}

// call is the driver call of one op: a kernel launch or a gemm. It is a
// plain value, not a closure or an interface, so that submitting an op
// allocates nothing.
type call struct {
	gemm           bool
	op             kernels.Op
	dt             kernels.DType
	args           kernels.Args
	transA, transB bool
	m, n, k        int
	alpha, beta    float64
	a, b, c        driver.DevicePtr
	lda, ldb, ldc  int
}

func (c *call) submit(d driver.Task) (uint64, error) {
	if c.gemm {
		return d.Gemm(c.dt, c.transA, c.transB, c.m, c.n, c.k, c.alpha, c.a, c.lda, c.b, c.ldb, c.beta, c.c, c.ldc)
	}
	return d.Launch(c.op, c.dt, c.args)
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
	if err := t.check(name, reads...); err != nil {
		return err
	}
	if err := operandsAgree(name, op, out, reads); err != nil {
		return err
	}
	c := call{op: op, dt: out.dtype, args: kernels.Args{Out: uint64(out.ptr), Alpha: alpha, N: uint64(out.Len())}}
	if readA {
		c.args.A = uint64(a.ptr)
	}
	if readB {
		c.args.B = uint64(b.ptr)
	}
	return t.submit(name, t.drv.KernelTimeline(), reads, out, &c)
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
	buf := [3]*Array{a, b, c}
	reads := buf[:2]
	if beta != 0 {
		reads = buf[:3]
	}
	g := call{gemm: true, dt: c.dtype, transA: transB, transB: transA, m: n, n: m, k: k, alpha: alpha, beta: beta,
		a: b.ptr, lda: b.cols, b: a.ptr, ldb: a.cols, c: c.ptr, ldc: c.cols}
	return t.submit(name, t.drv.LibraryTimeline(), reads, c, &g)
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

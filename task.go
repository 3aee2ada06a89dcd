package rocsync

import (
	"errors"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/tls"
)

// Task is the task-local state of the seed design: one HSA queue for
// rocsync's kernels, one HIP stream, and a rocBLAS handle bound to that
// stream. Ops submitted through a task run in order; a Task must not be used
// by two goroutines at once (give each goroutine its own).
type Task struct {
	dev   *Device
	st    tls.State
	sinks syncstate.Sinks
	err   error // set when the default task could not be made
}

// Stats returns the task's counters.
func (t *Task) Stats() Stats { return t.st.Stats.Snapshot() }

// Device returns the task's device.
func (t *Task) Device() *Device { return t.dev }

func (d *Device) countHostWait(r Reason) { syncstate.Sinks{&d.stats}.HostWait(r) }

// kernelTimeline is where the task's kernels run: its HSA queue, or its
// HIP stream under Unified.
func (t *Task) kernelTimeline() syncstate.Timeline {
	if t.st.Queue != nil {
		return t.st.Queue
	}
	return t.st.Stream
}

// Synchronize waits on the host for all work the task submitted.
func (t *Task) Synchronize() error {
	if err := t.dev.enter("Synchronize"); err != nil {
		return err
	}
	defer t.dev.leave()
	err := t.drain()
	return errors.Join(err, t.dev.frees.poll(t.dev, false))
}

func (t *Task) drain() error {
	var errs []error
	if q := t.st.Queue; q != nil && q.Completed() < q.LastTicket() {
		t.sinks.HostWait(ReasonSync)
		errs = append(errs, q.Drain())
	}
	if s := t.st.Stream; s != nil && s.Completed() < s.LastTicket() {
		t.sinks.HostWait(ReasonSync)
		errs = append(errs, s.Drain())
	}
	return errors.Join(errs...)
}

// Close waits for the task's work and releases its stream, handle and
// queue. The default task is closed with its device.
func (t *Task) Close() error {
	d := t.dev
	if err := d.enter("Close"); err != nil {
		return err
	}
	defer d.leave()
	if t == d.defaultTask {
		return nil
	}
	err := t.drain()
	d.mu.Lock()
	for i, x := range d.tasks {
		if x == t {
			d.tasks = append(d.tasks[:i], d.tasks[i+1:]...)
			break
		}
	}
	d.mu.Unlock()
	return errors.Join(err, t.release())
}

func (t *Task) release() error {
	var errs []error
	if t.st.BLAS != 0 {
		errs = append(errs, t.dev.drv.blas.DestroyHandle(t.st.BLAS))
		t.st.BLAS = 0
	}
	if t.st.Stream != nil {
		errs = append(errs, t.st.Stream.Close())
		t.st.Stream = nil
	}
	if t.st.Queue != nil {
		t.dev.queues.Release(t.st.Queue)
		t.st.Queue = nil
	}
	return errors.Join(errs...)
}

// check validates the operands of an op: non-nil, same device as the task,
// and not closed.
func (t *Task) check(op string, arrays ...*Array) error {
	if t == nil {
		return newErr(op, ErrInvalid, "nil task")
	}
	if t.err != nil {
		return &Error{Op: op, Kind: ErrUnavailable, Detail: "default task", Err: t.err}
	}
	for _, a := range arrays {
		if a == nil {
			return newErr(op, ErrNilArray, "")
		}
		if a.dev != t.dev {
			return newErr(op, ErrDeviceMismatch, "%v used on a task of gpu%d", a, t.dev.index)
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

// elementwise runs out = op(a, b, alpha) as an HSA kernel.
func (t *Task) elementwise(name string, op kernels.Op, out, a, b *Array, alpha float64) error {
	readA, readB := op.Reads()
	operands := [3]*Array{out, nil, nil}
	if readA {
		operands[1] = a
	}
	if readB {
		operands[2] = b
	}
	if err := t.check(name, nonNil(operands[:])...); err != nil {
		return err
	}
	for _, x := range operands[1:] {
		if x == nil {
			continue
		}
		if x.dtype != out.dtype {
			return newErr(name, ErrDType, "%v and %v", x, out)
		}
		if x.rows != out.rows || x.cols != out.cols {
			return newErr(name, ErrShape, "%v and %v", x, out)
		}
	}
	d := t.dev
	if err := d.enter(name); err != nil {
		return err
	}
	defer d.leave()
	if err := d.loadKernels(); err != nil {
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "loading kernels", Err: err}
	}
	var sop syncstate.Op
	for _, x := range operands[1:] {
		if x != nil {
			sop.Read(x.st)
		}
	}
	sop.Write(out.st)
	tl := t.kernelTimeline()
	if err := sop.Begin(&d.engine, tl, t.sinks); err != nil {
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "ordering", Err: err}
	}
	if err := freedIn(name, operands[:]...); err != nil {
		sop.Abort()
		return err
	}
	di := 0
	if out.dtype == Float64 {
		di = 1
	}
	k := &d.kernelObjs[op][di]
	args := kernels.Args{Out: uint64(out.ptr), Alpha: alpha, N: uint64(out.Len())}
	if operands[1] != nil {
		args.A = uint64(operands[1].ptr)
	}
	if operands[2] != nil {
		args.B = uint64(operands[2].ptr)
	}
	var buf [queue.KernargSlot]byte
	args.Encode(buf[:], out.dtype)
	ticket, err := t.launch(k, buf[:k.kernargSize], uint64(out.Len()))
	if err != nil {
		sop.Abort()
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "dispatch", Err: err}
	}
	t.sinks.Dispatch()
	if err := sop.Commit(ticket, t.sinks); err != nil {
		return &Error{Op: name, Kind: ErrUnavailable, Err: err}
	}
	if d.frees.n.Load() != 0 {
		_ = d.frees.poll(d, false)
	}
	return nil
}

func nonNil(in []*Array) []*Array {
	out := in[:0:0]
	for i, a := range in {
		if i == 0 || a != nil {
			out = append(out, a)
		}
	}
	return out
}

// maxGrid caps the work-items of one dispatch; the kernels loop over the
// rest with a grid stride.
const maxGrid = 1 << 24

func (t *Task) launch(k *kernelObject, kernarg []byte, n uint64) (uint64, error) {
	wg := uint64(k.workgroup)
	grid := min((n+wg-1)/wg*wg, maxGrid)
	if t.st.Queue == nil {
		// Unified: HIP counts the grid in blocks, AQL in work-items.
		hp := t.dev.drv.hip
		return t.st.Stream.Submit(func(s hip.Stream) error {
			return hp.ModuleLaunchKernel(k.function, [3]uint32{uint32(grid / wg), 1, 1}, [3]uint32{uint32(wg), 1, 1},
				k.groupSize, s, kernarg)
		})
	}
	return t.st.Queue.Dispatch(&queue.Dispatch{KernelObject: k.handle, Grid: uint32(grid), Workgroup: k.workgroup,
		PrivateSegmentSize: k.privateSize, GroupSegmentSize: k.groupSize, Kernarg: kernarg})
}

// Gemm computes c = alpha·op(a)·op(b) + beta·c with rocBLAS on the task's
// stream, where op transposes when asked. Arrays are row-major; rocBLAS is
// column-major, so rocsync computes cᵀ = op(b)ᵀ·op(a)ᵀ, which reads the
// row-major buffers as they are.
func (t *Task) Gemm(transA, transB bool, alpha float64, a, b *Array, beta float64, c *Array) error {
	const name = "Gemm"
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
	if k != kb || c.rows != m || c.cols != n {
		return newErr(name, ErrShape, "op(a) is %dx%d, op(b) is %dx%d, c is %dx%d", m, k, kb, n, c.rows, c.cols)
	}
	d := t.dev
	if err := d.enter(name); err != nil {
		return err
	}
	defer d.leave()
	if d.drv.blas == nil {
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "rocBLAS is not loaded", Err: d.drv.blasErr}
	}
	var sop syncstate.Op
	sop.Read(a.st)
	sop.Read(b.st)
	sop.Write(c.st)
	if err := sop.Begin(&d.engine, t.st.Stream, t.sinks); err != nil {
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "ordering", Err: err}
	}
	if err := freedIn(name, a, b, c); err != nil {
		sop.Abort()
		return err
	}
	opA, opB := rocblas.OperationNone, rocblas.OperationNone
	if transA {
		opA = rocblas.OperationTranspose
	}
	if transB {
		opB = rocblas.OperationTranspose
	}
	blas, h := d.drv.blas, t.st.BLAS
	ticket, err := t.st.Stream.Submit(func(hip.Stream) error {
		if c.dtype == Float32 {
			return blas.Sgemm(h, opB, opA, int32(n), int32(m), int32(k), float32(alpha),
				b.ptr, int32(b.cols), a.ptr, int32(a.cols), float32(beta), c.ptr, int32(c.cols))
		}
		return blas.Dgemm(h, opB, opA, int32(n), int32(m), int32(k), alpha,
			b.ptr, int32(b.cols), a.ptr, int32(a.cols), beta, c.ptr, int32(c.cols))
	})
	if err != nil {
		sop.Abort()
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "gemm", Err: err}
	}
	t.sinks.Dispatch()
	if err := sop.Commit(ticket, t.sinks); err != nil {
		return &Error{Op: name, Kind: ErrUnavailable, Err: err}
	}
	if d.frees.n.Load() != 0 {
		_ = d.frees.poll(d, false)
	}
	return nil
}

// MatMulInto computes c = op(a)·op(b).
func (t *Task) MatMulInto(c, a, b *Array, transA, transB bool) error {
	return t.Gemm(transA, transB, 1, a, b, 0, c)
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
	c, err := t.dev.Empty(m, n, a.dtype)
	if err != nil {
		return nil, err
	}
	if err := t.MatMulInto(c, a, b, transA, transB); err != nil {
		_ = c.Free()
		return nil, err
	}
	return c, nil
}

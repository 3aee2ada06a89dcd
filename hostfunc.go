package rocsync

import (
	"sync/atomic"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
)

// Host work is an op like any other: HostFunc declares what the function
// reads and writes, is ordered after the work it must follow, and is
// recorded on the buffers, so later ops (GPU ops included) wait for it. It
// runs on the task's host lane, a goroutine of rocsync's own: the
// submitter never waits for it, and ops after it on the GPU wait for it on
// the device where the runtime lets them (a signal the lane completes; see
// the README's op set). CUDA streams wait for it on the host by default
// (driver.DeviceConfig.StreamWaitsForHostLanes). On ROCm a copy between
// host and device memory or between GPUs, or a library call, on a stream
// that waits for a host function on the device first waits for that
// function on the host (a boundary wait): HIP hands such copies to ROCr's
// copy queue of their direction, which every stream shares, and one queued
// behind the function would block the function's own copies.

// HostFunc runs fn on the task's host lane once the work it depends on has
// completed: the last writers of what operands says it reads (In, InOut),
// and the last writers and readers of what it writes (Out, InOut). It
// returns once fn is queued, without waiting for anything on the host.
// fn reaches the operands through its HostAccess, by synchronous copies;
// it must not touch them otherwise, nor use rocsync's ops: a host wait
// that would block (Synchronize, a read-back, Close) is an ErrInvalid
// error at once, since it would wait for fn itself.
//
// fn's error (or panic) fails the op: what it writes is poisoned with an
// ErrFault error wrapping the cause, ops that read it fail at once, and
// the task's host lane is broken from then on, as a fault breaks a queue.
// Host functions run in order per task, at most Options.MaxInFlight in
// flight: past that, HostFunc waits for the older half (a throttle wait).
func (t *Task) HostFunc(operands []Arg, fn func(h *HostAccess) error) error {
	const name = "HostFunc"
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if fn == nil {
		return newErr(name, ErrInvalid, "nil function")
	}
	if err := t.checkOperands(name, operands); err != nil {
		return err
	}
	// Two allocations, the handle (its operands inline) and the function
	// the lane queues: the handle is fresh for every call, so that one
	// kept past its function's return stays dead (ended).
	h := &HostAccess{dev: t.dev}
	accs := t.operands[:0]
operands:
	for i, a := range operands {
		if a.who == nil {
			return newErr(name, ErrInvalid, "operand %d is a scalar: a host function takes buffers and arrays", i)
		}
		// One buffer named twice (In(x), Out(x)) is one operand with both
		// accesses, as ordering treats it.
		for j := range accs {
			if accs[j].b == a.buf {
				accs[j].access |= a.access
				continue operands
			}
		}
		if len(accs) == cap(accs) {
			return newErr(name, ErrInvalid, "more than %d operands", cap(accs))
		}
		accs = append(accs, access{a.buf, a.who, a.access})
	}
	h.ops = append(h.opsBuf[:0], accs...)
	op := &t.ops.host
	op.Func = func() error {
		h.ended.Store(false) // a replayed recording runs it again
		defer h.ended.Store(true)
		return t.runHostFunc(fn, h)
	}
	_, err := t.submit(name, op, accs)
	return err
}

// HostAccess is what a host function may touch: the buffers and arrays it
// declared, through synchronous copies checked against the declaration
// (reading one declared only Out, or writing one declared only In, is an
// ErrInvalid error). It is valid only while the function runs.
type HostAccess struct {
	dev    *Device
	ops    []access
	opsBuf [syncstate.MaxOperands]access
	ended  atomic.Bool
}

// find returns x's buffer if it was declared with access a.
func (h *HostAccess) find(op string, x Operand, a Access) (*buffer, error) {
	if h == nil || h.ended.Load() {
		return nil, newErr(op, ErrInvalid, "the host function has returned")
	}
	if x == nil || x.trackedBuffer() == nil {
		return nil, newErr(op, ErrNilArray, "")
	}
	b := x.trackedBuffer()
	for _, o := range h.ops {
		if o.b == b {
			if o.access&a == 0 {
				return nil, newErr(op, ErrInvalid, "%v was declared %v, not %v", x, o.access, a)
			}
			return b, nil
		}
	}
	return nil, newErr(op, ErrInvalid, "%v is not an operand of the host function", x)
}

// Read copies x (declared In or InOut) into dst, whose length must be x's
// size in bytes.
func (h *HostAccess) Read(x Operand, dst []byte) error {
	b, err := h.find("HostAccess.Read", x, Read)
	if err != nil {
		return err
	}
	if uint64(len(dst)) != b.size {
		return newErr("HostAccess.Read", ErrShape, "destination holds %d bytes, %v has %d", len(dst), x, b.size)
	}
	if err := h.dev.drv.CopyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), b.ptr, b.size); err != nil {
		return &Error{Op: "HostAccess.Read", Kind: ErrUnavailable, Detail: x.String(), Err: err}
	}
	return nil
}

// Write copies src into x (declared Out or InOut); len(src) must be x's
// size in bytes.
func (h *HostAccess) Write(x Operand, src []byte) error {
	b, err := h.find("HostAccess.Write", x, Write)
	if err != nil {
		return err
	}
	if uint64(len(src)) != b.size {
		return newErr("HostAccess.Write", ErrShape, "source holds %d bytes, %v has %d", len(src), x, b.size)
	}
	if err := h.dev.drv.CopyHtoD(b.ptr, unsafe.Pointer(unsafe.SliceData(src)), b.size); err != nil {
		return &Error{Op: "HostAccess.Write", Kind: ErrUnavailable, Detail: x.String(), Err: err}
	}
	return nil
}

// Float32s returns the values of a float32 array declared In or InOut.
func (h *HostAccess) Float32s(x *Array) ([]float32, error) {
	if x == nil {
		return nil, newErr("HostAccess.Float32s", ErrNilArray, "")
	}
	if x.dtype != Float32 {
		return nil, newErr("HostAccess.Float32s", ErrDType, "%v", x)
	}
	out := make([]float32, x.Len())
	return out, h.Read(x, bytesOf(out))
}

// SetFloat32s writes the values of a float32 array declared Out or InOut.
func (h *HostAccess) SetFloat32s(x *Array, vals []float32) error {
	if x == nil {
		return newErr("HostAccess.SetFloat32s", ErrNilArray, "")
	}
	if x.dtype != Float32 {
		return newErr("HostAccess.SetFloat32s", ErrDType, "%v", x)
	}
	return h.Write(x, bytesOf(vals))
}

// Float64s returns the values of a float64 array declared In or InOut.
func (h *HostAccess) Float64s(x *Array) ([]float64, error) {
	if x == nil {
		return nil, newErr("HostAccess.Float64s", ErrNilArray, "")
	}
	if x.dtype != Float64 {
		return nil, newErr("HostAccess.Float64s", ErrDType, "%v", x)
	}
	out := make([]float64, x.Len())
	return out, h.Read(x, bytesOf(out))
}

// SetFloat64s writes the values of a float64 array declared Out or InOut.
func (h *HostAccess) SetFloat64s(x *Array, vals []float64) error {
	if x == nil {
		return newErr("HostAccess.SetFloat64s", ErrNilArray, "")
	}
	if x.dtype != Float64 {
		return newErr("HostAccess.SetFloat64s", ErrDType, "%v", x)
	}
	return h.Write(x, bytesOf(vals))
}

// hostLane is the task's host timeline.
func (t *Task) hostLane() syncstate.Timeline { return t.drv.Timeline(driver.LaneHost) }

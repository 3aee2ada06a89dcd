package rocsync

import (
	"context"
	"errors"
	"sync"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
)

// Reduction says what Sum adds up.
type Reduction = kernels.Reduction

const (
	// SumAll adds every element: the output is 1x1.
	SumAll = kernels.SumAll
	// SumRows adds each row: the output is rows x 1.
	SumRows = kernels.SumRows
	// SumCols adds each column: the output is 1 x cols.
	SumCols = kernels.SumCols
)

// reduceWorkspace is the device's zeroed workspace for reductions: zeroed
// once when allocated, left zero by every reduction (no memset per
// launch), and tracked like an array. Every reduction reads and writes it,
// so its writer is the last reduction and a reduction on another queue or
// stream is ordered after it like any write after write. Reductions of a
// device take it in turn (mu): a larger shape replaces it by a larger one.
type reduceWorkspace struct {
	mu    sync.Mutex
	buf   *buffer
	check bool // Options.CheckReductionWorkspace
}

// take returns a workspace of at least size bytes; the caller holds mu.
// A workspace whose last reduction failed is replaced by a new zeroed one:
// the reduction may have stopped with partial sums in it, and a reduction
// that never ran (its input failed) poisoned it all the same, so every
// later one would fail as depending on it.
func (w *reduceWorkspace) takeLocked(d *Device, size uint64) (*buffer, error) {
	if w.buf != nil && w.buf.size >= size && w.buf.st.Poison() == nil {
		return w.buf, nil
	}
	n := uint64(4096)
	for n < size {
		n *= 2
	}
	if w.buf != nil {
		n = max(n, w.buf.size)
	}
	b := new(buffer)
	if err := d.allocBuffer("Sum", b, n); err != nil {
		return nil, err
	}
	// Zeroed once, by the host, before any reduction is ordered on it.
	zeros := make([]byte, n)
	if err := d.drv.CopyHtoD(b.ptr, unsafe.Pointer(&zeros[0]), n); err != nil {
		_ = d.drv.Free(b.ptr)
		return nil, &Error{Op: "Sum", Kind: ErrUnavailable, Detail: "zeroing the reduction workspace", Err: err}
	}
	b.st.MarkHostWritten()
	if w.buf != nil {
		// Released once its last reduction completes, or, while a
		// recording replays reductions on it, once that recording closes.
		if err := w.buf.free((*Buffer)(w.buf)); errors.Is(err, ErrRecording) {
			w.buf.st.Lock()
			w.buf.freeUnpinned = true
			w.buf.st.Unlock()
		}
	}
	w.buf = b
	return b, nil
}

// release frees the workspace; the device has drained.
func (w *reduceWorkspace) release(d *Device) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf == nil {
		return nil
	}
	err := d.drv.Free(w.buf.ptr)
	w.buf = nil
	return err
}

// Sum computes reduction r of in into out on the task's kernel queue with
// rocsync's multi-workgroup kernels: out is 1x1 (SumAll), rows x 1
// (SumRows) or 1 x cols (SumCols), of in's dtype. The partial sums meet in
// the device's zeroed workspace, which the kernels leave zero: no memset
// per launch.
func (t *Task) Sum(out, in *Array, r Reduction) error {
	const name = "Sum"
	if err := t.check(name, out, in); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if !r.Valid() {
		return newErr(name, ErrInvalid, "unknown reduction %v", r)
	}
	if in.dtype != out.dtype {
		return newErr(name, ErrDType, "%v and %v", in, out)
	}
	if out == in {
		return newErr(name, ErrInvalid, "the output must not be the input")
	}
	wantRows, wantCols := 1, 1
	switch r {
	case SumRows:
		wantRows = in.rows
	case SumCols:
		wantCols = in.cols
	}
	if out.rows != wantRows || out.cols != wantCols {
		return newErr(name, ErrShape, "%v of %v is %dx%d, not %v", r, in, wantRows, wantCols, out)
	}
	shape, err := r.Shape(uint64(in.rows), uint64(in.cols))
	if err != nil {
		return newErr(name, ErrShape, "%v", err)
	}
	red, ok := t.dev.drv.(driver.Reducer)
	if !ok {
		return newErr(name, ErrUnavailable, "the %s backend has no reduction kernels", t.dev.backend)
	}
	k, err := red.Reduction(r, in.dtype)
	if err != nil {
		return &Error{Op: name, Kind: ErrUnavailable, Detail: "loading the reduction kernels", Err: err}
	}
	d := t.dev
	ws := &d.reduce
	ws.mu.Lock()
	defer ws.mu.Unlock()
	args := kernels.ReduceArgs{Out: uint64(out.ptr), In: uint64(in.ptr), Rows: uint64(in.rows), Cols: uint64(in.cols)}
	operands := append(t.operands[:0], access{&in.buffer, in, Read}, access{&out.buffer, out, Write})
	if size := shape.WorkspaceSize(in.dtype); size > 0 {
		b, err := ws.takeLocked(d, size)
		if err != nil {
			return err
		}
		if ws.check {
			if err := checkZeroed(d, b); err != nil {
				return err
			}
		}
		args.Workspace = uint64(b.ptr)
		operands = append(operands, access{b, (*Buffer)(b), ReadWrite})
	}
	op := &t.ops.dispatch
	op.Kernel = k
	args.Encode(op.Args[:])
	op.Geometry = Geometry{Dims: 1, Grid: [3]uint32{shape.Workgroups() * kernels.ReduceWorkgroupSize, 1, 1},
		Workgroup: [3]uint32{kernels.ReduceWorkgroupSize, 1, 1}}
	_, err = t.submit(name, op, operands)
	return err
}

// checkZeroed reads the workspace back (after its last reduction) and
// reports a byte that is not zero.
func checkZeroed(d *Device, b *buffer) error {
	if err := d.enter("Sum"); err != nil {
		return err
	}
	defer d.leave()
	host := make([]byte, b.size)
	if err := b.download(context.Background(), "Sum", unsafe.Pointer(&host[0]), (*Buffer)(b)); err != nil {
		return err
	}
	if err := kernels.CheckZeroed(host); err != nil {
		return &Error{Op: "Sum", Kind: ErrFault, Detail: "the reduction workspace", Err: err}
	}
	return nil
}

package rocsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// DType is an array's element type.
type DType = kernels.DType

// The element types.
const (
	Float32 = kernels.F32
	Float64 = kernels.F64
)

// Array is a 2-D row-major array in device memory: a typed view over the
// Buffer it is built on (Array.Buffer), whose SyncState records the op
// that last wrote it and the newest reader on each queue, so the next op
// waits for exactly what it must.
type Array struct {
	buffer // embedded: one allocation per array
	rows   int
	cols   int
	dtype  DType
}

// Rows, Cols and DType describe the array; a nil array has none.
func (a *Array) Rows() int {
	if a == nil {
		return 0
	}
	return a.rows
}

// Cols is the number of columns.
func (a *Array) Cols() int {
	if a == nil {
		return 0
	}
	return a.cols
}

// DType is the element type.
func (a *Array) DType() DType {
	if a == nil {
		return 0
	}
	return a.dtype
}

// Len is Rows()*Cols().
func (a *Array) Len() int {
	if a == nil {
		return 0
	}
	return a.rows * a.cols
}

// Device is the array's device.
func (a *Array) Device() *Device {
	if a == nil {
		return nil
	}
	return a.dev
}

// PendingFences is how many fences of the array are not yet known
// complete: 0 for a nil array and once the device is closed (Close
// drained everything).
func (a *Array) PendingFences() int {
	if a == nil || a.dev.enter("PendingFences") != nil {
		return 0
	}
	defer a.dev.leave()
	return a.st.PendingCount()
}

// Err is the array's failure: an ErrFault wrapping the error of a failed op
// that wrote it (or was to), nil while its contents are sound as far as
// is known. It does not wait.
func (a *Array) Err() error {
	if a == nil {
		return newErr("Err", ErrNilArray, "")
	}
	if err := a.st.Poison(); err != nil {
		return &Error{Op: "Err", Kind: ErrFault, Detail: a.String(), Err: err}
	}
	return nil
}

// String describes the array: "Array(2x3 float32 on gpu0)".
func (a *Array) String() string {
	if a == nil {
		return "Array(nil)"
	}
	return fmt.Sprintf("Array(%dx%d %s on gpu%d)", a.rows, a.cols, a.dtype, a.dev.index)
}

// maxElements bounds an array's length so that byte sizes cannot overflow.
const maxElements = 1 << 48

// Empty allocates an uninitialised array.
func (d *Device) Empty(rows, cols int, dt DType) (*Array, error) {
	if err := d.enter("Empty"); err != nil {
		return nil, err
	}
	defer d.leave()
	return d.alloc("Empty", rows, cols, dt)
}

func (d *Device) alloc(op string, rows, cols int, dt DType) (*Array, error) {
	if rows <= 0 || cols <= 0 {
		return nil, newErr(op, ErrShape, "%dx%d: dimensions must be positive", rows, cols)
	}
	if rows > maxElements/cols {
		return nil, newErr(op, ErrShape, "%dx%d: more than %d elements", rows, cols, maxElements)
	}
	if dt != Float32 && dt != Float64 {
		return nil, newErr(op, ErrDType, "unsupported dtype %v", dt)
	}
	a := &Array{rows: rows, cols: cols, dtype: dt}
	if err := d.allocBuffer(op, &a.buffer, uint64(rows*cols*dt.Size())); err != nil {
		var e *Error
		if errors.As(err, &e) && strings.HasPrefix(e.Detail, "allocating ") {
			// Name the array as the user asked for it, not its bytes.
			e.Detail = fmt.Sprintf("allocating %dx%d %s", rows, cols, dt)
		}
		return nil, err
	}
	return a, nil
}

// allocBuffer gives b size bytes of device memory: a cached block, else
// the driver's, waiting for freed memory when the device is full.
func (d *Device) allocBuffer(op string, b *buffer, size uint64) error {
	b.dev, b.size = d, size
	b.st.Init()
	if p, ok := d.cache.take(size); ok {
		b.ptr = p
		return nil
	}
	p, err := d.drv.Malloc(size)
	if err != nil {
		// Memory may be held by the cache, or by freed arrays whose work
		// is still pending.
		_ = d.cache.trim(d.drv)
		if d.syncDebug != SyncDebugOff && d.frees.n.Load() != 0 {
			if err := d.implicitWait(op, "memory of freed arrays whose work is pending", ReasonFree); err != nil {
				return err
			}
		}
		if d.frees.poll(d, true, true) == nil {
			_ = d.cache.trim(d.drv)
			p, err = d.drv.Malloc(size)
		}
		if err != nil {
			kind := ErrUnavailable
			if outOfMemory(err) {
				kind = ErrOutOfMemory
			}
			return &Error{Op: op, Kind: kind, Detail: fmt.Sprintf("allocating %d bytes", size), Err: err}
		}
	}
	b.ptr = p
	return nil
}

// FromFloat32 copies a row-major host slice of rows*cols values to a new
// array. The copy is complete when it returns.
func (d *Device) FromFloat32(rows, cols int, data []float32) (*Array, error) {
	return fromSlice(d, "FromFloat32", rows, cols, Float32, len(data), unsafe.Pointer(unsafe.SliceData(data)))
}

// FromFloat64 is FromFloat32 for float64.
func (d *Device) FromFloat64(rows, cols int, data []float64) (*Array, error) {
	return fromSlice(d, "FromFloat64", rows, cols, Float64, len(data), unsafe.Pointer(unsafe.SliceData(data)))
}

func fromSlice(d *Device, op string, rows, cols int, dt DType, n int, src unsafe.Pointer) (*Array, error) {
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	if rows <= 0 || cols <= 0 || n != rows*cols {
		return nil, newErr(op, ErrShape, "%d values for a %dx%d array", n, rows, cols)
	}
	a, err := d.alloc(op, rows, cols, dt)
	if err != nil {
		return nil, err
	}
	if err := d.drv.CopyHtoD(a.ptr, src, a.size); err != nil {
		_ = d.drv.Free(a.ptr)
		return nil, &Error{Op: op, Kind: ErrUnavailable, Detail: "copying to the device", Err: err}
	}
	// Written by the host, not by an op: a kernel that reads it acquires
	// at system scope first (syncstate.Acquirer).
	a.st.MarkHostWritten()
	return a, nil
}

// CopyToFloat32 copies the array into dst (len rows*cols). It waits on the
// host only for the array's last writer; pending readers do not matter.
func (a *Array) CopyToFloat32(dst []float32) error {
	return a.copyTo(context.Background(), "CopyToFloat32", Float32, len(dst), unsafe.Pointer(unsafe.SliceData(dst)))
}

// CopyToFloat64 is CopyToFloat32 for float64.
func (a *Array) CopyToFloat64(dst []float64) error {
	return a.copyTo(context.Background(), "CopyToFloat64", Float64, len(dst), unsafe.Pointer(unsafe.SliceData(dst)))
}

// CopyToFloat32Context is CopyToFloat32 whose wait for the writer also
// ends when ctx is done (dst is then left as it was). It cancels the wait,
// not the GPU work.
func (a *Array) CopyToFloat32Context(ctx context.Context, dst []float32) error {
	return a.copyTo(ctx, "CopyToFloat32", Float32, len(dst), unsafe.Pointer(unsafe.SliceData(dst)))
}

// CopyToFloat64Context is CopyToFloat32Context for float64.
func (a *Array) CopyToFloat64Context(ctx context.Context, dst []float64) error {
	return a.copyTo(ctx, "CopyToFloat64", Float64, len(dst), unsafe.Pointer(unsafe.SliceData(dst)))
}

// Float32s returns the array's values in a new slice.
func (a *Array) Float32s() ([]float32, error) {
	if a == nil {
		return nil, newErr("Float32s", ErrNilArray, "")
	}
	out := make([]float32, a.Len())
	return out, a.copyTo(context.Background(), "Float32s", Float32, len(out), unsafe.Pointer(unsafe.SliceData(out)))
}

// Float64s returns the array's values in a new slice.
func (a *Array) Float64s() ([]float64, error) {
	if a == nil {
		return nil, newErr("Float64s", ErrNilArray, "")
	}
	out := make([]float64, a.Len())
	return out, a.copyTo(context.Background(), "Float64s", Float64, len(out), unsafe.Pointer(unsafe.SliceData(out)))
}

func (a *Array) copyTo(ctx context.Context, op string, dt DType, n int, dst unsafe.Pointer) error {
	if a == nil {
		return newErr(op, ErrNilArray, "")
	}
	d := a.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.leave()
	if a.dtype != dt {
		return newErr(op, ErrDType, "array is %s", a.dtype)
	}
	if n != a.Len() {
		return newErr(op, ErrShape, "destination holds %d values, array has %d", n, a.Len())
	}
	return a.buffer.download(ctx, op, dst, a)
}

// Free releases the array. It never blocks: if work on the array is still
// pending, the memory is released once that work completes (checked at
// later ops, Synchronize and Close). An array dropped without Free keeps
// its device memory until the device closes: the garbage collector does
// not release it.
func (a *Array) Free() error {
	if a == nil {
		return newErr("Free", ErrNilArray, "")
	}
	return a.buffer.free(a)
}

// release gives a block whose work is done back: to the cache, or to the
// driver when the cache is full.
func (d *Device) release(p driver.DevicePtr, size uint64) error {
	if d.cache.put(p, size) {
		return nil
	}
	if err := d.drv.Free(p); err != nil {
		return &Error{Op: "Free", Kind: ErrUnavailable, Err: err}
	}
	return nil
}

// pendingFrees holds memory freed while work on it was still pending.
type pendingFrees struct {
	mu      sync.Mutex
	entries []pendingFree
	n       atomic.Int32 // len(entries), read without the lock on the fast path
	// sinceAsk counts the polls after submissions (pollSubmitted).
	sinceAsk atomic.Uint32
}

type pendingFree struct {
	ptr    driver.DevicePtr
	size   uint64
	n      int                // fences in inline
	inline [4]syncstate.Fence // the fences, when they fit
	more   []syncstate.Fence  // the fences, when they do not
}

func (e *pendingFree) fences() []syncstate.Fence {
	if e.more != nil {
		return e.more
	}
	return e.inline[:e.n]
}

// add queues a free behind fences, which it copies: freeing an array
// whose work is pending allocates nothing once entries has grown.
func (p *pendingFrees) add(ptr driver.DevicePtr, size uint64, fences []syncstate.Fence) {
	p.mu.Lock()
	p.entries = append(p.entries, pendingFree{ptr: ptr, size: size})
	e := &p.entries[len(p.entries)-1]
	if len(fences) <= len(e.inline) {
		e.n = copy(e.inline[:], fences)
	} else {
		e.more = append([]syncstate.Fence(nil), fences...)
	}
	p.n.Store(int32(len(p.entries)))
	p.mu.Unlock()
}

// pollSubmitted is the poll after a submission: it asks the runtime
// (a stream query per pending stream fence, which costs about as much as
// a launch) only every freeAskEvery submissions, and otherwise releases
// what the timelines already know complete.
func (p *pendingFrees) pollSubmitted(d *Device) {
	ask := p.sinceAsk.Add(1)%freeAskEvery == 0
	_ = p.poll(d, false, ask)
}

// freeAskEvery is how many submissions pass between runtime queries for
// the work that pending frees wait for.
const freeAskEvery = 32

// poller is a timeline that can ask the device whether it is idle (HIP
// streams), which frees use because nothing else may ever record an event.
type poller interface{ Poll() uint64 }

func done(f syncstate.Fence, ask bool) bool {
	if f.Done() {
		return true
	}
	if p, ok := f.TL.(poller); ok && ask {
		return f.Ticket <= p.Poll()
	}
	return false
}

// poll releases entries whose work is done, asking the runtime where the
// timeline does not know (ask). With wait set it first waits on the host
// for every pending fence (counted as a free wait).
func (p *pendingFrees) poll(d *Device, wait, ask bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	kept := p.entries[:0]
	for i := range p.entries {
		e := p.entries[i]
		ready := true
		for _, f := range e.fences() {
			if done(f, ask || wait) {
				continue
			}
			if !wait {
				ready = false
				break
			}
			d.countHostWait(ReasonFree)
			tw := d.obs.waitBegin("Free", f, ReasonFree, hostTrack)
			err := f.TL.WaitHost(f.Ticket)
			d.obs.waitEnd(tw, err)
			if err != nil {
				errs = append(errs, &Error{Op: "Free", Kind: waitKind(f, err), Detail: "waiting for " + f.String(), Err: err})
				ready = false
				break
			}
		}
		if ready {
			if err := d.release(e.ptr, e.size); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		kept = append(kept, e)
	}
	clear(p.entries[len(kept):])
	p.entries = kept
	p.n.Store(int32(len(kept)))
	return joinErrs(errs)
}

func joinErrs(errs []error) error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil
	}
	if len(out) == 1 {
		return out[0]
	}
	return fmt.Errorf("%w (and %d more errors)", out[0], len(out)-1)
}

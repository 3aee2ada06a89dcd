package rocsync

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
)

// buffer is tracked device memory: what every op declares it reads or
// writes. Buffer is its public form, Array a typed view over one.
type buffer struct {
	dev   *Device
	ptr   driver.DevicePtr
	size  uint64          // bytes
	st    syncstate.State // the writer fence and reader fences
	freed bool            // guarded by st's lock
	// pins counts the live Recordings that use the buffer, and pinnedBy
	// is the newest of them (guarded by st's lock): it cannot be freed
	// until they are closed (record.go).
	pins     int32
	pinnedBy *Recording
	// freeUnpinned frees it when the last recording using it closes (a
	// reduction workspace replaced while a recording used it).
	freeUnpinned bool
}

// Buffer is device memory of raw bytes with its own sync state, for user
// kernels and library calls: ops declare whether they read or write it
// (Read, Write, ReadWrite) and are ordered after what they must follow,
// like ops on arrays. Make one with Device.NewBuffer; Array.Buffer is the
// buffer an array is built on.
type Buffer buffer

// Operand is what an op reads or writes: a *Buffer or an *Array.
type Operand interface {
	trackedBuffer() *buffer
	fmt.Stringer
}

func (b *Buffer) trackedBuffer() *buffer {
	if b == nil {
		return nil
	}
	return (*buffer)(b)
}

func (a *Array) trackedBuffer() *buffer {
	if a == nil {
		return nil
	}
	return &a.buffer
}

// NewBuffer allocates size bytes of uninitialised device memory.
func (d *Device) NewBuffer(size int) (*Buffer, error) {
	if err := d.enter("NewBuffer"); err != nil {
		return nil, err
	}
	defer d.leave()
	if size <= 0 || size > maxElements {
		return nil, newErr("NewBuffer", ErrShape, "%d bytes: the size must be positive and at most %d", size, maxElements)
	}
	b := new(Buffer)
	if err := d.allocBuffer("NewBuffer", (*buffer)(b), uint64(size)); err != nil {
		return nil, err
	}
	return b, nil
}

// Buffer returns the buffer the array is built on: the same memory and
// the same sync state, so ops on either are ordered with ops on the
// other. Freeing it frees the array.
func (a *Array) Buffer() *Buffer {
	if a == nil {
		return nil
	}
	return (*Buffer)(&a.buffer)
}

// Pointer is the buffer's device address, for library calls and kernels
// outside rocsync: an op that uses it must declare the buffer (LibraryCall
// operands), or the ordering cannot see it.
func (b *Buffer) Pointer() uintptr {
	if b == nil {
		return 0
	}
	return uintptr(b.ptr)
}

// Size is the buffer's size in bytes (0 for a nil buffer).
func (b *Buffer) Size() int {
	if b == nil {
		return 0
	}
	return int(b.size)
}

// Device is the buffer's device.
func (b *Buffer) Device() *Device {
	if b == nil {
		return nil
	}
	return b.dev
}

// String names the buffer, its size and its device, as errors show it.
func (b *Buffer) String() string {
	if b == nil {
		return "Buffer(nil)"
	}
	return fmt.Sprintf("Buffer(%d bytes on gpu%d)", b.size, b.dev.index)
}

// Err is the buffer's failure, as Array.Err.
func (b *Buffer) Err() error {
	if b == nil {
		return newErr("Err", ErrNilArray, "nil buffer")
	}
	if err := b.st.Poison(); err != nil {
		return &Error{Op: "Err", Kind: ErrFault, Detail: b.String(), Err: err}
	}
	return nil
}

// Free releases the buffer without blocking, as Array.Free.
func (b *Buffer) Free() error {
	if b == nil {
		return newErr("Free", ErrNilArray, "nil buffer")
	}
	return (*buffer)(b).free(b)
}

// Bytes returns the buffer's contents in a new slice, waiting on the host
// for its last writer only.
func (b *Buffer) Bytes() ([]byte, error) {
	if b == nil {
		return nil, newErr("Bytes", ErrNilArray, "nil buffer")
	}
	out := make([]byte, b.size)
	return out, b.CopyTo(context.Background(), out)
}

// CopyTo copies the buffer into dst (len Size), waiting on the host for
// its last writer; a done ctx (nil: none) ends the wait, not the work.
func (b *Buffer) CopyTo(ctx context.Context, dst []byte) error {
	if b == nil {
		return newErr("CopyTo", ErrNilArray, "nil buffer")
	}
	if err := b.dev.enter("CopyTo"); err != nil {
		return err
	}
	defer b.dev.leave()
	if uint64(len(dst)) != b.size {
		return newErr("CopyTo", ErrShape, "destination holds %d bytes, buffer has %d", len(dst), b.size)
	}
	return (*buffer)(b).download(ctx, "CopyTo", unsafe.Pointer(unsafe.SliceData(dst)), b)
}

// download waits for the writer and copies the whole buffer to dst; the
// caller has entered the device. It holds the buffer's lock only to look
// at its state and to copy, never across the wait: an op of another task
// that needs no host wait (it reads the buffer too, ordered on the device)
// is not held up behind a read-back. A writer that committed while it
// waited is waited for in turn.
func (b *buffer) download(ctx context.Context, op string, dst unsafe.Pointer, who fmt.Stringer) error {
	d := b.dev
	b.st.Lock()
	for {
		if b.freed {
			b.st.Unlock()
			return newErr(op, ErrFreed, "%v", who)
		}
		if r := b.pinnedBy; r != nil && r.recording.Load() {
			b.st.Unlock()
			return newErr(op, ErrRecording, "%v is used by %v: its ops have not run", who, r)
		}
		// Done before the failure: a writer that fails as it completes
		// is seen failed.
		w := b.st.WriterLocked()
		done := w.Done()
		if err := b.st.PoisonLocked(); err != nil {
			// A writer known to have failed is not waited for, whether or
			// not its ticket counts as complete yet (syncstate.Timeline's
			// Failed): the error is Err's. Nothing is copied: dst keeps
			// what it held.
			b.st.Unlock()
			return &Error{Op: op, Kind: ErrFault, Detail: who.String(), Err: err}
		}
		if done {
			break
		}
		b.st.Unlock()
		if err := fromHostFunc(op); err != nil {
			return err
		}
		d.countHostWait(ReasonReadBack)
		tw := d.obs.waitBegin(op, w, ReasonReadBack, hostTrack)
		err := syncstate.WaitHostContext(ctx, w)
		d.obs.waitEnd(tw, err)
		if err != nil {
			return &Error{Op: op, Kind: waitKind(w, err), Detail: "waiting for the writer " + w.String(), Err: err}
		}
		b.st.Lock()
	}
	defer b.st.Unlock()
	if err := d.drv.CopyDtoH(dst, b.ptr, b.size); err != nil {
		return &Error{Op: op, Kind: ErrUnavailable, Detail: "copying to the host", Err: err}
	}
	return nil
}

// free marks the buffer freed and releases its memory once its work is
// done.
func (b *buffer) free(who fmt.Stringer) error {
	d := b.dev
	if err := d.enter("Free"); err != nil {
		return err
	}
	defer d.leave()
	b.st.Lock()
	if b.freed {
		b.st.Unlock()
		return newErr("Free", ErrFreed, "double free of %v", who)
	}
	if b.pins > 0 {
		err := pinnedErr("Free", b, who)
		b.st.Unlock()
		return err
	}
	b.freed = true
	var buf [8]syncstate.Fence
	pending := b.st.PendingLocked(buf[:0])
	b.st.Unlock()
	if len(pending) == 0 {
		return d.release(b.ptr, b.size)
	}
	d.frees.add(b.ptr, b.size, pending)
	return nil
}

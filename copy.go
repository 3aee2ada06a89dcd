package rocsync

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/syncstate"
)

// Copies between host and device are ordered ops on the task's library
// stream that do not block the submitting goroutine: the host side goes
// through pooled pinned staging memory (hipHostMalloc, cuMemHostAlloc),
// which is what asynchronous copies need. A staging slot is tracked like
// everything else: it carries the fence of the copy that last used it and
// is reused only once that copy has completed.
//
// A large copy is split into chunks, each its own copy op on the library
// stream through its part of one slot, so that the CPU copy of chunk i+1
// into staging (Upload) overlaps the DMA of chunk i, and the CPU copy of
// chunk i out of staging (Pending.Wait) overlaps the DMA of chunk i+1. The
// chunks of one copy share a slot, so none waits for another's staging.

// minStaging is the smallest staging slot: pinned allocations cost tens of
// microseconds and pin whole pages, so small copies share 64 KiB slots.
const minStaging = 64 << 10

// maxStaging bounds the staging slots a device keeps: past it, a copy
// waits on the host for the oldest idle slot's copy (a throttle wait)
// rather than pin more memory. Downloads not yet waited for hold their
// slot and may take the pool past it.
const maxStaging = 8

// copyChunk is the smallest chunk of a split copy: 4 MiB is ~80 µs of DMA
// at 50 GB/s, long against the ~µs an op costs to submit, short against
// the copy so the pipeline fills fast. maxCopyChunks bounds the chunks
// of one copy (larger copies get larger chunks).
const (
	copyChunk     = 4 << 20
	maxCopyChunks = 64
)

// chunking splits a copy of size bytes: chunks of chunk bytes (the last
// smaller), n ≥ 1 of them.
func chunking(size uint64) (chunk uint64, n int) {
	chunk = max(copyChunk, (size+maxCopyChunks-1)/maxCopyChunks)
	chunk = (chunk + minStaging - 1) &^ (minStaging - 1)
	return chunk, max(1, int((size+chunk-1)/chunk))
}

type stagingSlot struct {
	p     unsafe.Pointer
	size  uint64
	fence syncstate.Fence // the last copy through the slot (zero: none)
	busy  bool            // handed to a copy not yet recorded, or a download not yet waited for
	wg    sync.WaitGroup  // the CPU copy's workers (hostCopy), for the copy holding the slot
}

// stagingPool is a device's pinned staging memory.
type stagingPool struct {
	mu    sync.Mutex
	slots []*stagingSlot
}

// take returns an idle slot of at least size bytes whose last copy has
// completed, allocating one if none is. Completed, not merely ordered:
// the CPU writes the slot (Upload) before any op is submitted, which no
// device-side wait can order, unlike peer staging (peerCopies.take),
// where only GPU ops touch the slot and its sync state orders them. That
// is why the two pools do not share one take.
func (p *stagingPool) take(d *Device, op string, size uint64) (*stagingSlot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if hm, ok := d.drv.(driver.HostMemory); ok && len(p.slots) > maxStaging {
		if err := p.pruneLocked(hm, op); err != nil {
			return nil, err
		}
	}
	for _, s := range p.slots {
		if !s.busy && s.size >= size && (s.fence.IsZero() || done(s.fence, true) || testhooks.SkipStagingWait.Load()) {
			s.busy = true
			return s, nil
		}
	}
	hm, ok := d.drv.(driver.HostMemory)
	if !ok {
		return nil, newErr(op, ErrUnavailable, "the %s backend has no pinned host memory for asynchronous copies", d.backend)
	}
	if len(p.slots) >= maxStaging {
		for i, s := range p.slots {
			if s.busy {
				continue
			}
			if !done(s.fence, true) {
				// Blocking: seen at once, no polling.
				if err := d.stagingWait(op, s.fence, true, "waiting for staging memory"); err != nil {
					return nil, err
				}
			}
			if s.size >= size {
				s.busy = true
				return s, nil
			}
			// Too small: replace it by one that fits.
			if err := freeStaging(hm, op, s.p); err != nil {
				return nil, err
			}
			p.slots = append(p.slots[:i], p.slots[i+1:]...)
			break
		}
	}
	ptr, n, err := allocStaging(hm, op, size)
	if err != nil {
		return nil, err
	}
	if d.hosts != nil {
		d.hosts.TrackHost(ptr) // the checker sees the host's and the DMA's accesses to it
	}
	s := &stagingSlot{p: ptr, size: n, busy: true}
	p.slots = append(p.slots, s)
	return s, nil
}

// stagingWait waits on the host for f, the last copy through staging
// memory a pool is about to reuse or replace: a throttle wait, announced
// in sync-debug mode and traced. blocking waits with one blocking runtime
// call (waitCopy) instead of the timeline's own host wait. A copy that
// failed is no error here (the copy reports it); a wait that failed is
// one, with detail.
func (d *Device) stagingWait(op string, f syncstate.Fence, blocking bool, detail string) error {
	if d.syncDebug != SyncDebugOff {
		if err := d.implicitWait(op, "staging memory of "+f.String(), ReasonThrottle); err != nil {
			return err
		}
	}
	d.countHostWait(ReasonThrottle)
	tw := d.obs.waitBegin(op, f, ReasonThrottle, hostTrack)
	var err error
	if blocking {
		err = waitCopy(context.Background(), f)
	} else {
		err = f.TL.WaitHost(f.Ticket)
	}
	d.obs.waitEnd(tw, err)
	if err != nil && f.TL.Failed(f.Ticket) == nil {
		return &Error{Op: op, Kind: ownWaitKind(err), Detail: detail, Err: err}
	}
	return nil
}

// allocStaging allocates pinned host memory for a staging slot of at
// least size bytes (upload/download staging and peer staging alike): the
// smallest power of two from minStaging that holds size, so that a slot
// serves the sizes near its own.
func allocStaging(hm driver.HostMemory, op string, size uint64) (unsafe.Pointer, uint64, error) {
	n := uint64(minStaging)
	for n < size {
		n *= 2
	}
	ptr, err := hm.HostAlloc(n)
	if err != nil {
		return nil, 0, &Error{Op: op, Kind: ErrUnavailable, Detail: "allocating pinned staging memory", Err: err}
	}
	return ptr, n, nil
}

// freeStaging frees a staging slot's memory that a pool replaces.
func freeStaging(hm driver.HostMemory, op string, p unsafe.Pointer) error {
	if err := hm.HostFree(p); err != nil {
		return &Error{Op: op, Kind: ErrUnavailable, Detail: "freeing pinned staging memory", Err: err}
	}
	return nil
}

// pruneLocked frees idle slots past maxStaging whose last copy has
// completed: downloads not yet waited for take the pool past its bound,
// and once they are waited for or released it shrinks back. The caller
// holds mu.
func (p *stagingPool) pruneLocked(hm driver.HostMemory, op string) error {
	for i := 0; len(p.slots) > maxStaging && i < len(p.slots); {
		s := p.slots[i]
		if s.busy || !(s.fence.IsZero() || done(s.fence, true)) {
			i++
			continue
		}
		if err := freeStaging(hm, op, s.p); err != nil {
			return err
		}
		p.slots = append(p.slots[:i], p.slots[i+1:]...)
	}
	return nil
}

// put hands a slot back with the fence of the copy that used it.
func (p *stagingPool) put(s *stagingSlot, f syncstate.Fence) {
	p.mu.Lock()
	s.fence, s.busy = f, false
	p.mu.Unlock()
}

// free releases every slot; the device has drained.
func (p *stagingPool) free(d *Device) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	hm, ok := d.drv.(driver.HostMemory)
	if !ok {
		return nil
	}
	var errs []error
	for _, s := range p.slots {
		errs = append(errs, hm.HostFree(s.p))
	}
	p.slots = nil
	return joinErrs(errs)
}

// Staged reports how many pinned staging slots the device holds and their
// bytes: the pool grows only while copies are in flight together.
func (d *Device) Staged() (slots int, bytes uint64) {
	if d == nil {
		return 0, 0
	}
	d.staging.mu.Lock()
	defer d.staging.mu.Unlock()
	for _, s := range d.staging.slots {
		bytes += s.size
	}
	return len(d.staging.slots), bytes
}

func bytesOf[T float32 | float64](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(T(0))))
}

// Upload copies src into dst (a Buffer or an Array; len(src) must be its
// size in bytes), ordered after the work that reads or writes dst. It
// returns once src is copied into staging memory (src may then be reused)
// and the copy is queued; it does not wait for the GPU. A large copy is
// several copy ops on the library stream, each queued as soon as its part
// of src is staged.
func (t *Task) Upload(dst Operand, src []byte) error {
	const name = "Upload"
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	b, err := t.copyOperand(name, dst, len(src))
	if err != nil {
		return err
	}
	slot, err := t.dev.staging.take(t.dev, name, b.size)
	if err != nil {
		return err
	}
	from := unsafe.Pointer(unsafe.SliceData(src))
	chunk, n := chunking(b.size)
	var last syncstate.Fence
	for i := range n {
		off := uint64(i) * chunk
		size := min(chunk, b.size-off)
		host := unsafe.Add(slot.p, off)
		if h := t.dev.hosts; h != nil {
			h.HostAccess(host, size, true, "Upload: CPU copy into staging")
		}
		if size != 0 {
			hostCopy(host, unsafe.Add(from, off), size, &slot.wg)
		}
		op := &t.ops.copy
		*op = driver.CopyOp{Direction: driver.HostToDevice, Dst: b.ptr + driver.DevicePtr(off), Host: host, Size: size}
		var f syncstate.Fence
		f, err = t.submit(name, op, append(t.operands[:0], access{b, dst, Write}))
		if !f.IsZero() {
			// Submitted, even if a wait after it failed: the slot is
			// reused only behind this copy.
			last = f
		}
		if err != nil {
			break
		}
	}
	t.dev.staging.put(slot, last) // the chunks run in order: the last one's fence covers them
	return err
}

// UploadFloat32 is Upload of an array's values (len rows*cols).
func (t *Task) UploadFloat32(dst *Array, src []float32) error {
	if err := t.check("UploadFloat32", dst); err != nil {
		return err
	}
	if dst.dtype != Float32 {
		return newErr("UploadFloat32", ErrDType, "%v", dst)
	}
	return t.Upload(dst, bytesOf(src))
}

// UploadFloat64 is Upload of an array's values (len rows*cols).
func (t *Task) UploadFloat64(dst *Array, src []float64) error {
	if err := t.check("UploadFloat64", dst); err != nil {
		return err
	}
	if dst.dtype != Float64 {
		return newErr("UploadFloat64", ErrDType, "%v", dst)
	}
	return t.Upload(dst, bytesOf(src))
}

// copyOperand checks a copy's device side against a host size.
func (t *Task) copyOperand(op string, x Operand, n int) (*buffer, error) {
	if x == nil {
		return nil, newErr(op, ErrNilArray, "")
	}
	b := x.trackedBuffer()
	if b == nil {
		return nil, newErr(op, ErrNilArray, "")
	}
	if b.dev != t.dev {
		return nil, newErr(op, ErrDeviceMismatch, "%v used on a task of gpu%d", x, t.dev.index)
	}
	if uint64(n) != b.size {
		return nil, newErr(op, ErrShape, "host side has %d bytes, %v has %d", n, x, b.size)
	}
	return b, nil
}

// Pending is a download in flight: Wait for it, or be called back by Then.
type Pending struct {
	dev   *Device
	fence syncstate.Fence // the last chunk's copy
	slot  *stagingSlot
	dst   []byte
	who   Operand

	// The chunks: the copy op of chunk i is tickets[i] on fence.TL, with
	// the event a wait for it waits on pinned (pins[i], 0: none) so that
	// waiting later does not wait for work submitted after the download.
	chunk   uint64
	n, next int // chunks, and the first not yet copied out
	tickets [maxCopyChunks]uint64
	pins    [maxCopyChunks]uintptr

	mu   sync.Mutex
	done bool
	err  error
}

// Download copies src (a Buffer or an Array) into dst (len: its size in
// bytes), ordered after src's writer, without waiting: dst holds the data
// once the returned Pending's Wait returns nil, and must not be touched
// before. A large download is several copy ops on the library stream; Wait
// copies each part out of staging memory as soon as its copy completes.
//
// The download holds pinned staging memory until Wait returns or the
// Pending is released: by Release, or, for a Pending dropped without
// either, by the garbage collector (a finalizer), so downloads nobody
// waits for do not pin memory until the device closes. Released staging
// memory is reused only once the download's copies have completed.
func (t *Task) Download(src Operand, dst []byte) (*Pending, error) {
	const name = "Download"
	if err := t.check(name); err != nil {
		return nil, err
	}
	if err := t.begin(name); err != nil {
		return nil, err
	}
	defer t.end()
	b, err := t.copyOperand(name, src, len(dst))
	if err != nil {
		return nil, err
	}
	slot, err := t.dev.staging.take(t.dev, name, b.size)
	if err != nil {
		return nil, err
	}
	p := &Pending{dev: t.dev, slot: slot, dst: dst, who: src}
	p.chunk, p.n = chunking(b.size)
	for i := range p.n {
		off := uint64(i) * p.chunk
		op := &t.ops.copy
		*op = driver.CopyOp{Direction: driver.DeviceToHost, Src: b.ptr + driver.DevicePtr(off), Host: unsafe.Add(slot.p, off), Size: min(p.chunk, b.size-off)}
		f, err := t.submit(name, op, append(t.operands[:0], access{b, src, Read}))
		if err != nil {
			if !f.IsZero() {
				// Submitted, but a wait after it failed: the slot is
				// reused only behind this copy.
				p.fence = f
			}
			p.unpin()
			t.dev.staging.put(slot, p.fence)
			return nil, err
		}
		p.fence, p.tickets[i] = f, f.Ticket
		if pn, ok := f.TL.(ticketPinner); ok && p.n > 1 {
			if p.pins[i], err = pn.PinTicket(f.Ticket); err != nil {
				// The copies are queued: the Pending waits without the pins.
				p.unpin()
			}
		}
	}
	runtime.SetFinalizer(p, (*Pending).Release)
	return p, nil
}

// errReleased is Wait's answer after Release.
var errReleased = errors.New("the download was released")

// Release gives the download up: its staging memory goes back to the
// device's pool (reused once the copies complete), the destination is
// not written, and Wait then returns an ErrInvalid error. After Wait has
// returned (anything but ErrTimeout), Release does nothing. A Pending
// dropped without Wait or Release is released by the garbage collector.
func (p *Pending) Release() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	p.err = &Error{Op: "Wait", Kind: ErrInvalid, Detail: "download of " + p.who.String(), Err: errReleased}
	runtime.SetFinalizer(p, nil)
	if p.dev.enter("Release") == nil { // a closed device freed its staging and events
		p.unpin()
		p.dev.staging.put(p.slot, p.fence)
		p.dev.leave()
	}
	p.slot, p.dst = nil, nil
}

// unpin releases the pinned events of the chunks not yet copied out.
func (p *Pending) unpin() {
	pn, ok := p.fence.TL.(ticketPinner)
	for i := p.next; i < p.n; i++ {
		if ok {
			pn.UnpinTicket(p.pins[i])
		}
		p.pins[i] = 0
	}
}

// DownloadFloat32 is Download of an array's values.
func (t *Task) DownloadFloat32(src *Array, dst []float32) (*Pending, error) {
	if err := t.check("DownloadFloat32", src); err != nil {
		return nil, err
	}
	if src.dtype != Float32 {
		return nil, newErr("DownloadFloat32", ErrDType, "%v", src)
	}
	return t.Download(src, bytesOf(dst))
}

// DownloadFloat64 is Download of an array's values.
func (t *Task) DownloadFloat64(src *Array, dst []float64) (*Pending, error) {
	if err := t.check("DownloadFloat64", src); err != nil {
		return nil, err
	}
	if src.dtype != Float64 {
		return nil, newErr("DownloadFloat64", ErrDType, "%v", src)
	}
	return t.Download(src, bytesOf(dst))
}

// Wait waits on the host for the download and copies the data into the
// destination, part by part as each part's copy completes. A done ctx
// (nil: none) ends the wait with an ErrTimeout error and the download
// stays pending (Wait again). A failed source is refused by Download
// itself; a copy that fails on the device is an ErrFault error, and the
// destination may then hold the parts copied before the failure. Once
// Wait has returned anything else it returns the same again.
func (p *Pending) Wait(ctx context.Context) error {
	if p == nil {
		// What a refused Download returns: its error said why.
		return newErr("Wait", ErrInvalid, "nil Pending")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return p.err
	}
	// The staging memory lives until the device closes.
	if err := p.dev.enter("Wait"); err != nil {
		return err
	}
	defer p.dev.leave()
	tw := -1
	if !p.fence.Done() {
		if err := fromHostFunc("Wait"); err != nil {
			return err
		}
		p.dev.countHostWait(ReasonReadBack)
		tw = p.dev.obs.waitBegin("Wait", p.fence, ReasonReadBack, hostTrack)
	}
	var err error
	for ; p.next < p.n; p.next++ {
		i := p.next
		if err = waitCopy(ctx, syncstate.Fence{TL: p.fence.TL, Ticket: p.tickets[i]}); err != nil {
			break
		}
		off := uint64(i) * p.chunk
		size := min(p.chunk, uint64(len(p.dst))-off)
		host := unsafe.Add(p.slot.p, off)
		if h := p.dev.hosts; h != nil {
			h.HostAccess(host, size, false, "Pending.Wait: CPU copy out of staging")
		}
		if size != 0 {
			hostCopy(unsafe.Pointer(&p.dst[off]), host, size, &p.slot.wg)
		}
		if pn, ok := p.fence.TL.(ticketPinner); ok {
			pn.UnpinTicket(p.pins[i])
			p.pins[i] = 0
		}
	}
	p.dev.obs.waitEnd(tw, err)
	if err != nil && waitKind(p.fence, err) == ErrTimeout {
		return &Error{Op: "Wait", Kind: ErrTimeout, Detail: "download of " + p.who.String(), Err: err}
	}
	if err != nil {
		p.err = &Error{Op: "Wait", Kind: ErrFault, Detail: "download of " + p.who.String(), Err: err}
		p.unpin()
	}
	p.done = true
	runtime.SetFinalizer(p, nil)
	p.dev.staging.put(p.slot, p.fence)
	p.slot, p.dst = nil, nil
	return p.err
}

// Then calls fn with Wait's result once the download completes, on a
// goroutine of its own; it does not block. On a nil Pending (a refused
// Download's) fn gets Wait's ErrInvalid error; a nil fn drops the result.
func (p *Pending) Then(fn func(error)) {
	if fn == nil {
		fn = func(error) {}
	}
	if p == nil {
		go fn(p.Wait(context.Background()))
		return
	}
	go func() {
		err := p.Wait(context.Background())
		p.dev.obs.callback("Then", p.fence, func() { fn(err) })
	}()
}

// CopyBuffer copies src into dst on the device (two Buffers or Arrays of
// the same size in bytes, not the same one), ordered like any op.
func (t *Task) CopyBuffer(dst, src Operand) error {
	const name = "CopyBuffer"
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	return t.copyBuffer(name, dst, src)
}

// copyBuffer is CopyBuffer for a caller that uses the task (begin).
func (t *Task) copyBuffer(name string, dst, src Operand) error {
	if src == nil || src.trackedBuffer() == nil {
		return newErr(name, ErrNilArray, "source")
	}
	s := src.trackedBuffer()
	d, err := t.copyOperand(name, dst, int(s.size))
	if err != nil {
		return err
	}
	if s.dev != t.dev {
		return newErr(name, ErrDeviceMismatch, "%v used on a task of gpu%d", src, t.dev.index)
	}
	if s == d {
		return newErr(name, ErrInvalid, "source and destination are the same buffer")
	}
	op := &t.ops.copy
	*op = driver.CopyOp{Direction: driver.DeviceToDevice, Dst: d.ptr, Src: s.ptr, Size: d.size}
	_, err = t.submit(name, op, append(t.operands[:0], access{s, src, Read}, access{d, dst, Write}))
	return err
}

package rocsync

import (
	"context"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
)

// Several GPUs. An array belongs to one device, and an op's kernels and
// library calls touch only memory of the task's device: a kernel on device
// B never dereferences device A's memory (that would need peer mappings
// that rocsync does not ask for). Data crosses devices through explicit
// peer copies (Task.CopyPeer) and collectives, which are ordered ops like
// any other: a copy on B that reads a buffer of A waits for A's writer, and
// A's next write waits for the copy, on the device where the two can
// (syncstate.Placed: HIP and CUDA events and HSA signals reach across
// devices), otherwise on the host, counted as ReasonCrossDevice.

// peerCopies is a device's state for copies into it from other devices:
// which peers it reaches directly, the pinned staging slots of copies
// staged through host memory, and (as a source) the internal task that
// runs the first half of staged copies out of it.
type peerCopies struct {
	mu     sync.Mutex
	staged bool             // stage every copy (testhooks.Device.StagePeerCopies)
	direct map[*Device]bool // EnablePeer's answer per source device
	slots  []*peerSlot

	taskMu sync.Mutex // held while submitting on task: it serves many goroutines
	task   *Task      // made at the first staged copy out of this device

	// readers are the newest direct copies out of this device, one per
	// consumer timeline: its Synchronize and Close wait for them too,
	// since they read its memory from another device's stream.
	readers []syncstate.Fence

	// Copies out of this device being submitted (on other devices'
	// tasks), and whether it is closing: Close waits for them to be
	// submitted, and so recorded in readers, before it takes its lock,
	// and refuses new ones. A copy does not hold the source device's
	// lock: holding two devices' locks, a copy each way and a Close of
	// each device could wait for one another.
	inflight int
	closing  bool
	idle     *sync.Cond // on mu: inflight reached 0
}

// peerSlot is pinned host memory a staged copy goes through. It is tracked
// like a buffer: the copy out of the source writes it, the copy into the
// destination reads it, so the second waits for the first on the device,
// and the slot's next first half waits for the last second half. busy
// keeps it to one copy from the first half's submission to the second's.
type peerSlot struct {
	p    unsafe.Pointer
	buf  buffer // the sync state (ptr and dev unused but for messages)
	busy bool
}

// String names the slot in errors.
func (s *peerSlot) String() string { return fmt.Sprintf("peer staging (%d bytes)", s.buf.size) }

func (s *peerSlot) trackedBuffer() *buffer { return &s.buf }

// maxPeerSlots bounds the idle staging slots a device keeps: past it, a
// slot too small is replaced rather than another one pinned.
const maxPeerSlots = 8

// CopyPeer copies src into dst (Buffers or Arrays of the same size in
// bytes), where dst belongs to t's device and src to another device of the
// same OpenAll call; with src on t's device it is CopyBuffer. The copy is
// an ordered op on t's library stream: it waits for src's writer (on
// src's device) and for dst's readers and writer, and src's next writer
// waits for it. It does not block the host.
//
// Where the two GPUs reach each other (NVLink, XGMI, PCIe peer access),
// peer access is enabled once per pair and the copy is one
// cuMemcpyPeerAsync or hipMemcpyPeerAsync. Otherwise it is staged through
// pinned host memory: a copy to host on an internal task of src's device,
// then a copy to dst on t's stream, ordered after the first on the device.
//
// Errors: nil operands ErrNilArray, dst not on t's device or devices of
// different Open calls ErrDeviceMismatch, sizes that differ ErrShape, a
// freed operand ErrFreed, a closed device ErrClosed.
func (t *Task) CopyPeer(dst, src Operand) error {
	const name = "CopyPeer"
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if dst == nil || dst.trackedBuffer() == nil {
		return newErr(name, ErrNilArray, "destination")
	}
	if src == nil || src.trackedBuffer() == nil {
		return newErr(name, ErrNilArray, "source")
	}
	d, s := dst.trackedBuffer(), src.trackedBuffer()
	if d.dev != t.dev {
		return newErr(name, ErrDeviceMismatch, "the destination %v is not on the task's device %v", dst, t.dev)
	}
	if s.dev == t.dev {
		return t.copyBuffer("CopyBuffer", dst, src)
	}
	from := s.dev
	if from.openCall != t.dev.openCall {
		return newErr(name, ErrDeviceMismatch, "%v and %v were opened by different calls: open them together with OpenAll", from, t.dev)
	}
	if s.size != d.size {
		return newErr(name, ErrShape, "source %v has %d bytes, destination %v has %d", src, s.size, dst, d.size)
	}
	// The source device must stay open while its memory is read.
	if !from.peer.use() {
		return newErr(name, ErrClosed, "the source device %v is closed", from)
	}
	defer from.peer.done()
	direct, err := t.dev.peerDirect(name, from)
	if err != nil {
		return err
	}
	if direct {
		op := &t.ops.peer
		*op = driver.PeerCopyOp{Dst: d.ptr, Src: s.ptr, Size: d.size, Peer: from.drv}
		f, err := t.submit(name, op, append(t.operands[:0], access{s, src, Read}, access{d, dst, Write}))
		if err == nil {
			from.peer.noteReader(f)
		}
		return err
	}
	return t.copyStaged(name, dst, src, d, s)
}

// use counts a copy out of the device as being submitted; false when the
// device is closing or closed.
func (p *peerCopies) use() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.inflight++
	return true
}

// done ends what use began.
func (p *peerCopies) done() {
	p.mu.Lock()
	p.inflight--
	if p.inflight == 0 && p.idle != nil {
		p.idle.Broadcast()
	}
	p.mu.Unlock()
}

// beginClose refuses new copies out of the device and waits for those
// being submitted.
func (p *peerCopies) beginClose() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closing = true
	if p.idle == nil {
		p.idle = sync.NewCond(&p.mu)
	}
	for p.inflight > 0 {
		p.idle.Wait()
	}
}

// stayOpen undoes beginClose when Close leaves the device open.
func (p *peerCopies) stayOpen() {
	p.mu.Lock()
	p.closing = false
	p.mu.Unlock()
}

// noteReader remembers a direct copy out of the device.
func (p *peerCopies) noteReader(f syncstate.Fence) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.readers[:0]
	for _, r := range p.readers {
		if r.TL != f.TL && !r.Done() {
			kept = append(kept, r)
		}
	}
	p.readers = append(kept, f)
}

// waitReaders waits on the host for the direct copies out of the device
// (counted as sync waits): Synchronize and Close must not return while
// another device still reads this one's memory.
func (p *peerCopies) waitReaders(ctx context.Context, d *Device) error {
	p.mu.Lock()
	readers := append([]syncstate.Fence(nil), p.readers...)
	p.mu.Unlock()
	var errs []error
	for _, f := range readers {
		if f.Done() {
			continue
		}
		d.countHostWait(ReasonSync)
		tw := d.obs.waitBegin("Synchronize", f, ReasonSync, hostTrack)
		err := syncstate.WaitHostContext(ctx, f)
		d.obs.waitEnd(tw, err)
		if err != nil && waitKind(f, err) == ErrTimeout {
			errs = append(errs, &Error{Op: "Synchronize", Kind: ErrTimeout, Detail: "waiting for a copy to another device at " + f.String(), Err: err})
		}
		// A failed copy is the copying device's to report.
	}
	return joinErrs(errs)
}

// peerDirect reports whether the device's copies reach from's memory,
// enabling peer access the first time a pair is used.
func (d *Device) peerDirect(op string, from *Device) (bool, error) {
	d.peer.mu.Lock()
	defer d.peer.mu.Unlock()
	if ok, seen := d.peer.direct[from]; seen {
		return ok, nil
	}
	ok := false
	if pc, is := d.drv.(driver.PeerCopier); is && !d.peer.staged {
		var err error
		if ok, err = pc.EnablePeer(from.drv); err != nil {
			return false, &Error{Op: op, Kind: ErrUnavailable, Detail: fmt.Sprintf("enabling peer access from %v to %v", d, from), Err: err}
		}
	}
	if d.peer.direct == nil {
		d.peer.direct = map[*Device]bool{}
	}
	d.peer.direct[from] = ok
	return ok, nil
}

// PeerAccess reports whether copies into d from the device from go
// directly between the GPUs (true) or through pinned host memory (false),
// enabling peer access the first time, as CopyPeer does.
func (d *Device) PeerAccess(from *Device) (bool, error) {
	const name = "PeerAccess"
	if err := d.enter(name); err != nil {
		return false, err
	}
	defer d.leave()
	if from == nil {
		return false, newErr(name, ErrInvalid, "nil device")
	}
	if from == d || from.openCall != d.openCall {
		return false, newErr(name, ErrDeviceMismatch, "%v and %v: peers are two devices of one OpenAll call", d, from)
	}
	if err := from.enter(name); err != nil {
		return false, err
	}
	defer from.leave()
	return d.peerDirect(name, from)
}

// copyStaged copies through a pinned slot: src → slot on the source
// device's peer task, slot → dst on t.
func (t *Task) copyStaged(name string, dst, src Operand, d, s *buffer) error {
	from := s.dev
	slot, err := t.dev.peer.take(t.dev, name, d.size)
	if err != nil {
		return err
	}
	defer t.dev.peer.put(slot)
	pt, err := from.peerTask(name)
	if err != nil {
		return err
	}
	from.peer.taskMu.Lock()
	down := &pt.ops.copy
	*down = driver.CopyOp{Direction: driver.DeviceToHost, Src: s.ptr, Host: slot.p, Size: s.size}
	_, err = pt.submit(name, down, append(pt.operands[:0], access{s, src, Read}, access{&slot.buf, slot, Write}))
	from.peer.taskMu.Unlock()
	if err != nil {
		if slot.buf.st.Poison() != nil {
			// The first half failed on what it depends on and poisoned
			// the slot: the second half carries that to dst, as the
			// direct copy poisons it (it fails in ordering, and is not
			// submitted).
			op := &t.ops.copy
			*op = driver.CopyOp{Direction: driver.HostToDevice, Dst: d.ptr, Host: slot.p, Size: d.size}
			_, _ = t.submit(name, op, append(t.operands[:0], access{&slot.buf, slot, Read}, access{d, dst, Write}))
		}
		return err
	}
	if h := t.dev.test.BetweenHalves; h != nil {
		h()
	}
	op := &t.ops.copy
	*op = driver.CopyOp{Direction: driver.HostToDevice, Dst: d.ptr, Host: slot.p, Size: d.size}
	_, err = t.submit(name, op, append(t.operands[:0], access{&slot.buf, slot, Read}, access{d, dst, Write}))
	return err
}

// peerTask returns the device's internal task for the first halves of
// staged copies out of it, making it the first time, and again once the
// last one broke: a failed copy leaves its stream's error sticky (HIP and
// CUDA streams, HSA queues alike), which would fail every later copy out
// of the device. The failure was reported to the copies that had it.
func (d *Device) peerTask(op string) (*Task, error) {
	d.peer.taskMu.Lock()
	defer d.peer.taskMu.Unlock()
	if t := d.peer.task; t != nil {
		if t.timeline(driver.LaneLibrary).Failed(math.MaxUint64) == nil {
			return t, nil
		}
		d.peer.task = nil
		_ = t.Close()
	}
	t, err := d.NewTask()
	if err != nil {
		return nil, &Error{Op: op, Kind: kindOf(err), Detail: "making " + d.String() + "'s task for staged peer copies", Err: err}
	}
	d.peer.task = t
	return t, nil
}

// take returns an idle slot of at least size bytes, marked busy. Its last
// copies need not have completed: the copy that takes it is ordered after
// them through the slot's sync state.
func (p *peerCopies) take(d *Device, op string, size uint64) (*peerSlot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.slots {
		if !s.busy && s.buf.size >= size {
			s.busy = true
			return s, nil
		}
	}
	hm, ok := d.drv.(driver.HostMemory)
	if !ok {
		return nil, newErr(op, ErrUnavailable, "the %s backend has no pinned host memory to stage a copy between GPUs", d.backend)
	}
	if len(p.slots) >= maxPeerSlots {
		// Replace an idle slot that is too small, once its copies are
		// done (a throttle wait, as for upload staging).
		for i, s := range p.slots {
			if s.busy {
				continue
			}
			if err := d.drainSlot(op, s); err != nil {
				return nil, err
			}
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
	s := &peerSlot{p: ptr, busy: true}
	s.buf.dev, s.buf.size = d, n
	s.buf.st.Init()
	p.slots = append(p.slots, s)
	return s, nil
}

// put hands a slot back.
func (p *peerCopies) put(s *peerSlot) {
	p.mu.Lock()
	s.busy = false
	p.mu.Unlock()
}

// drainSlot waits on the host for the copies that used a slot.
func (d *Device) drainSlot(op string, s *peerSlot) error {
	var buf [2 * syncstate.MaxOperands]syncstate.Fence
	for _, f := range s.buf.st.PendingFences(buf[:0]) {
		if err := d.stagingWait(op, f, false, "waiting for peer staging memory"); err != nil {
			return err
		}
	}
	return nil
}

// free releases the staging slots; the device has drained, and so have
// the copies into it (whose second halves ran on its tasks, after their
// first halves).
func (p *peerCopies) free(d *Device) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	hm, ok := d.drv.(driver.HostMemory)
	if !ok {
		return nil
	}
	var errs []error
	var buf [2 * syncstate.MaxOperands]syncstate.Fence
	for _, s := range p.slots {
		// A first half whose second half was never submitted may still
		// be writing the slot, on the source device.
		for _, f := range s.buf.st.PendingFences(buf[:0]) {
			_ = f.TL.WaitHost(f.Ticket)
		}
		errs = append(errs, hm.HostFree(s.p))
	}
	p.slots = nil
	return joinErrs(errs)
}

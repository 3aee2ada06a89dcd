package queue

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/internal/traceopt"
)

// ErrRecordingReleased is returned by Replay after Release.
var ErrRecordingReleased = errors.New("queue: recording released")

// kernargAlign is the spacing of a recording's argument blocks: AQL wants
// 16-byte aligned kernargs, and 64 keeps each block on its own cache line.
const kernargAlign = 64

// Recording is a sequence of kernel dispatches prebuilt for one queue:
// the packets' bodies, and their argument blocks in kernarg memory of its
// own (mapped to the queue's GPU), which no replay changes. Replay copies
// the packets into the ring in one go, publishes them and rings the
// doorbell once; only the last packet has a completion signal.
type Recording struct {
	q       *Queue
	kernarg unsafe.Pointer
	bodies  [][hsa.PacketSize]byte // bytes 4..63; the completion signal is set per replay
	first   []uint32               // header|setup words, published last
}

// NewRecording prebuilds ds for replay on q. The kernarg memory comes from
// the queue's kernarg pool and is allowed access by the queue's GPU, as
// the ring's own is: without it the packet processor faults reading it.
func (q *Queue) NewRecording(ds []Dispatch) (*Recording, error) {
	if len(ds) == 0 {
		return nil, fmt.Errorf("queue: empty recording")
	}
	offs := make([]uintptr, len(ds))
	total := uintptr(0)
	for i, d := range ds {
		if len(d.Kernarg) > KernargSlot {
			return nil, fmt.Errorf("%w: %d > %d bytes", ErrKernargTooLarge, len(d.Kernarg), KernargSlot)
		}
		offs[i] = total
		total += (max(uintptr(len(d.Kernarg)), 1) + kernargAlign - 1) / kernargAlign * kernargAlign
	}
	ka, err := q.rt.MemoryPoolAllocate(q.kernargPool, uint64(total))
	if err != nil {
		return nil, fmt.Errorf("queue: recording's kernarg memory: %w", err)
	}
	if !testhooks.SkipKernargAllowAccess.Load() {
		if err := q.rt.AgentsAllowAccess([]hsa.Agent{q.agent}, ka); err != nil {
			_ = q.rt.MemoryPoolFree(ka)
			return nil, fmt.Errorf("queue: allowing the GPU access to the recording's kernargs: %w", err)
		}
	}
	r := &Recording{q: q, kernarg: ka, bodies: make([][hsa.PacketSize]byte, len(ds)), first: make([]uint32, len(ds))}
	for i := range ds {
		d := &ds[i]
		p := unsafe.Add(ka, offs[i])
		copy(unsafe.Slice((*byte)(p), len(d.Kernarg)), d.Kernarg)
		// The first packet acquires at system scope (with AgentScope the
		// rest at agent scope): what a replay reads may have been written
		// outside the GPU since the last one; the packets after it read
		// what it and the ones before them wrote, on this GPU.
		pk := d.packet(q.dispatchHeader(i == 0), uint64(uintptr(p)), 0)
		pk.EncodeBody(&r.bodies[i])
		r.first[i] = pk.FirstWord()
	}
	return r, nil
}

// packet is the AQL packet of d with its header, kernarg address and
// signal.
func (d *Dispatch) packet(header uint16, kernarg uint64, sig hsa.Signal) hsa.DispatchPacket {
	return hsa.DispatchPacket{
		Header:             header,
		Setup:              max(d.Dims, 1),
		WorkgroupSize:      [3]uint16{d.Workgroup, max(d.WorkgroupYZ[0], 1), max(d.WorkgroupYZ[1], 1)},
		GridSize:           [3]uint32{d.Grid, max(d.GridYZ[0], 1), max(d.GridYZ[1], 1)},
		PrivateSegmentSize: d.PrivateSegmentSize,
		GroupSegmentSize:   d.GroupSegmentSize,
		KernelObject:       d.KernelObject,
		KernargAddress:     kernarg,
		CompletionSignal:   sig,
	}
}

// Packets is the number of packets one replay submits.
func (r *Recording) Packets() int { return len(r.bodies) }

// Release frees the recording's kernarg memory. The caller makes sure no
// replay of it is in flight (the packet processor reads the kernargs).
func (r *Recording) Release() error {
	if r.kernarg == nil {
		return nil
	}
	err := r.q.rt.MemoryPoolFree(r.kernarg)
	r.kernarg = nil
	return err
}

// Replay submits the recording's packets as consecutive tickets and
// returns the last one, the replay's fence. Every packet sets the barrier
// bit, so the last one's completion signal, the only one, says that all
// of them have completed; the earlier tickets share it (with timing on,
// each packet has a signal of its own, which holds its times). The ring gets all
// packets before one doorbell store. A recording longer than the ring
// holds (its size - 1) goes in parts of that many, each with its own
// signal and doorbell. Like Dispatch it waits on the host for room (a
// throttle wait): past MaxInFlight, and for a part longer than
// MaxInFlight, until the queue is empty.
func (q *Queue) Replay(r *Recording) (uint64, error) {
	if r.q != q {
		return 0, fmt.Errorf("queue: %s: a recording made for %s", q.name, r.q.name)
	}
	if r.kernarg == nil {
		return 0, ErrRecordingReleased
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// The first packet acquires at system scope (NewRecording), which is
	// what an op's AcquireSystem asks of the next packet.
	q.acquireNext.Store(false)
	part := int(q.hq.Size) - 1
	var t uint64
	for i := 0; i < len(r.bodies); i += part {
		j := min(len(r.bodies), i+part)
		var err error
		if t, err = q.replayLocked(r.bodies[i:j], r.first[i:j]); err != nil {
			return 0, err
		}
	}
	return t, nil
}

// replayLocked submits one part of a recording (at most the ring's size -
// 1 packets) with one doorbell store.
func (q *Queue) replayLocked(bodies [][hsa.PacketSize]byte, first []uint32) (uint64, error) {
	n := uint64(len(bodies))
	if err := q.Err(); err != nil {
		return 0, err
	}
	q.retireLocked()
	for last := q.lastTicket.Load(); last > q.completed.Load() && last+n-q.completed.Load() > q.maxInFlight; last = q.lastTicket.Load() {
		refused, err := q.throttleLocked()
		if refused != nil {
			return 0, refused
		}
		if err != nil {
			return 0, err
		}
	}
	sig, err := q.signals.Get()
	if err != nil {
		return 0, err
	}
	// Timed, every packet gets a completion signal of its own: the
	// packet processor writes a dispatch's start and end into the
	// completion signal of that packet, where
	// hsa_amd_profiling_get_dispatch_time reads them (ROCr
	// src/core/runtime/amd_gpu_agent.cpp, GpuAgent::TranslateTime: the
	// signal's start_ts and end_ts), so a shared signal holds the last
	// packet's times only.
	timed := traceopt.Enabled && q.timing != nil
	if timed {
		for i := uint64(1); i < n; i++ {
			s, err := q.signals.Get()
			if err != nil {
				for _, s := range q.replaySigs {
					s.Release()
				}
				clear(q.replaySigs)
				q.replaySigs = q.replaySigs[:0]
				sig.Release()
				return 0, err
			}
			q.replaySigs = append(q.replaySigs, s)
		}
	}
	idx := q.rt.QueueAddWriteIndexScacqScrel(q.hq, n)
	for idx+n-1-q.readIndex >= uint64(q.hq.Size) {
		q.readIndex = q.rt.QueueLoadReadIndexScacquire(q.hq)
		if idx+n-1-q.readIndex < uint64(q.hq.Size) {
			break
		}
		if err := q.Err(); err != nil {
			sig.Release()
			for _, s := range q.replaySigs {
				s.Release()
			}
			clear(q.replaySigs)
			q.replaySigs = q.replaySigs[:0]
			return 0, err
		}
	}
	for i := uint64(0); i < n; i++ {
		slot := hsa.Slot(q.hq, idx+i)
		copy(slot[4:], bodies[i][4:])
		e := q.slot(idx + i + 1)
		q.noteReleaseLocked(e, idx+i+1, releasesSystem(uint16(first[i])))
		switch {
		case i+1 == n:
			*(*uint64)(unsafe.Pointer(&slot[hsa.DispatchOffCompletionSignal])) = uint64(sig.H)
			e.sig = sig
		case timed:
			own := q.replaySigs[i]
			*(*uint64)(unsafe.Pointer(&slot[hsa.DispatchOffCompletionSignal])) = uint64(own.H)
			e.sig = own
		default:
			sig.Retain() // each ticket holds a reference, released as it retires
			e.sig = sig
		}
	}
	clear(q.replaySigs)
	q.replaySigs = q.replaySigs[:0]
	t := idx + n
	q.lastTicket.Store(t)
	for i := uint64(0); i < n; i++ {
		hsa.PublishHeader(hsa.Slot(q.hq, idx+i), first[i])
	}
	q.rt.SignalStoreScrelease(q.hq.Doorbell, int64(t-1))
	return t, nil
}

package syncstate

import "sync"

// HostDeps is the set of host-lane fences a device timeline waits for on
// the device: directly (a stream's or queue's device-side wait for a host
// function), or through the timelines it waits for, which keep their own.
// It holds at most one fence per host lane (the newest: a lane's functions
// complete in order) and forgets fences known complete.
//
// A runtime whose copies share a queue across timelines needs it: HIP
// hands a stream's copy between host and device memory to ROCr with the
// stream's pending work as the copy's dependency, and ROCr queues every
// copy of a direction on one queue per GPU (clr rocblit.cpp,
// DmaBlitManager::hsaCopy; ROCr amd_gpu_agent.cpp, GpuAgent::InitDma). A
// copy queued there behind a stream that waits for a host function blocks
// that function's own synchronous copies until the function has returned:
// a deadlock. Such a copy must wait for those functions on the host first
// (see rocmdev).
type HostDeps struct {
	mu sync.Mutex
	fs []Fence
}

// HostDepender is a timeline that keeps its HostDeps.
type HostDepender interface {
	HostDeps() *HostDeps
}

// Note records that the timeline waits on the device for f: f itself when
// it is a host lane's, otherwise the host-lane fences f's timeline waits
// for (all it waits for now, which includes those before f).
func (h *HostDeps) Note(f Fence) {
	if f.TL == nil {
		return
	}
	if f.TL.Domain() == DomainHost {
		h.mu.Lock()
		h.addLocked(f)
		h.mu.Unlock()
		return
	}
	p, ok := f.TL.(HostDepender)
	if !ok {
		return
	}
	src := p.HostDeps()
	if src == nil || src == h {
		return
	}
	// Copied out in pieces, so that no two sets are locked at once.
	var buf [8]Fence
	for off := 0; ; off += len(buf) {
		src.mu.Lock()
		n := 0
		if off < len(src.fs) {
			n = copy(buf[:], src.fs[off:])
		}
		src.mu.Unlock()
		if n == 0 {
			return
		}
		h.mu.Lock()
		for _, g := range buf[:n] {
			h.addLocked(g)
		}
		h.mu.Unlock()
		clear(buf[:n])
	}
}

// addLocked adds f (a host lane's fence), keeping the newest per lane and
// dropping the complete ones.
func (h *HostDeps) addLocked(f Fence) {
	if f.Ticket <= f.TL.Completed() {
		return
	}
	keep := h.fs[:0]
	found := false
	for _, g := range h.fs {
		if g.Ticket <= g.TL.Completed() {
			continue
		}
		if g.TL == f.TL {
			found = true
			if f.Ticket > g.Ticket {
				g = f
			}
		}
		keep = append(keep, g)
	}
	clear(h.fs[len(keep):])
	h.fs = keep
	if !found {
		h.fs = append(h.fs, f)
	}
}

// Live appends the fences not yet complete to dst and returns it,
// forgetting the complete ones. A caller that must not queue behind a host
// function waits for them: once they are complete, nothing the timeline
// waits for on the device waits for a host function.
func (h *HostDeps) Live(dst []Fence) []Fence {
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := h.fs[:0]
	for _, g := range h.fs {
		if g.Ticket > g.TL.Completed() {
			keep = append(keep, g)
			dst = append(dst, g)
		}
	}
	clear(h.fs[len(keep):])
	h.fs = keep
	return dst
}

// Len returns how many fences the set holds (for tests).
func (h *HostDeps) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.fs)
}

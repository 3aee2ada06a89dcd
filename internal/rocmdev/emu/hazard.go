package emu

import (
	"errors"
	"fmt"
	"sync"
)

// vclock is a vector clock indexed by agent (0 is the host; each HSA queue
// and HIP stream is an agent). Missing entries are 0.
type vclock []uint32

func (v vclock) get(a int) uint32 {
	if a < len(v) {
		return v[a]
	}
	return 0
}

// join sets v to the element-wise max of v and o, growing v as needed.
func (v *vclock) join(o vclock) {
	if len(o) > len(*v) {
		*v = append(*v, make([]uint32, len(o)-len(*v))...)
	}
	for i, x := range o {
		if x > (*v)[i] {
			(*v)[i] = x
		}
	}
}

func (v *vclock) set(a int, x uint32) {
	if a >= len(*v) {
		*v = append(*v, make([]uint32, a+1-len(*v))...)
	}
	(*v)[a] = x
}

func (v vclock) clone() vclock { return append(vclock(nil), v...) }

// actor is who performs an access: an agent, its op sequence number, and
// the clock of everything that op happens after.
// clock is the actor's vector clock; a nil actor (the checker off) has
// none.
func (a *actor) clock() vclock {
	if a == nil {
		return nil
	}
	return a.vc
}

type actor struct {
	agent int
	seq   uint32
	vc    vclock
	what  string // e.g. "rocsync_mul_f32 (dispatch #3)"
	where string // e.g. "hsa-queue gpu0/q1"
	// scoped says the access is an AQL packet's, whose writes reach
	// agents outside its GPU only through a system-scope release;
	// release is its packet's release fence scope.
	scoped  bool
	release uint16
	// copyEngine says the access is a copy engine's (an SDMA or blit
	// copy HIP or ROCr makes), which does not go through any GPU's L2.
	copyEngine bool
}

// HazardKind classifies a detected hazard.
type HazardKind string

const (
	HazardWriteWrite   HazardKind = "write/write"
	HazardReadWrite    HazardKind = "read/write"
	HazardUseAfterFree HazardKind = "use after free"
	HazardFreeInUse    HazardKind = "free while in use"
	// HazardVisibility is an access ordered after an HSA queue packet's
	// write that has not been made visible to it: the packet released at
	// agent scope and no system-scope release on that GPU followed, so
	// the bytes may still sit in the GPU's L2 where the host, a copy
	// engine or another GPU does not see them.
	HazardVisibility HazardKind = "visibility"
	// HazardStale is an HSA queue packet's read, ordered after a write
	// made outside its GPU's L2 (by the host, a copy engine or another
	// GPU), with no system-scope acquire on its GPU between the two: the
	// L2 may still hold an older copy of the bytes, which the packet then
	// reads.
	HazardStale HazardKind = "stale read"
)

// ErrHazard is matched by errors.Is for every *HazardError.
var ErrHazard = errors.New("emu: hazard")

// HazardError is an unordered conflicting pair of accesses to the same
// device bytes, in the spirit of PyTorch's CUDA stream sanitizer.
type HazardError struct {
	Kind          HazardKind
	Lo, Hi        uint64 // the overlapping byte range [Lo, Hi)
	Op, Queue     string // the access that found the hazard
	Prior, PriorQ string // the earlier access it is not ordered with
}

func (e *HazardError) Error() string {
	if e.Kind == HazardStale {
		return fmt.Sprintf("emu: %s hazard on [%#x, %#x): %s on %s reads what %s on %s wrote outside its GPU's L2, and no system-scope acquire on that GPU came between",
			e.Kind, e.Lo, e.Hi, e.Op, e.Queue, e.Prior, e.PriorQ)
	}
	if e.Kind == HazardVisibility {
		return fmt.Sprintf("emu: %s hazard on [%#x, %#x): %s on %s accesses what %s on %s wrote, which no system-scope release has made visible outside that GPU",
			e.Kind, e.Lo, e.Hi, e.Op, e.Queue, e.Prior, e.PriorQ)
	}
	return fmt.Sprintf("emu: %s hazard on [%#x, %#x): %s on %s is not ordered with %s on %s",
		e.Kind, e.Lo, e.Hi, e.Op, e.Queue, e.Prior, e.PriorQ)
}

// Is makes errors.Is(err, ErrHazard) true.
func (e *HazardError) Is(target error) bool { return target == ErrHazard }

type accessRec struct {
	lo, hi uint64
	write  bool
	agent  int
	seq    uint32
	what   string
	where  string
	// l2 is 1 + the GPU whose L2 the access went through (0: none);
	// scoped, that it was an HSA queue packet's (see actor.scoped).
	l2     int
	scoped bool
}

// scopes tells the checker what the GPUs' fences have made visible.
type scopes interface {
	// systemVisible reports whether a system-scope release on GPU l2-1
	// has followed the access of agent at seq.
	systemVisible(l2, agent int, seq uint32) bool
	// systemAcquired reports whether a system-scope acquire on GPU l2-1
	// lies between the access of agent at seq and an access with clock
	// vc.
	systemAcquired(l2 int, vc vclock, agent int, seq uint32) bool
}

// shadow tracks, per allocation, the accesses that later ones must be
// ordered after: the writes, and the reads since the writes that covered
// them.
type shadow struct {
	mu   sync.Mutex
	recs []accessRec
}

func hb(r *accessRec, vc vclock) bool { return vc.get(r.agent) >= r.seq }

// access checks one access against the record and then adds it. It returns
// the hazards found (at most one per conflicting record).
//
// l2 is 1 + the GPU whose L2 the access goes through (0: none). An access
// ordered after an HSA queue packet's write through another L2 (or none)
// needs that write made visible by a system-scope release, or it is a
// visibility hazard. An HSA queue packet's read ordered after a write
// through another L2 (or none) needs a system-scope acquire on its GPU in
// between, or it is a stale read. sc nil checks neither.
func (s *shadow) access(lo, hi uint64, write bool, a *actor, l2 int, sc scopes) []*HazardError {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []*HazardError
	for i := range s.recs {
		r := &s.recs[i]
		if r.hi <= lo || hi <= r.lo || (!r.write && !write) {
			continue
		}
		if hb(r, a.vc) {
			if r.write && r.scoped && r.l2 != l2 && sc != nil && !sc.systemVisible(r.l2, r.agent, r.seq) {
				found = append(found, &HazardError{Kind: HazardVisibility, Lo: max(lo, r.lo), Hi: min(hi, r.hi),
					Op: a.what, Queue: a.where, Prior: r.what, PriorQ: r.where})
			}
			if r.write && !write && a.scoped && l2 != 0 && r.l2 != l2 && sc != nil && !sc.systemAcquired(l2, a.vc, r.agent, r.seq) {
				found = append(found, &HazardError{Kind: HazardStale, Lo: max(lo, r.lo), Hi: min(hi, r.hi),
					Op: a.what, Queue: a.where, Prior: r.what, PriorQ: r.where})
			}
			continue
		}
		kind := HazardReadWrite
		if r.write && write {
			kind = HazardWriteWrite
		}
		found = append(found, &HazardError{Kind: kind, Lo: max(lo, r.lo), Hi: min(hi, r.hi),
			Op: a.what, Queue: a.where, Prior: r.what, PriorQ: r.where})
	}
	// Prune what the new access covers and follows: a later access that
	// races with a pruned record also races with the new one. A read
	// cannot stand in for a write, so reads prune only reads.
	kept := s.recs[:0]
	for _, r := range s.recs {
		covered := lo <= r.lo && r.hi <= hi && hb(&r, a.vc)
		if covered && (write || !r.write) {
			continue
		}
		kept = append(kept, r)
	}
	s.recs = append(kept, accessRec{lo: lo, hi: hi, write: write, agent: a.agent, seq: a.seq, what: a.what, where: a.where,
		l2: l2, scoped: a.scoped})
	return found
}

// freeCheck reports accesses that the freeing host has not observed.
func (s *shadow) freeCheck(lo, hi uint64, a *actor) []*HazardError {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []*HazardError
	for i := range s.recs {
		r := &s.recs[i]
		if hb(r, a.vc) {
			continue
		}
		found = append(found, &HazardError{Kind: HazardFreeInUse, Lo: lo, Hi: hi,
			Op: a.what, Queue: a.where, Prior: r.what, PriorQ: r.where})
	}
	s.recs = nil
	return found
}

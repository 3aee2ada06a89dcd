package rocsync

import (
	"fmt"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
)

// runGroup submits every local rank's part from the calling goroutine,
// inside one NCCL group (Collectives.Group: one locked OS thread, the
// first rank's device current, ncclGroupStart .. ncclGroupEnd). NCCL's
// rules for one thread that drives several GPUs (Group Calls,
// "Management Of Multiple GPUs From One Thread"): the calls for the
// several communicators go inside one group, or the first could block
// waiting for the others; inside it "stream operations (like
// ncclAllReduce) can return without having enqueued the operation on the
// stream", which happens at ncclGroupEnd. So each part is an op whose
// enqueue ends only with the group (heldop.go):
//
//  1. every task is entered, and the parts' operands are locked together
//     in the global lock order (syncstate.LockAll);
//  2. each part is ordered on its library stream exactly as an eager op
//     (the device waits for its inputs' and outputs' producers go on the
//     stream now, ahead of the collective);
//  3. each rank's library stream is readied (the waits a submission
//     makes: the throttle, host functions), and then all are held
//     (driver.LibraryHolder): nothing else goes on them, and no event is
//     recorded on them, until step 5, and nothing waits while they are;
//  4. the group: each part's library call, then ncclGroupEnd, which puts
//     the collectives on the streams behind their waits;
//  5. the streams are released, each part taking its stream's next
//     ticket, and only then are the fences recorded on the operands and
//     the operands unlocked. A fence recorded before ncclGroupEnd would
//     let a consumer wait for an event ahead of the collective.
//
// ok is false when a group cannot be used (a task whose driver cannot
// hold its library stream, a task inside Record): nothing was done, and
// the caller submits the parts otherwise. errs gets each part's error;
// launched says some part may be on its stream, so that a failure of
// another must abort the communicator; cause is the first part whose
// call failed (-1: none), whose error explains the others'. A part whose
// call fails is not on its stream and fails as any op whose submission
// failed; if the group itself fails (ncclGroupEnd), the parts whose calls
// succeeded may be on their streams: they take their tickets, so that
// later ops order after them, and what they write is poisoned. A failure before the group (an
// input whose producer failed, a closed task) submits no part at all,
// so no part waits for a peer, and the communicator stays usable.
func (c *Communicator) runGroup(name string, ops []rankOp, errs []error) (launched bool, cause int, ok bool) {
	n := len(c.ranks)
	g := c.scratch
	if g == nil {
		g = &groupScratch{holders: make([]driver.LibraryHolder, n), hs: make([]heldOp, n), sops: make([]*syncstate.Op, n),
			streams: make([]uintptr, n), callErrs: make([]error, n), tickets: make([]uint64, n)}
		for i, r := range c.ranks {
			h, isHolder := r.task.drv.(driver.LibraryHolder)
			if !isHolder {
				return false, -1, false
			}
			g.holders[i] = h
		}
		c.scratch = g
	}
	holders, hs, sops, streams, callErrs, tickets := g.holders, g.hs, g.sops, g.streams, g.callErrs, g.tickets
	clear(callErrs)
	defer clear(hs) // nothing of this call's arrays stays reachable
	entered := 0
	defer func() {
		for _, r := range c.ranks[:entered] {
			r.task.dev.leave()
			r.task.end()
		}
	}()
	for i, r := range c.ranks {
		t := r.task
		if err := t.check(name); err != nil {
			errs[i] = err
			return false, -1, true
		}
		if err := t.begin(name); err != nil {
			errs[i] = err
			return false, -1, true
		}
		if err := t.dev.enter(name); err != nil {
			t.end()
			errs[i] = err
			return false, -1, true
		}
		entered++
		if t.rec != nil {
			return false, -1, false // recorded, not submitted: op by op
		}
	}
	for i, r := range c.ranks {
		if err := r.task.capWait(name, 1); err != nil {
			errs[i] = err
			return false, -1, true
		}
	}

	for i := range hs {
		hs[i].name, hs[i].s.sop.Name = name, name
		for _, x := range ops[i].operands[:ops[i].n] {
			hs[i].s.sop.Use(&x.b.st, x.access)
		}
		sops[i] = &hs[i].s.sop
	}
	if err := syncstate.LockAll(sops...); err != nil {
		errs[0] = &Error{Op: name, Kind: ErrInvalid, Err: err}
		return false, -1, true
	}
	// abortOthers ends every part but i unsubmitted: unlocked, nothing
	// recorded.
	abortOthers := func(i int) {
		for j := range hs {
			if j != i {
				if tr := c.ranks[j].task.dev.opObserver(); tr != nil && hs[j].tl != nil {
					tr.opFailed(hs[j].tl, c.ranks[j].task.traceHost, c.ranks[j].task.traceBegan)
				}
				hs[j].s.sop.Abort()
			}
		}
	}
	for i := range hs {
		if err := c.ranks[i].task.beginHeld(&hs[i], ops[i].operands[:ops[i].n]); err != nil {
			errs[i] = err
			abortOthers(i)
			return false, -1, true
		}
	}

	for i, h := range holders {
		if err := h.ReadyLibrary(); err != nil {
			errs[i] = c.ranks[i].task.failHeld(&hs[i], err)
			abortOthers(i)
			return false, -1, true
		}
	}
	for i, h := range holders {
		s, err := h.HoldLibrary()
		if err != nil {
			for _, held := range holders[:i] {
				held.ReleaseLibrary(false)
			}
			errs[i] = c.ranks[i].task.failHeld(&hs[i], err)
			abortOthers(i)
			return false, -1, true
		}
		streams[i] = s
	}
	ran, finished := false, false
	var groupErr error
	finish := func() {
		finished = true
		for i, h := range holders {
			enqueued := ran && callErrs[i] == nil
			tickets[i] = h.ReleaseLibrary(enqueued)
			launched = launched || enqueued
		}
		for i := range hs {
			t := c.ranks[i].task
			switch {
			case !ran:
				errs[i] = t.failHeld(&hs[i], groupErr)
			case callErrs[i] != nil:
				errs[i] = t.failHeld(&hs[i], callErrs[i])
			case groupErr != nil:
				errs[i] = t.commitHeldFailed(&hs[i], tickets[i], groupErr)
			default:
				errs[i] = t.commitHeld(&hs[i], tickets[i])
			}
		}
	}
	groupErr = c.group(func() error {
		ran = true
		for i := range ops {
			callErrs[i] = callPart(ops[i].call, streams[i])
		}
		if c.fenceInGroup {
			finish() // the mistake the tests must catch
		}
		return nil
	})
	if !finished {
		finish()
	}
	// A call's own failure is the cause; a failed group its consequence.
	cause = -1
	for i, err := range callErrs {
		if err != nil && cause < 0 {
			cause = i
		}
	}
	return launched, cause, true
}

// groupScratch is runGroup's per-communicator memory (the communicator's
// lock serializes its collectives): the ranks' drivers, found once, and
// one entry per rank for each step.
type groupScratch struct {
	holders  []driver.LibraryHolder
	hs       []heldOp
	sops     []*syncstate.Op
	streams  []uintptr
	callErrs []error
	tickets  []uint64
}

// group runs body inside the library's group on the first rank's device.
// A panic is the group's error: the streams held for it must be released.
func (c *Communicator) group(body func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the collective group panicked: %v", p)
		}
	}()
	return c.lib.Group(c.ranks[0].task.dev.drv, body)
}

// callPart makes one part's library call; a panic is its error.
func callPart(call func(stream uintptr) error, stream uintptr) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("rank part panicked: %v", p)
		}
	}()
	return call(stream)
}

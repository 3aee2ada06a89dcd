package rocsync

import (
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/syncstate"
)

// A held op is an eager op whose enqueue is made outside the driver's
// Submit, on a stream the driver holds for it (driver.LibraryHolder): a
// collective's part inside an NCCL group, which reaches the stream only
// at ncclGroupEnd. It takes the path of Task.submitEntered in three
// steps, so that several tasks' ops can be submitted together:
// beginHeld orders it (the same sync decisions as any op), the caller
// holds the stream, enqueues and releases it, and commitHeld records the
// fence, once the work is on the stream. Its operands are locked from
// beginHeld to commitHeld (syncstate.LockAll locks those of all the ops
// together), so nobody sees the fence before it is recorded.
type heldOp struct {
	name string
	s    opSync
	tl   syncstate.Timeline
}

// heldCallOp is what the trace records a held op as: a library call
// (the function is the caller's, enqueued while the stream is held).
var heldCallOp driver.LibraryCallOp

// beginHeld orders h, whose operands syncstate.LockAll locked, on the
// library lane of t, which the caller entered (Task.begin, Device.enter):
// the waits for what it must follow, as submitEntered makes them. On
// error the operands are unlocked and what the op was to write is
// poisoned as submitEntered's ordering failures poison it.
func (t *Task) beginHeld(h *heldOp, operands []access) error {
	d := t.dev
	h.tl = t.timeline(driver.LaneLibrary)
	tr := d.opObserver()
	if tr != nil {
		t.traceBegan = tr.now()
	}
	if err := h.s.sop.BeginLocked(&d.engine, h.tl, t.sinks); err != nil {
		if tr != nil {
			tr.opFailed(h.tl, t.traceHost, t.traceBegan)
		}
		return notSubmitted(h.name, h.tl, err)
	}
	if err := freedIn(h.name, operands); err != nil {
		h.s.sop.Abort()
		if tr != nil {
			tr.opFailed(h.tl, t.traceHost, t.traceBegan)
		}
		return err
	}
	if tr != nil {
		t.traceIssued = tr.opIssued(t.traceBegan, t.traceHost)
	}
	return nil
}

// failHeld ends h, begun but not submitted, with err, the error of its
// submission: what it was to write is poisoned (a library call may have
// enqueued part of its work), except where nothing was enqueued
// (unsubmitted).
func (t *Task) failHeld(h *heldOp, err error) error {
	if tr := t.dev.opObserver(); tr != nil {
		tr.opFailed(h.tl, t.traceHost, t.traceBegan)
	}
	if e, ok := unsubmitted(h.name, h.tl, err); ok {
		h.s.sop.Abort()
		return e
	}
	h.s.sop.Fail(err)
	return &Error{Op: h.name, Kind: ErrFault, Detail: "submitting to " + h.tl.Name(), Err: err}
}

// commitHeld records h, on its stream as ticket, on its operands and
// makes the waits that follow a submission, as submitEntered does.
func (t *Task) commitHeld(h *heldOp, ticket uint64) error {
	tr := t.dev.opObserver()
	if tr != nil {
		tr.opSubmitted(&heldCallOp, h.name, h.tl, ticket, t.traceHost, t.traceBegan, t.traceIssued)
	}
	f := syncstate.Fence{TL: h.tl, Ticket: ticket}
	t.sinks.Dispatch()
	err := t.afterSubmit(h.name, &h.s, f)
	if tr != nil {
		tr.opEnded(h.tl, ticket, t.traceHost, t.traceBegan)
	}
	return err
}

// commitHeldFailed records h, whose work may be on its stream as ticket
// but failed there (its group's launch failed), and poisons what it
// writes with err.
func (t *Task) commitHeldFailed(h *heldOp, ticket uint64, err error) error {
	if tr := t.dev.opObserver(); tr != nil {
		tr.opSubmitted(&heldCallOp, h.name, h.tl, ticket, t.traceHost, t.traceBegan, t.traceIssued)
		tr.opEnded(h.tl, ticket, t.traceHost, t.traceBegan)
	}
	h.s.sop.CommitFailed(ticket, err)
	return &Error{Op: h.name, Kind: ErrFault, Detail: "launching on " + h.tl.Name(), Err: err}
}

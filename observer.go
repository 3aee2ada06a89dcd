package rocsync

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/traceopt"
	"github.com/rocsync/rocsync/syncstate"
)

// observer hears the op path for the trace and the debug log: the sync
// core's decisions (it is the engine's Observer), each op's submission
// (began, issued, submitted or failed, ended), and every host wait made
// outside the sync core's decisions (read-back, Synchronize, frees,
// throttling, launch-blocking, staging). Open makes one only when the
// trace or the debug log is on: Device.obs is nil otherwise, and the path
// pays one nil check per hook. Where the build compiles the trace out
// (rocsync_notrace) trace is always nil.
type observer struct {
	trace *traceProc      // nil unless tracing
	log   *zerolog.Logger // nil unless the logger enables debug
}

// newObserver is the observer of a device with the trace tr and the
// logger log (nil for none): nil when neither observes.
func newObserver(tr *traceProc, log *zerolog.Logger) *observer {
	if tr == nil && log == nil {
		return nil
	}
	return &observer{trace: tr, log: log}
}

// Decided is the sync core's report of one decision (syncstate.Observer).
func (o *observer) Decided(op string, consumer syncstate.Timeline, f syncstate.Fence, d syncstate.Decision, r syncstate.Reason) {
	if o.log != nil {
		decisionLog{o.log}.Decided(op, consumer, f, d, r)
	}
	if o.trace != nil {
		o.trace.Decided(op, consumer, f, d, r)
	}
}

// HostWaitEnded closes the host wait Decided opened
// (syncstate.WaitObserver).
func (o *observer) HostWaitEnded(consumer syncstate.Timeline, f syncstate.Fence, err error) {
	if o.trace != nil {
		o.trace.HostWaitEnded(consumer, f, err)
	}
}

// now is the time since the trace began (0 when not tracing): when an op's
// submission began.
func (o *observer) now() time.Duration {
	if o.trace == nil {
		return 0
	}
	return o.trace.now()
}

// opIssued is when an op goes to the driver, its ordering done.
func (o *observer) opIssued(began time.Duration, host int) time.Duration {
	if o.trace == nil {
		return 0
	}
	return o.trace.opIssued(began, host)
}

// opSubmitted records an op the driver accepted as ticket on tl; host is
// the submitting task's host track.
func (o *observer) opSubmitted(op driver.Op, name string, tl syncstate.Timeline, ticket uint64, host int, began, issued time.Duration) {
	if o.trace != nil {
		o.trace.opSubmitted(op, name, tl, ticket, host, began, issued)
	}
}

// opFailed ends the submission of an op that was not submitted.
func (o *observer) opFailed(tl syncstate.Timeline, host int, began time.Duration) {
	if o.trace != nil {
		o.trace.opFailed(tl, host, began)
	}
}

// opEnded ends the submission of the op at ticket on tl, what followed it
// included.
func (o *observer) opEnded(tl syncstate.Timeline, ticket uint64, host int, began time.Duration) {
	if o.trace != nil {
		o.trace.opEnded(tl, ticket, host, began)
	}
}

// waitBegin logs a host wait for f made outside the sync core's decisions
// and records its start in the trace, on host track host; it returns the
// trace's index of the wait for waitEnd (-1 when not tracing). Nothing
// for a nil observer.
func (o *observer) waitBegin(op string, f syncstate.Fence, r Reason, host int) int {
	if o == nil {
		return -1
	}
	if o.log != nil {
		o.log.Debug().Str("op", op).Str("after", f.TL.Name()).Uint64("ticket", f.Ticket).Stringer("reason", r).Msg("rocsync: host wait")
	}
	return o.trace.waitBegin(op, f, r, host)
}

// waitEnd ends a wait from waitBegin.
func (o *observer) waitEnd(i int, err error) {
	if o != nil {
		o.trace.waitEnd(i, err)
	}
}

// throttled records a throttle wait that the driver makes inside a
// submission (traceProc.throttled).
func (o *observer) throttled(f syncstate.Fence) {
	if o != nil && o.trace != nil {
		o.trace.throttled(f)
	}
}

// callback records a host callback that ran from began to now after the op
// at f; Then calls fn alone when no trace records it.
func (o *observer) callback(name string, f syncstate.Fence, fn func()) {
	if o == nil || o.trace == nil {
		fn()
		return
	}
	began := o.trace.now()
	fn()
	o.trace.callback(name, f, began)
}

// opObserver is the observer of the ops being submitted: the device's, or
// a constant nil where the build compiled the trace out (rocsync_notrace),
// since only the trace hears them: the submit path's hooks then fold away.
func (d *Device) opObserver() *observer {
	if !traceopt.Enabled {
		return nil
	}
	return d.obs
}

var _ syncstate.WaitObserver = (*observer)(nil)

package syncstate

import "fmt"

// Decision is what the engine did about one fence an op had to be ordered
// after.
type Decision uint8

const (
	// SkipSameTimeline: the fence is on the op's own timeline (or a read
	// there already follows it), whose in-order execution orders the op.
	SkipSameTimeline Decision = iota
	// SkipComplete: the fence was already known complete.
	SkipComplete
	// DeviceWait: the op's timeline waits for the fence on the device.
	DeviceWait
	// HostWait: the host waits for the fence before submitting the op
	// (the Reason says why).
	HostWait
)

func (d Decision) String() string {
	switch d {
	case SkipSameTimeline:
		return "skip (same timeline)"
	case SkipComplete:
		return "skip (complete)"
	case DeviceWait:
		return "device wait"
	case HostWait:
		return "host wait"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Observer is told of every sync decision an Engine takes, for debug logs
// and traces. It is called with the op's operands locked, so it must be
// quick and must not submit work. An Engine without one pays a nil check
// per fence.
type Observer interface {
	// Decided reports that op, about to run on consumer, was ordered after
	// fence f as d says; r is the host wait's reason (HostWait only).
	Decided(op string, consumer Timeline, f Fence, d Decision, r Reason)
}

// WaitObserver is an Observer that also hears when each host wait ends, so
// that it can time it (the trace draws host waits as slices). The engine
// finds it with a type assertion after a host wait, so observers that only
// log need not implement it.
type WaitObserver interface {
	Observer
	// HostWaitEnded follows a Decided(..., HostWait, ...) call for the same
	// consumer and fence, on the same goroutine, once the wait returned
	// (err: the wait's error).
	HostWaitEnded(consumer Timeline, f Fence, err error)
}

// Observers combines observers (nil ones are left out) into one, which
// tells each in turn and passes the ends of host waits to those that are
// WaitObservers. It returns nil for none, so that an engine without an
// observer keeps paying only its nil check.
func Observers(obs ...Observer) Observer {
	var kept observers
	for _, o := range obs {
		if o != nil {
			kept = append(kept, o)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return kept
}

type observers []Observer

func (obs observers) Decided(op string, consumer Timeline, f Fence, d Decision, r Reason) {
	for _, o := range obs {
		o.Decided(op, consumer, f, d, r)
	}
}

func (obs observers) HostWaitEnded(consumer Timeline, f Fence, err error) {
	for _, o := range obs {
		if w, ok := o.(WaitObserver); ok {
			w.HostWaitEnded(consumer, f, err)
		}
	}
}

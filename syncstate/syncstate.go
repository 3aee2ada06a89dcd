// Package syncstate is rocsync's synchronization core. It decides, for each
// op about to run on a queue, which earlier work the op must be ordered
// after, and how: not at all (same queue, or already complete), on the
// device, or by a host wait.
//
// It knows only abstract timelines (in-order queues or streams whose ops
// carry increasing tickets) and fences (a point on a timeline). It never
// imports hsa, hip or cuda: the HSA queue timeline lives in queue/, the HIP
// and CUDA stream timeline in stream/.
//
// Each array carries a State: one writer fence and at most one reader fence
// per timeline, in the spirit of MXNet's SyncObject and XLA's definition and
// usage events.
package syncstate

import (
	"fmt"
	"sync/atomic"
)

// Domain groups timelines that can wait for one another on the device.
type Domain uint8

const (
	// DomainKernel holds the queues rocsync's own kernels run on (HSA
	// queues on ROCm).
	DomainKernel Domain = iota
	// DomainLibrary holds the streams vendor libraries run on (HIP
	// streams on ROCm).
	DomainLibrary
	// DomainHost holds host lanes: Go functions run in order on a
	// goroutine of their own (package hostlane).
	DomainHost
)

func (d Domain) String() string {
	switch d {
	case DomainKernel:
		return "kernel-queue"
	case DomainLibrary:
		return "library-stream"
	case DomainHost:
		return "host-lane"
	}
	return fmt.Sprintf("Domain(%d)", uint8(d))
}

// Timeline is an in-order queue or stream. Every op submitted on it gets the
// next ticket, starting at 1; ticket t being complete means every op with a
// ticket up to t is complete.
type Timeline interface {
	Domain() Domain
	// Name identifies the timeline in logs and errors.
	Name() string
	// LastTicket is the ticket of the newest op submitted.
	LastTicket() uint64
	// Completed returns a ticket c such that every ticket ≤ c is known to be
	// complete. It may poll the device, so it must be cheap.
	Completed() uint64
	// WaitHost blocks the calling goroutine until ticket t is complete.
	WaitHost(t uint64) error
	// CanWaitDevice reports whether work on this timeline can wait on the
	// device for fences of timelines in domain d.
	CanWaitDevice(d Domain) bool
	// WaitDevice makes all work submitted to this timeline after the call
	// wait, on the device, for the fences. Each fence is on another
	// timeline, one per timeline, of a domain CanWaitDevice accepts.
	WaitDevice(fences []Fence) error
	// Failed returns the error of ticket t when the op is known to have
	// failed (a fault, a queue or library error, or a device wait for a
	// fence that failed), nil otherwise. A failed ticket may still count
	// as complete: it will not touch memory any more. It never blocks.
	Failed(t uint64) error
}

// Fence is a point on a timeline. The zero Fence is no fence.
type Fence struct {
	TL     Timeline
	Ticket uint64
}

// IsZero reports whether f is no fence.
func (f Fence) IsZero() bool { return f.TL == nil }

// Done reports whether the fence is known to be complete (possibly
// failed: see Err).
func (f Fence) Done() bool { return f.TL == nil || f.Ticket <= f.TL.Completed() }

// Err is the fence's failure, nil unless it is known to have failed.
func (f Fence) Err() error {
	if f.TL == nil {
		return nil
	}
	return f.TL.Failed(f.Ticket)
}

func (f Fence) String() string {
	if f.TL == nil {
		return "none"
	}
	return fmt.Sprintf("%s#%d", f.TL.Name(), f.Ticket)
}

// Policy chooses how crossings between timelines are ordered.
type Policy uint8

const (
	// DeviceSide, the default (and the zero value), waits on the device
	// between timelines of one domain (HSA barrier-AND packets,
	// hipStreamWaitEvent) and on the host only at crossings between
	// domains.
	DeviceSide Policy = iota
	// WaitAlways is the baseline without the sync state: every op is
	// followed by a host wait for its own completion.
	WaitAlways
	// SkipSameQueue is the baseline that tracks queues only: no wait on
	// the same queue or stream, a host wait on any other crossing.
	SkipSameQueue
	// Unified runs kernels and library calls on one stream per task, so a
	// task has no crossing at all; crossings between tasks wait on the
	// device.
	Unified
	// DeviceBridge also waits on the device across domains, where the
	// timelines support it.
	DeviceBridge
)

// Policies lists every policy, in the order benchmarks report them.
var Policies = []Policy{WaitAlways, SkipSameQueue, DeviceSide, Unified, DeviceBridge}

func (p Policy) String() string {
	switch p {
	case WaitAlways:
		return "WaitAlways"
	case SkipSameQueue:
		return "SkipSameQueue"
	case DeviceSide:
		return "DeviceSide"
	case Unified:
		return "Unified"
	case DeviceBridge:
		return "DeviceBridge"
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy parses a policy name as printed by String (case-sensitive).
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("syncstate: unknown policy %q (want one of WaitAlways, SkipSameQueue, DeviceSide, Unified, DeviceBridge)", s)
}

// deviceWaitAllowed reports whether the policy lets a consumer on domain
// consumer wait on the device for a producer of domain producer.
//
// A host lane "waits on the device" on its own goroutine: whatever the
// policy, its dependencies never block the submitting goroutine (that is
// what a host lane is for). A GPU timeline waits for a host lane on the
// device (a signal or memory word the lane completes) under the policies
// that wait on the device at all; the two baselines (WaitAlways,
// SkipSameQueue) host-wait.
func (p Policy) deviceWaitAllowed(consumer, producer Domain) bool {
	if consumer == DomainHost {
		return true
	}
	if producer == DomainHost {
		return p == DeviceSide || p == Unified || p == DeviceBridge
	}
	switch p {
	case DeviceSide, Unified:
		return consumer == producer
	case DeviceBridge:
		return true
	}
	return false
}

// Placed is a Timeline that runs on one device (GPU). Timelines without it
// (host lanes, test fakes) are taken to be where their consumer is.
//
// A fence on a timeline of another place is a cross-device dependency:
// the consumer waits for it on the device only where it says it can
// (CanWaitPeer; HIP and CUDA events and HSA signals work across devices)
// and the policy waits on the device for that pair of domains; otherwise
// the host waits, counted as ReasonCrossDevice.
type Placed interface {
	// Place identifies the device: timelines of one device return the
	// same non-zero value, timelines of different devices different ones
	// (0: unknown, treated as local).
	Place() uint64
	// CanWaitPeer reports whether work on this timeline can wait on the
	// device for fences of timelines in domain d on another device.
	CanWaitPeer(d Domain) bool
}

// placeOf is tl's place, 0 when it has none.
func placeOf(tl Timeline) uint64 {
	if p, ok := tl.(Placed); ok {
		return p.Place()
	}
	return 0
}

// CrossDevice reports whether a fence of producer is on another device
// than consumer (both placed, on different places).
func CrossDevice(consumer, producer Timeline) bool {
	pc := placeOf(consumer)
	if pc == 0 {
		return false
	}
	pp := placeOf(producer)
	return pp != 0 && pp != pc
}

// Acquirer is implemented by a timeline whose work reads memory through a
// cache that writes made elsewhere do not update, and that must be told
// when an op may read such writes: an HSA queue, whose packets read through
// their GPU's L2 and see what the host, a copy engine or another GPU wrote
// only after an acquire at system scope (see queue.Config.AgentScope).
//
// An op on an Acquirer asks it for a system-scope acquire (AcquireSystem)
// once it is ordered after its inputs (its device waits are on the
// timeline, its host waits done) when one of its operands was last written
// by the host directly (MarkHostWritten) or by a timeline whose writes it
// does not share (SharesWritesOf), and the timeline has not read the
// operand since that write (an earlier op of the timeline that did asked
// for the acquire then).
type Acquirer interface {
	// SharesWritesOf reports whether work on the timeline sees what work
	// on producer wrote without an acquire at system scope.
	SharesWritesOf(producer Timeline) bool
	// AcquireSystem makes the timeline's next op that reads memory
	// acquire at system scope.
	AcquireSystem()
}

var places atomic.Uint64

// NewPlace returns a Place no other call returned: one per opened device.
func NewPlace() uint64 { return places.Add(1) }

package rocsync

import (
	"fmt"

	"github.com/rocsync/rocsync/syncstate"
)

// Stats counts what the sync core did for a task (Task.Stats) or a whole
// device (Device.Stats): ops submitted, and for every fence an op had to
// follow whether the wait was skipped, made on the device, or made on the
// host and why. It is a snapshot: a plain value, taken at one moment.
type Stats struct {
	// Dispatches counts ops submitted (kernels and library calls).
	Dispatches uint64
	// HostWaits counts host waits by reason, indexed by Reason:
	// HostWaits[ReasonBoundary] is the number of boundary waits
	// (HostWaitsFor says the same, and is 0 for an unknown reason).
	HostWaits [NumReasons]uint64
	// SkippedWaits counts fences that needed no wait: on the op's own
	// queue or stream, or already complete.
	SkippedWaits uint64
	// DeviceWaits counts fences waited for on the device (barrier-AND
	// packets, hipStreamWaitEvent, cuStreamWaitEvent, stream wait-value).
	DeviceWaits uint64
	// EventsRecorded counts HIP (or CUDA) events recorded, which rocsync
	// does only when a device wait needs one.
	EventsRecorded uint64
}

// NumReasons is the number of host-wait reasons: the length of
// Stats.HostWaits.
const NumReasons = 9

// The sync core counts as many reasons as Stats holds: this line stops
// compiling when the two differ.
var _ = [1]struct{}{}[NumReasons-len(syncstate.Snapshot{}.HostWaits)]

// Reason says why the host waited; Reason.String names it ("boundary",
// "read-back", ...).
type Reason = syncstate.Reason

// The host-wait reasons, the indexes of Stats.HostWaits.
const (
	// ReasonBoundary: an op crossed between the kernel queues and the
	// library streams (HSA↔HIP) where the device could not wait.
	ReasonBoundary = syncstate.ReasonBoundary
	// ReasonCrossQueue: an op crossed between two queues or streams of
	// one kind under a policy that waits on the host there
	// (SkipSameQueue).
	ReasonCrossQueue = syncstate.ReasonCrossQueue
	// ReasonReadBack: the host read an array back and waited for its
	// writer.
	ReasonReadBack = syncstate.ReasonReadBack
	// ReasonSync: an explicit Synchronize (or Close).
	ReasonSync = syncstate.ReasonSync
	// ReasonFree: memory was needed and freed arrays still had work
	// pending.
	ReasonFree = syncstate.ReasonFree
	// ReasonThrottle: a queue, stream or device had more work in flight
	// than Options.MaxInFlight or MaxInFlightPerDevice allow.
	ReasonThrottle = syncstate.ReasonThrottle
	// ReasonWaitAlways: the WaitAlways policy waits after every op.
	ReasonWaitAlways = syncstate.ReasonWaitAlways
	// ReasonLaunchBlocking: launch-blocking mode waits after every op.
	ReasonLaunchBlocking = syncstate.ReasonLaunchBlocking
	// ReasonCrossDevice: an op on one device depended on work on another
	// device that it could not wait for on the device (Task.CopyPeer
	// under SkipSameQueue, or across the HSA↔HIP boundary under
	// DeviceSide).
	ReasonCrossDevice = syncstate.ReasonCrossDevice
)

// Reasons lists every host-wait reason, in report order.
func Reasons() []Reason { return append([]Reason(nil), syncstate.Reasons...) }

func statsOf(s syncstate.Snapshot) Stats { return Stats(s) }

// HostWaitsTotal sums host waits over all reasons.
func (s Stats) HostWaitsTotal() uint64 { return syncstate.Snapshot(s).HostWaitsTotal() }

// HostWaitsFor returns the host waits for one reason (0 for a reason
// rocsync does not know).
func (s Stats) HostWaitsFor(r Reason) uint64 {
	if int(r) >= NumReasons {
		return 0
	}
	return s.HostWaits[r]
}

// Sub returns s - base, counter by counter: what happened between two
// snapshots.
func (s Stats) Sub(base Stats) Stats {
	return Stats(syncstate.Snapshot(s).Sub(syncstate.Snapshot(base)))
}

// String prints the counters on one line, host waits by reason where
// non-zero: "dispatches=3 host-waits=1 boundary=1 skipped=2
// device-waits=0 events=0".
func (s Stats) String() string { return syncstate.Snapshot(s).String() }

var _ fmt.Stringer = Stats{}

package syncstate

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Reason says why the host waited.
type Reason uint8

const (
	// ReasonBoundary: an op crossed between domains (HSA↔HIP) and the
	// device could not wait for the other side.
	ReasonBoundary Reason = iota
	// ReasonCrossQueue: an op crossed between two timelines of one domain
	// under a policy that waits on the host there (SkipSameQueue).
	ReasonCrossQueue
	// ReasonReadBack: the host read an array back.
	ReasonReadBack
	// ReasonSync: an explicit Synchronize.
	ReasonSync
	// ReasonFree: memory was needed and freed arrays still had work
	// pending, or a device was closed.
	ReasonFree
	// ReasonThrottle: a timeline had too much work in flight.
	ReasonThrottle
	// ReasonWaitAlways: the WaitAlways policy waits after every op.
	ReasonWaitAlways
	// ReasonLaunchBlocking: launch-blocking debug mode waits after every op.
	ReasonLaunchBlocking
	// ReasonCrossDevice: an op on one device depended on work on another
	// device that its queue or stream could not wait for on the device
	// (the policy waits on the host there, or the runtime cannot).
	ReasonCrossDevice
	numReasons
)

// Reasons lists every reason, in report order.
var Reasons = []Reason{ReasonBoundary, ReasonCrossQueue, ReasonReadBack, ReasonSync, ReasonFree, ReasonThrottle, ReasonWaitAlways, ReasonLaunchBlocking, ReasonCrossDevice}

func (r Reason) String() string {
	switch r {
	case ReasonBoundary:
		return "boundary"
	case ReasonCrossQueue:
		return "cross-queue"
	case ReasonReadBack:
		return "read-back"
	case ReasonSync:
		return "sync"
	case ReasonFree:
		return "free"
	case ReasonThrottle:
		return "throttle"
	case ReasonWaitAlways:
		return "wait-always"
	case ReasonLaunchBlocking:
		return "launch-blocking"
	case ReasonCrossDevice:
		return "cross-device"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Stats are live counters, safe for concurrent use. A task's events are
// counted in its own Stats and in its shard of the device's ShardedStats
// (Sinks).
type Stats struct {
	dispatches     atomic.Uint64
	hostWaits      [numReasons]atomic.Uint64
	skippedWaits   atomic.Uint64
	deviceWaits    atomic.Uint64
	eventsRecorded atomic.Uint64
}

// StatShards (a power of two) is how many Stats a ShardedStats holds.
const StatShards = 32

// ShardedStats are counters kept in StatShards separate Stats, each on
// cache lines of its own, so that tasks counting on different cores do not
// share a line (every op counts a dispatch and its skipped waits); a
// snapshot sums them. Its zero value is ready.
type ShardedStats struct {
	shards [StatShards]struct {
		Stats
		// Rounds the shard up to whole 64-byte lines and adds one, so
		// that two shards never share a line however the array is aligned.
		_ [64 + (64-unsafe.Sizeof(Stats{})%64)%64]byte
	}
}

// Shard returns the counters of shard i (any i ≥ 0, taken modulo
// StatShards).
func (s *ShardedStats) Shard(i int) *Stats { return &s.shards[i%StatShards].Stats }

// Snapshot sums the shards.
func (s *ShardedStats) Snapshot() Snapshot {
	var out Snapshot
	for i := range s.shards {
		out = out.Add(s.shards[i].Snapshot())
	}
	return out
}

// Snapshot is a copy of Stats at one moment.
type Snapshot struct {
	// Dispatches counts ops submitted (kernels and library calls).
	Dispatches uint64
	// HostWaits counts host waits by reason.
	HostWaits [numReasons]uint64
	// SkippedWaits counts fences that needed no wait: on the op's own
	// timeline, or already complete.
	SkippedWaits uint64
	// DeviceWaits counts fences waited for on the device.
	DeviceWaits uint64
	// EventsRecorded counts HIP events recorded (only when needed).
	EventsRecorded uint64
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	var out Snapshot
	out.Dispatches = s.dispatches.Load()
	for i := range s.hostWaits {
		out.HostWaits[i] = s.hostWaits[i].Load()
	}
	out.SkippedWaits = s.skippedWaits.Load()
	out.DeviceWaits = s.deviceWaits.Load()
	out.EventsRecorded = s.eventsRecorded.Load()
	return out
}

// HostWaitsTotal sums host waits over all reasons.
func (s Snapshot) HostWaitsTotal() uint64 {
	var n uint64
	for _, v := range s.HostWaits {
		n += v
	}
	return n
}

// HostWaitsFor returns the host waits for one reason.
func (s Snapshot) HostWaitsFor(r Reason) uint64 { return s.HostWaits[r] }

// Add returns s + other, counter by counter.
func (s Snapshot) Add(other Snapshot) Snapshot {
	out := Snapshot{
		Dispatches:     s.Dispatches + other.Dispatches,
		SkippedWaits:   s.SkippedWaits + other.SkippedWaits,
		DeviceWaits:    s.DeviceWaits + other.DeviceWaits,
		EventsRecorded: s.EventsRecorded + other.EventsRecorded,
	}
	for i := range s.HostWaits {
		out.HostWaits[i] = s.HostWaits[i] + other.HostWaits[i]
	}
	return out
}

// Sub returns s - base, counter by counter.
func (s Snapshot) Sub(base Snapshot) Snapshot {
	out := Snapshot{
		Dispatches:     s.Dispatches - base.Dispatches,
		SkippedWaits:   s.SkippedWaits - base.SkippedWaits,
		DeviceWaits:    s.DeviceWaits - base.DeviceWaits,
		EventsRecorded: s.EventsRecorded - base.EventsRecorded,
	}
	for i := range s.HostWaits {
		out.HostWaits[i] = s.HostWaits[i] - base.HostWaits[i]
	}
	return out
}

func (s Snapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dispatches=%d host-waits=%d", s.Dispatches, s.HostWaitsTotal())
	for _, r := range Reasons {
		if s.HostWaits[r] != 0 {
			fmt.Fprintf(&b, " %s=%d", r, s.HostWaits[r])
		}
	}
	fmt.Fprintf(&b, " skipped=%d device-waits=%d events=%d", s.SkippedWaits, s.DeviceWaits, s.EventsRecorded)
	return b.String()
}

// Sinks are the counters one event is added to: a task's and its device's.
type Sinks [2]*Stats

func (k Sinks) each(f func(*Stats)) {
	for _, s := range k {
		if s != nil {
			f(s)
		}
	}
}

// Dispatch counts one submitted op.
func (k Sinks) Dispatch() { k.each(func(s *Stats) { s.dispatches.Add(1) }) }

// HostWait counts one host wait.
func (k Sinks) HostWait(r Reason) { k.each(func(s *Stats) { s.hostWaits[r].Add(1) }) }

// Skipped counts n skipped waits.
func (k Sinks) Skipped(n uint64) {
	if n != 0 {
		k.each(func(s *Stats) { s.skippedWaits.Add(n) })
	}
}

// DeviceWait counts n fences waited for on the device.
func (k Sinks) DeviceWait(n uint64) {
	if n != 0 {
		k.each(func(s *Stats) { s.deviceWaits.Add(n) })
	}
}

// EventRecorded counts one recorded event.
func (k Sinks) EventRecorded() { k.each(func(s *Stats) { s.eventsRecorded.Add(1) }) }

package cudadev

import (
	"time"

	"github.com/rocsync/rocsync/stream"
)

// streamAPI gives the shared stream timeline (package stream) the CUDA
// calls it needs; the ticket and event logic is the same as on HIP.
type streamAPI struct{ b backend }

var _ stream.API = streamAPI{}

func (a streamAPI) EventCreate() (uintptr, error)       { return a.b.eventCreate() }
func (a streamAPI) EventDestroy(ev uintptr) error       { return a.b.eventDestroy(ev) }
func (a streamAPI) EventRecord(ev, s uintptr) error     { return a.b.eventRecord(ev, s) }
func (a streamAPI) EventQuery(ev uintptr) (bool, error) { return a.b.eventQuery(ev) }
func (a streamAPI) EventSynchronize(ev uintptr) error   { return a.b.eventSynchronize(ev) }
func (a streamAPI) StreamWaitEvent(s, ev uintptr) error { return a.b.streamWaitEvent(s, ev) }
func (a streamAPI) StreamQuery(s uintptr) (bool, error) { return a.b.streamQuery(s) }
func (a streamAPI) StreamSynchronize(s uintptr) error   { return a.b.streamSynchronize(s) }
func (a streamAPI) StreamDestroy(s uintptr) error       { return a.b.streamDestroy(s) }

// timingBackend is a backend whose events can time ops: the trace's device
// timestamps on CUDA (cuEventCreate without CU_EVENT_DISABLE_TIMING,
// cuEventElapsedTime).
type timingBackend interface {
	timingEventCreate() (uintptr, error)
	eventElapsed(start, stop uintptr) (time.Duration, error)
}

var _ stream.TimingAPI = streamAPI{}

// TimingEventCreate implements stream.TimingAPI.
func (a streamAPI) TimingEventCreate() (uintptr, error) {
	tb, ok := a.b.(timingBackend)
	if !ok {
		return 0, stream.ErrNoTiming
	}
	return tb.timingEventCreate()
}

// EventElapsed implements stream.TimingAPI.
func (a streamAPI) EventElapsed(start, stop uintptr) (time.Duration, error) {
	tb, ok := a.b.(timingBackend)
	if !ok {
		return 0, stream.ErrNoTiming
	}
	return tb.eventElapsed(start, stop)
}

package cudadev

import "github.com/rocsync/rocsync/stream"

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

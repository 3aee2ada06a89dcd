package stream

import "github.com/rocsync/rocsync/hip"

// HIP adapts a HIP runtime to API for one device.
func HIP(rt hip.Runtime, device int) API { return hipAPI{rt, device} }

type hipAPI struct {
	rt     hip.Runtime
	device int
}

// notReady tells hipErrorNotReady from real failures without errors.As,
// which would allocate on the polling path.
func notReady(err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	if he, ok := err.(*hip.Error); ok && he.Code == hip.ErrorNotReady {
		return false, nil
	}
	return false, err
}

func (h hipAPI) EventCreate() (uintptr, error) {
	e, err := h.rt.EventCreate(h.device, hip.EventDisableTiming)
	return uintptr(e), err
}
func (h hipAPI) EventDestroy(ev uintptr) error { return h.rt.EventDestroy(hip.Event(ev)) }
func (h hipAPI) EventRecord(ev, s uintptr) error {
	return h.rt.EventRecord(hip.Event(ev), hip.Stream(s))
}
func (h hipAPI) EventQuery(ev uintptr) (bool, error) {
	return notReady(h.rt.EventQuery(hip.Event(ev)))
}
func (h hipAPI) EventSynchronize(ev uintptr) error { return h.rt.EventSynchronize(hip.Event(ev)) }
func (h hipAPI) StreamWaitEvent(s, ev uintptr) error {
	return h.rt.StreamWaitEvent(hip.Stream(s), hip.Event(ev))
}
func (h hipAPI) StreamQuery(s uintptr) (bool, error) {
	return notReady(h.rt.StreamQuery(hip.Stream(s)))
}
func (h hipAPI) StreamSynchronize(s uintptr) error { return h.rt.StreamSynchronize(hip.Stream(s)) }
func (h hipAPI) StreamDestroy(s uintptr) error     { return h.rt.StreamDestroy(hip.Stream(s)) }

package stream

// Join makes stream waiter wait, on the device, for all work enqueued on
// stream signaler so far: an event from the pool is recorded on signaler
// and waited for by waiter (hipStreamWaitEvent, cuStreamWaitEvent), then
// returned to the pool at once, since the wait holds the record it was
// enqueued behind and a later record of the event does not move it. The
// streams may belong to anyone (a foreign producer's or consumer's).
func (p *EventPool) Join(waiter, signaler uintptr) error {
	if waiter == signaler {
		return nil // a stream runs its own work in order
	}
	ev, err := p.get()
	if err != nil {
		return err
	}
	defer p.put(ev)
	if err := p.api.EventRecord(ev, signaler); err != nil {
		return err
	}
	return p.api.StreamWaitEvent(waiter, ev)
}

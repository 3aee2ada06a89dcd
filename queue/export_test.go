package queue

import "context"

// PublishBreakOnly stores err as the queue's break without failing its
// in-flight packets: the moment inside setBroken between the two, which a
// concurrent submission can observe.
func (q *Queue) PublishBreakOnly(err error) { q.brokenErr.Store(&err) }

// WaitSignal is waitSignal: a wait for ticket t on signal s, which may be
// t's own or a marker's after it.
func (q *Queue) WaitSignal(s *Signal, t uint64) error {
	return q.waitSignal(context.Background(), s, t)
}

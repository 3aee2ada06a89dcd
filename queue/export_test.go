package queue

// PublishBreakOnly stores err as the queue's break without failing its
// in-flight packets: the moment inside setBroken between the two, which a
// concurrent submission can observe.
func (q *Queue) PublishBreakOnly(err error) { q.brokenErr.Store(&err) }

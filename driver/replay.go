package driver

// Recorder is a Task that prebuilds a recorded sequence of ops for replay
// (Kind Replay). The ops all run on one timeline of the task (lane's, or
// the one stream every lane shares under Unified); they are in the order
// they were recorded, and the front package has checked their operands.
type Recorder interface {
	Record(lane Lane, ops []Op) (Recorded, error)
}

// Recorded is a driver's prebuilt sequence: what a Replay op carries. A
// driver's Submit refuses one another task built.
type Recorded interface {
	// Ops is the number of recorded ops.
	Ops() int
	// Lane is the lane the ops were recorded for (Record's lane): a
	// Replay op of the recording runs on it.
	Lane() Lane
	// Release frees what the recording owns (kernarg memory, graphs)
	// once no replay of it is in flight; the front package drains first.
	Release() error
}

// TicketsRecorded is a Recorded whose replay takes more than one ticket
// of its timeline: an HSA queue segment takes one per AQL packet. A
// Recorded without it takes one (a stream's graph launch or its calls
// in one submission).
type TicketsRecorded interface {
	Tickets() uint64
}

// ReplayTickets is how many tickets a replay of r takes.
func ReplayTickets(r Recorded) uint64 {
	if tr, ok := r.(TicketsRecorded); ok {
		return max(tr.Tickets(), 1)
	}
	return 1
}

// GraphRecorded is a Recorded that may replay as one runtime graph (a
// CUDA graph, a hipGraph). Graph reports whether it does and, if capture
// was tried and failed, why (the recording then replays its calls in
// order).
type GraphRecorded interface {
	Graph() (bool, error)
}

// RunCalls makes calls, a recording's driver calls as functions of the
// stream (a hipStream_t or CUstream) they are enqueued on, in order on s,
// stopping at the first that fails: at capture into a graph, and at a
// replay of a recording that could not be captured.
func RunCalls(calls []func(stream uintptr) error, s uintptr) error {
	for _, c := range calls {
		if err := c(s); err != nil {
			return err
		}
	}
	return nil
}

// InOrder is RunCalls as one call of the stream: what a recording whose
// capture failed replays.
func InOrder(calls []func(stream uintptr) error) func(stream uintptr) error {
	return func(s uintptr) error { return RunCalls(calls, s) }
}

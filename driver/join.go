package driver

// StreamJoiner is a Device that can order two raw streams of its runtime
// (hipStream_t, CUstream) on the device, whoever made them: what a
// handshake with a producer or consumer outside rocsync needs (DLPack's
// __dlpack__(stream=...) contract).
type StreamJoiner interface {
	// JoinStreams makes waiter wait for all work enqueued on signaler so
	// far, without blocking the host.
	JoinStreams(waiter, signaler uintptr) error
}

// SignalFencer is a Task whose kernel lane is an HSA queue, so that a
// producer or consumer outside rocsync that speaks HSA can be ordered
// with its work through signals (SignalExport, SignalImport ops).
type SignalFencer interface {
	// ExternalSignals is nil when the task can export and import signals,
	// else why not (no HSA queue, as under Unified).
	ExternalSignals() error
	// NewExternalSignal returns a signal at 1 for a SignalExport op, held
	// until ReleaseExternalSignal.
	NewExternalSignal() (uint64, error)
	// ReleaseExternalSignal gives back a signal NewExternalSignal
	// returned; an unknown one is an error.
	ReleaseExternalSignal(signal uint64) error
}

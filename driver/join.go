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

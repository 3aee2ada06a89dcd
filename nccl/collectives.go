package nccl

// Collectives is the part of Lib that an op path enqueues through, so
// that a model of the library (the emulator's collectives over its
// emulated devices) can stand in for it. Buffers are device addresses and
// streams are the backend's stream handles, as in Lib.
type Collectives interface {
	CommInitAll(devices []int) ([]Comm, error)
	CommDestroy(c Comm) error
	CommAbort(c Comm) error
	AsyncError(c Comm) error
	GroupStart() error
	GroupEnd() error
	AllReduce(send, recv uintptr, count int, dt DataType, op RedOp, c Comm, stream uintptr) error
	AllGather(send, recv uintptr, sendCount int, dt DataType, c Comm, stream uintptr) error
	Broadcast(send, recv uintptr, count int, dt DataType, root int, c Comm, stream uintptr) error
	ReduceScatter(send, recv uintptr, recvCount int, dt DataType, op RedOp, c Comm, stream uintptr) error
}

var _ Collectives = (*Lib)(nil)

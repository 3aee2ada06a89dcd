package driver

import (
	"time"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/nccl/ncclid"
)

// UniqueID names one communicator across processes (an ncclUniqueId).
type UniqueID = ncclid.UniqueID

// Comm is a communicator of one rank, a handle of its Collectives.
type Comm uintptr

// ReduceOp is the reduction of an all-reduce, in ncclRedOp_t's order.
type ReduceOp uint8

// The reductions (ncclSum, ncclProd, ncclMax, ncclMin).
const (
	ReduceSum ReduceOp = iota
	ReduceProd
	ReduceMax
	ReduceMin
)

// Collectives is a family's collective library (NCCL on CUDA, RCCL on
// ROCm, a model of RCCL on the emulator), as the front package enqueues
// through it: buffers are device addresses, streams the raw handles a
// LibraryCall op is given, element types float32 and float64.
type Collectives interface {
	// Name names the library in messages: "NCCL", "RCCL".
	Name() string
	// NewUniqueID makes the id of a new communicator across processes
	// (ncclGetUniqueId).
	NewUniqueID() (UniqueID, error)
	// CommInitAll makes a communicator over devs, rank i on devs[i]
	// (ncclCommInitAll).
	CommInitAll(devs []Device) ([]Comm, error)
	// CommInitRank makes rank of a communicator of nranks ranks on d, from
	// the id one of them made (ncclCommInitRank); it returns once every
	// rank has joined. A rendezvous that ran out of time matches
	// syncstate.ErrWaitTimeout.
	CommInitRank(d Device, nranks int, id UniqueID, rank int) (Comm, error)
	CommDestroy(c Comm) error
	CommAbort(c Comm) error
	AllReduce(send, recv DevicePtr, count int, dt kernels.DType, op ReduceOp, c Comm, stream uintptr) error
	AllGather(send, recv DevicePtr, sendCount int, dt kernels.DType, c Comm, stream uintptr) error
	Broadcast(send, recv DevicePtr, count int, dt kernels.DType, root int, c Comm, stream uintptr) error
	// Group runs body between ncclGroupStart and ncclGroupEnd on one OS
	// thread, locked to it for the group (the library keeps group state
	// per thread), with dev current on it, and returns body's error
	// joined with the group's. The collectives body makes for several
	// communicators are one call to many devices, launched at
	// ncclGroupEnd, not when body makes them (NCCL's Group Calls,
	// "Management Of Multiple GPUs From One Thread").
	Group(dev Device, body func() error) error
}

// LibraryHolder is a Task whose library stream can be held for one
// library call whose work reaches the stream later than the call
// returns, a collective inside a group (Collectives.Group).
type LibraryHolder interface {
	// ReadyLibrary makes the waits Submit makes before a library call
	// (the run-ahead throttle, host functions the stream waits for), so
	// that HoldLibrary waits for nothing: a caller holding several
	// streams must not wait while it holds them.
	ReadyLibrary() error
	// HoldLibrary takes the library lane's stream for one op, with the
	// checks of Submit, and returns its raw handle. Until ReleaseLibrary
	// nothing else is enqueued on the stream and no event is recorded on
	// it (other callers wait), so no fence of the stream can be recorded
	// ahead of the held op. On error nothing is held.
	HoldLibrary() (stream uintptr, err error)
	// ReleaseLibrary ends the hold. enqueued says the op's work is on
	// the stream, or may be: it then gets the stream's next ticket,
	// returned. Otherwise the stream is as before (ticket 0).
	ReleaseLibrary(enqueued bool) uint64
}

// CollectiveDevice is a Device whose family has a collective library.
type CollectiveDevice interface {
	// Collectives returns the library, loading it at its first use;
	// timeout bounds an emulated library's rendezvous (0: none). A
	// missing library is an error naming it and the paths searched.
	Collectives(timeout time.Duration) (Collectives, error)
}

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
}

// CollectiveDevice is a Device whose family has a collective library.
type CollectiveDevice interface {
	// Collectives returns the library, loading it at its first use;
	// timeout bounds an emulated library's rendezvous (0: none). A
	// missing library is an error naming it and the paths searched.
	Collectives(timeout time.Duration) (Collectives, error)
}

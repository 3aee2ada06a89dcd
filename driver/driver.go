// Package driver is the thin interface between rocsync's front package and
// a family of GPU runtimes, in the way database/sql/driver sits under
// database/sql: the ROCm family (HSA queues for rocsync's kernels, HIP
// streams and rocBLAS for library calls, real or emulated) and the CUDA
// family implement it; the ordering logic (syncstate) and the API live
// above it and do not change per family.
package driver

import (
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// DevicePtr is a device address; the host cannot dereference it.
type DevicePtr uint64

// DeviceConfig is what the front package asks of a device.
type DeviceConfig struct {
	Policy syncstate.Policy
	// QueueSize is the kernel queue's ring size, where the family has one.
	QueueSize uint32
	// MaxQueues bounds the kernel queues the device creates.
	MaxQueues int
	// Stats receives the device-level counts (throttle waits and the like).
	Stats *syncstate.Stats
	// WaitTimeout bounds every host wait (0: none).
	WaitTimeout time.Duration
	// MaxInFlight caps the ops in flight per timeline (0: the family's
	// own limit, such as the ring size).
	MaxInFlight int
}

// Device is one GPU of a family.
type Device interface {
	// Target names the GPU's code target, such as
	// "amdgcn-amd-amdhsa--gfx90a" or "sm_90".
	Target() string
	Malloc(size uint64) (DevicePtr, error)
	Free(p DevicePtr) error
	// CopyHtoD and CopyDtoH are synchronous with respect to the host and
	// are not ordered with queued work: the front package orders them.
	CopyHtoD(dst DevicePtr, src unsafe.Pointer, size uint64) error
	CopyDtoH(dst unsafe.Pointer, src DevicePtr, size uint64) error
	// NewTask makes one task's timelines; sinks receive its counts.
	NewTask(sinks syncstate.Sinks) (Task, error)
	// SignalsCreated and EventsCreated count the completion objects ever
	// created: pooled, they stay flat in steady state.
	SignalsCreated() uint64
	EventsCreated() uint64
	Close() error
}

// Task is one task's place to submit work: a timeline for rocsync's
// kernels and one for library calls (the same timeline when the policy
// puts everything on one stream).
type Task interface {
	KernelTimeline() syncstate.Timeline
	LibraryTimeline() syncstate.Timeline
	// Launch submits an elementwise kernel over args.N elements on the
	// kernel timeline and returns its ticket. args is passed by value so
	// that nothing of the caller's escapes through the interface: the hot
	// path allocates nothing.
	Launch(op kernels.Op, dt kernels.DType, args kernels.Args) (uint64, error)
	// Gemm submits C = alpha·op(A)·op(B) + beta·C, column-major (BLAS
	// convention), on the library timeline and returns its ticket.
	Gemm(dt kernels.DType, transA, transB bool, m, n, k int, alpha float64,
		a DevicePtr, lda int, b DevicePtr, ldb int, beta float64, c DevicePtr, ldc int) (uint64, error)
	// Close drains and releases the task's resources.
	Close() error
}

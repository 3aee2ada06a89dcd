// Package driver is the thin interface between rocsync's front package and
// a family of GPU runtimes, in the way database/sql/driver sits under
// database/sql: the ROCm family (HSA queues for kernels, HIP streams and
// rocBLAS for library calls, real or emulated) and the CUDA family
// implement it; the ordering logic (syncstate) and the API live above it
// and do not change per family.
//
// Every kind of work reaches a driver as one value, an Op, through one
// method, Task.Submit: a new kind of op is a new op type and one case per
// driver, not a new method on every layer. What a driver may
// lack is a separate optional interface (KernelLoader, HostMemory,
// CollectiveDevice; HazardReporter and HostTracker for an emulated
// System), which the front package asks for with a type assertion and
// falls back from.
//
// Drivers register under a name (Register) and the front package opens
// them by that name (Open): it imports no driver, and a program gets them
// by importing the package that registers them (rocsync's backends).
// Failures the front tells apart are error kinds a driver attaches
// (WithKind): ErrNoDevice, ErrNotInstalled, ErrOutOfMemory.
//
// The package refuses to know about arrays, buffers' sync states or
// which op must wait for which: the front package orders an op (syncstate)
// before it submits it and records it after.
package driver

import (
	"errors"
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
	// OnThrottle, if set, is told of every throttle wait (sync-debug).
	OnThrottle func(f syncstate.Fence) error
	// StreamWaitsForHostLanes lets CUDA streams wait on the device
	// (cuStreamWaitValue64) for a host lane's functions. Off by default:
	// streams share a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS),
	// so a host function's own synchronous copy (HostAccess) can queue
	// behind the stream that waits for that function, and both hang (the
	// open op set's program hangs so on an H100). Tests of the mechanism
	// turn it on.
	StreamWaitsForHostLanes bool
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
	// Builtin returns rocsync's own elementwise kernel op for element type
	// dt, loaded on the device (the first call loads the code): a Dispatch
	// of it takes a kernels.Args block.
	Builtin(op kernels.Op, dt kernels.DType) (*LoadedKernel, error)
	// NewTask makes one task's timelines; sinks receive its counts.
	NewTask(sinks syncstate.Sinks) (Task, error)
	// SignalsCreated and EventsCreated count the completion objects ever
	// created: pooled, they stay flat in steady state.
	SignalsCreated() uint64
	EventsCreated() uint64
	Close() error
}

// Lane is where an op runs within a task.
type Lane uint8

const (
	// LaneKernel is the task's kernel queue (an HSA queue on ROCm, the
	// kernel stream on CUDA; the stream itself under Unified).
	LaneKernel Lane = iota
	// LaneLibrary is the task's library stream (the HIP stream its
	// rocBLAS handle is bound to, the CUDA stream of its cuBLAS handle).
	LaneLibrary
	// LaneHost is the task's host lane (package hostlane): Go functions
	// run in order on a goroutine of rocsync's own.
	LaneHost
	numLanes
)

func (l Lane) String() string {
	switch l {
	case LaneKernel:
		return "kernel"
	case LaneLibrary:
		return "library"
	case LaneHost:
		return "host"
	}
	return "Lane(?)"
}

// Task is one task's place to submit work: a timeline per lane (the same
// timeline for both when the policy puts everything on one stream).
type Task interface {
	// Timeline returns the timeline of a lane.
	Timeline(l Lane) syncstate.Timeline
	// Submit puts op on op.Lane()'s timeline and returns its ticket. An op
	// of a type the driver does not run is an error matching
	// ErrUnsupported; nothing is submitted then. The driver reads op
	// during Submit only.
	Submit(op Op) (ticket uint64, err error)
	// Close drains and releases the task's resources.
	Close() error
}

// KernelLoader is a Device that loads user kernels. Image is an AMD code
// object or a NUL-terminated PTX module for the device's target.
type KernelLoader interface {
	// LoadModule loads an image and returns a handle to it.
	LoadModule(image []byte) (module uint64, err error)
	// Kernel finds a kernel in a loaded module; argsSize and
	// paramOffsets come from the kernel's own metadata.
	Kernel(module uint64, name string, argsSize uint32, paramOffsets []int) (*LoadedKernel, error)
	// AcceptsCodeObject reports whether the device's runtimes load AMD
	// code objects of version v (always true off AMD).
	AcceptsCodeObject(v kernels.CodeObjectVersion) bool
}

// BLASHandler is a Task with a BLAS handle (rocblas_handle,
// cublasHandle_t) bound to its library stream, which library calls may use.
type BLASHandler interface {
	BLASHandle() uintptr
}

// HostMemory is a Device with pinned host memory, which asynchronous
// copies need (hipHostMalloc, cuMemHostAlloc; CPU-pool memory the GPU may
// access in the emulator).
type HostMemory interface {
	HostAlloc(size uint64) (unsafe.Pointer, error)
	HostFree(p unsafe.Pointer) error
}

// PeerCopier is a Device whose copies reach another device's memory
// directly (peer to peer: NVLink, XGMI, PCIe peer access).
type PeerCopier interface {
	// EnablePeer makes the memory of peer, another device of the same
	// family, reachable by CopyPeer ops on this device's streams, once
	// per pair (cuCtxEnablePeerAccess, hipDeviceEnablePeerAccess). ok is
	// false, with a nil error, when the two cannot reach each other:
	// copies between them then go through host memory.
	EnablePeer(peer Device) (ok bool, err error)
}

// ErrUnsupported is matched (errors.Is) by Submit's error for an op the
// driver does not run, such as a GemmOp without a BLAS library's kind, or
// an op type from a newer front package.
var ErrUnsupported = errors.New("driver: op not supported")

// Package driver is the thin interface between rocsync's front package and
// a family of GPU runtimes, in the way database/sql/driver sits under
// database/sql: the ROCm family (HSA queues for kernels, HIP streams and
// rocBLAS for library calls, real or emulated) and the CUDA family
// implement it; the ordering logic (syncstate) and the API live above it
// and do not change per family.
//
// Every kind of work reaches a driver as one value, an Op, through one
// method, Task.Submit: a new kind of op is a new Kind constant and one
// case per driver, not a new method on every layer. What a driver may
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
	"github.com/rocsync/rocsync/userkernel"
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

// Kind says what an Op does and which of its fields it uses.
type Kind uint8

const (
	// KindInvalid is the zero Kind: drivers refuse it.
	KindInvalid Kind = iota
	// Dispatch runs a LoadedKernel over Geometry with the argument block
	// Args[:Kernel.ArgsSize]: rocsync's own kernels and user kernels alike.
	// It runs on LaneKernel (rocsync dispatches kernels on its queue).
	Dispatch
	// Gemm is C = alpha·op(A)·op(B) + beta·C, column-major (BLAS
	// convention), described by Op.Gemm, on LaneLibrary.
	Gemm
	// LibraryCall runs Op.Call with the raw handle of the lane's stream
	// (hipStream_t, CUstream); the function enqueues work on it. LaneLibrary.
	LibraryCall
	// CopyHtoD copies Size bytes from host memory Host to device address
	// Dst, asynchronously on the lane's stream. Host must be pinned
	// (HostMemory) and stay untouched until the op completes.
	CopyHtoD
	// CopyDtoH copies Size bytes from device address Src to pinned host
	// memory Host, asynchronously.
	CopyDtoH
	// CopyDtoD copies Size bytes from Src to Dst on the device.
	CopyDtoD
	// HostFunc runs Op.Func on the task's host lane (LaneHost) once the
	// fences the lane was told to wait for have completed; the submitter
	// does not wait. Its error fails its ticket.
	HostFunc
	// Replay submits a recorded sequence of ops of one timeline as one
	// op: Op.Recorded, built by the task's Recorder. One ticket.
	Replay
	// CopyPeer copies Size bytes from Src, memory of device Peer, to Dst
	// on this task's device, asynchronously on the lane's stream, after
	// PeerCopier.EnablePeer(Peer) said the devices reach each other.
	CopyPeer
	// SignalExport completes the HSA signal Op.Signal (from
	// SignalFencer.NewExternalSignal) once everything before it on the
	// kernel queue has completed: a marker packet. LaneKernel.
	SignalExport
	// SignalImport makes the kernel queue wait until the foreign HSA
	// signal Op.Signal reads 0: a barrier-AND packet. LaneKernel.
	SignalImport
	numKinds
)

var kindNames = [...]string{KindInvalid: "invalid", Dispatch: "dispatch", Gemm: "gemm", LibraryCall: "library call",
	CopyHtoD: "copy host to device", CopyDtoH: "copy device to host", CopyDtoD: "copy device to device", HostFunc: "host function",
	Replay: "replay", CopyPeer: "copy between devices",
	SignalExport: "signal export", SignalImport: "signal import"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "Kind(?)"
}

// MaxArgs is the largest argument block a Dispatch carries (the HSA
// queue's kernarg slot, queue.KernargSlot): 256 bytes of explicit
// arguments and the 256-byte implicit-argument area code object v5
// reserves after them.
const MaxArgs = 512

// LoadedKernel is a kernel loaded on one device, as a Dispatch names it. The
// device owns it; it is immutable once returned.
type LoadedKernel struct {
	Name string
	// Object is what the kernel queue dispatches: the AQL kernel object on
	// ROCm, the CUfunction on CUDA.
	Object uint64
	// Function is the same kernel as a hipFunction_t, under the Unified
	// policy on ROCm (kernels run on the HIP stream); 0 otherwise.
	Function uint64
	// ArgsSize is the argument block's size (the kernarg segment size on
	// AMD, hidden arguments included; the parameter buffer on CUDA).
	ArgsSize uint32
	// ExplicitArgsSize is the part of the block the explicit parameters
	// span, at its start: what hipModuleLaunchKernel is given under
	// Unified, since HIP fills the hidden arguments itself (clr,
	// VirtualGPU::submitKernelInternal) and current clr refuses a non-zero
	// size for a kernel without parameters (ihipLaunchKernelCommand,
	// hipamd/src/hip_module.cpp: hipErrorLaunchOutOfResources).
	ExplicitArgsSize uint32
	// GroupSegmentSize and PrivateSegmentSize are the static LDS per
	// workgroup and the scratch per work-item an AQL packet carries.
	GroupSegmentSize, PrivateSegmentSize uint32
	// Workgroup is the 1-D workgroup size rocsync's own kernels launch
	// with on this device.
	Workgroup uint32
	// ParamOffsets are the offsets of the parameters in the argument
	// block: cuLaunchKernel takes one pointer per parameter.
	ParamOffsets []int
}

// GemmArgs are a Gemm's operands.
type GemmArgs struct {
	DType          kernels.DType
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float64
	A, B, C        DevicePtr
	LDA, LDB, LDC  int
}

// Op is one unit of work of any kind. The front package fills one it owns
// per task (a task serves one goroutine) and passes it by pointer, so that
// submitting allocates nothing; a driver reads it during Submit only.
type Op struct {
	Kind Kind

	// Dispatch.
	Kernel *LoadedKernel
	// Geometry is the dispatch's shape in work-items, as AQL counts
	// them (CUDA drivers divide by the workgroup): Dims 1 to 3, every
	// extent at least 1.
	Geometry userkernel.Geometry
	Args     [MaxArgs]byte

	// Gemm.
	Gemm GemmArgs

	// LibraryCall: called once, with the stream's raw handle, while the
	// stream is held; it must enqueue its work on that stream only.
	Call func(stream uintptr) error

	// Copies.
	Dst, Src DevicePtr
	Host     unsafe.Pointer
	Size     uint64

	// HostFunc: called once, on the host lane's goroutine.
	Func func() error

	// Replay: a sequence the task's Recorder built.
	Recorded Recorded
	// CopyPeer: the device Src is on (of the same family).
	Peer Device
	// SignalExport, SignalImport: an hsa_signal_t handle.
	Signal uint64
}

// Lane is the lane op runs on, which its kind decides: Dispatch and the
// signal kinds on LaneKernel, HostFunc on LaneHost, a Replay on the lane
// its recording was made for, every other kind on LaneLibrary.
func (op *Op) Lane() Lane {
	switch op.Kind {
	case Dispatch, SignalExport, SignalImport:
		return LaneKernel
	case HostFunc:
		return LaneHost
	case Replay:
		if op.Recorded != nil {
			return op.Recorded.Lane()
		}
		return LaneKernel
	}
	return LaneLibrary
}

// Reset makes op an op of kind k with every field of every kind zero, so
// that nothing of the op before it survives into it, except the argument
// block: a Dispatch writes the part of it its kernel reads (ArgsSize), and
// no other kind reads it.
func (op *Op) Reset(k Kind) {
	op.Kind, op.Kernel, op.Geometry, op.Gemm = k, nil, userkernel.Geometry{}, GemmArgs{}
	op.Call, op.Dst, op.Src, op.Host, op.Size = nil, 0, 0, nil, 0
	op.Func, op.Recorded, op.Peer, op.Signal = nil, nil, nil, 0
}

// Task is one task's place to submit work: a timeline per lane (the same
// timeline for both when the policy puts everything on one stream).
type Task interface {
	// Timeline returns the timeline of a lane.
	Timeline(l Lane) syncstate.Timeline
	// Submit puts op on op.Lane()'s timeline and returns its ticket. An op
	// of a kind the driver does not run is an error matching
	// ErrUnsupported; nothing is submitted then.
	Submit(op *Op) (ticket uint64, err error)
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
// driver does not run, such as a Gemm without a BLAS library's kind, or a
// kind from a newer front package.
var ErrUnsupported = errors.New("driver: op not supported")

// MaxGrid caps the work-items of one dispatch of rocsync's own kernels:
// they loop over the rest with a grid stride.
const MaxGrid = 1 << 24

// SetBuiltin makes op a Dispatch of k, one of rocsync's own kernels (from
// Device.Builtin), over args.N elements: the argument block is args
// encoded for dt and the grid a multiple of the kernel's workgroup, at
// most MaxGrid. It allocates nothing.
func (op *Op) SetBuiltin(k *LoadedKernel, dt kernels.DType, args *kernels.Args) {
	op.Reset(Dispatch)
	op.Kernel = k
	args.Encode(op.Args[:], dt)
	wg := uint64(max(k.Workgroup, 1))
	grid := min(max((args.N+wg-1)/wg*wg, wg), MaxGrid)
	op.Geometry = userkernel.Grid1D(uint32(grid), uint32(wg))
}

// LaunchBuiltin submits rocsync's kernel kop for dt over args.N elements
// on t's kernel lane, through op (which it overwrites).
func LaunchBuiltin(d Device, t Task, op *Op, kop kernels.Op, dt kernels.DType, args kernels.Args) (uint64, error) {
	k, err := d.Builtin(kop, dt)
	if err != nil {
		return 0, err
	}
	op.SetBuiltin(k, dt, &args)
	return t.Submit(op)
}

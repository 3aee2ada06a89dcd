package driver

import (
	"unsafe"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// Op is one unit of work, handed to Task.Submit: a pointer to one of the
// op types below (*DispatchOp, *GemmOp, *LibraryCallOp, *CopyOp,
// *PeerCopyOp, *HostFuncOp, *ReplayOp, *SignalOp). Each type holds only
// the fields its kind uses, and its lane follows from it. The set is
// closed (a driver switches over the types), so a new kind of work is a
// new type here and one case per driver. The front package owns one value
// of each type per task (a task serves one goroutine) and passes a
// pointer to it, so that submitting allocates nothing; a driver reads it
// during Submit only and keeps nothing of it but what it copies.
type Op interface {
	// Kind names the op's kind (for traces and errors).
	Kind() Kind
	// Lane is the lane of the task the op runs on.
	Lane() Lane
	// Clone returns a copy of the op that shares nothing the front
	// package reuses: what a recording keeps.
	Clone() Op
	isOp()
}

// Kind names what an op does: one per op type, and one per direction of
// a CopyOp and a SignalOp.
type Kind uint8

const (
	// KindInvalid is the zero Kind: an op whose direction is unset.
	KindInvalid Kind = iota
	Dispatch
	Gemm
	LibraryCall
	CopyHtoD
	CopyDtoH
	CopyDtoD
	HostFunc
	Replay
	CopyPeer
	SignalExport
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

// DispatchOp runs Kernel over Geometry with the argument block
// Args[:Kernel.ArgsSize]: rocsync's own kernels and user kernels alike. It
// runs on LaneKernel (rocsync dispatches kernels on its queue).
type DispatchOp struct {
	Kernel *LoadedKernel
	// Geometry is the dispatch's shape in work-items, as AQL counts
	// them (CUDA drivers divide by the workgroup): Dims 1 to 3, every
	// extent at least 1.
	Geometry userkernel.Geometry
	Args     [MaxArgs]byte
}

// MaxGrid caps the work-items of one dispatch of rocsync's own kernels:
// they loop over the rest with a grid stride.
const MaxGrid = 1 << 24

// SetBuiltin makes op a dispatch of k, one of rocsync's own kernels (from
// Device.Builtin), over args.N elements: the argument block is args
// encoded for dt and the grid a multiple of the kernel's workgroup, at
// most MaxGrid. It allocates nothing.
func (op *DispatchOp) SetBuiltin(k *LoadedKernel, dt kernels.DType, args *kernels.Args) {
	op.Kernel = k
	args.Encode(op.Args[:], dt)
	wg := uint64(max(k.Workgroup, 1))
	grid := min(max((args.N+wg-1)/wg*wg, wg), MaxGrid)
	op.Geometry = userkernel.Grid1D(uint32(grid), uint32(wg))
}

// LaunchBuiltin submits rocsync's kernel kop for dt over args.N elements
// on t's kernel lane, through op (which it overwrites).
func LaunchBuiltin(d Device, t Task, op *DispatchOp, kop kernels.Op, dt kernels.DType, args kernels.Args) (uint64, error) {
	k, err := d.Builtin(kop, dt)
	if err != nil {
		return 0, err
	}
	op.SetBuiltin(k, dt, &args)
	return t.Submit(op)
}

// GemmOp is C = alpha·op(A)·op(B) + beta·C, column-major (BLAS
// convention), on LaneLibrary.
type GemmOp struct {
	DType          kernels.DType
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float64
	A, B, C        DevicePtr
	LDA, LDB, LDC  int
}

// LibraryCallOp runs Call once, with the raw handle of the lane's stream
// (hipStream_t, CUstream), while the stream is held; Call must enqueue
// its work on that stream only. LaneLibrary.
type LibraryCallOp struct {
	Call func(stream uintptr) error
}

// CopyDirection is which way a CopyOp copies.
type CopyDirection uint8

const (
	// HostToDevice copies from pinned host memory Host to Dst.
	HostToDevice CopyDirection = iota + 1
	// DeviceToHost copies from Src to pinned host memory Host.
	DeviceToHost
	// DeviceToDevice copies from Src to Dst on the device.
	DeviceToDevice
)

// CopyOp copies Size bytes asynchronously on the lane's stream
// (LaneLibrary), the way Direction says. Host memory must be pinned
// (HostMemory) and stay untouched until the op completes.
type CopyOp struct {
	Direction CopyDirection
	Dst, Src  DevicePtr
	Host      unsafe.Pointer
	Size      uint64
}

// PeerCopyOp copies Size bytes from Src, memory of device Peer, to Dst
// on this task's device, asynchronously on the lane's stream
// (LaneLibrary), after PeerCopier.EnablePeer(Peer) said the devices reach
// each other.
type PeerCopyOp struct {
	Dst, Src DevicePtr
	Size     uint64
	Peer     Device
}

// HostFuncOp runs Func on the task's host lane (LaneHost) once the fences
// the lane was told to wait for have completed; the submitter does not
// wait. Its error fails its ticket.
type HostFuncOp struct {
	Func func() error
}

// ReplayOp submits Recorded, a sequence of ops of one timeline built by
// the task's Recorder, as one op on the lane it was recorded for.
type ReplayOp struct {
	Recorded Recorded
}

// SignalOp ties the kernel queue (LaneKernel) to an HSA signal, an
// hsa_signal_t handle from SignalFencer.NewExternalSignal or a foreign
// one. An export (Import false) completes Signal once everything before
// it on the queue has completed: a marker packet. An import makes the
// queue wait until Signal reads 0: a barrier-AND packet.
type SignalOp struct {
	Signal uint64
	Import bool
}

func (*DispatchOp) Kind() Kind    { return Dispatch }
func (*GemmOp) Kind() Kind        { return Gemm }
func (*LibraryCallOp) Kind() Kind { return LibraryCall }
func (*PeerCopyOp) Kind() Kind    { return CopyPeer }
func (*HostFuncOp) Kind() Kind    { return HostFunc }
func (*ReplayOp) Kind() Kind      { return Replay }

func (op *CopyOp) Kind() Kind {
	switch op.Direction {
	case HostToDevice:
		return CopyHtoD
	case DeviceToHost:
		return CopyDtoH
	case DeviceToDevice:
		return CopyDtoD
	}
	return KindInvalid
}

func (op *SignalOp) Kind() Kind {
	if op.Import {
		return SignalImport
	}
	return SignalExport
}

func (*DispatchOp) Lane() Lane    { return LaneKernel }
func (*GemmOp) Lane() Lane        { return LaneLibrary }
func (*LibraryCallOp) Lane() Lane { return LaneLibrary }
func (*CopyOp) Lane() Lane        { return LaneLibrary }
func (*PeerCopyOp) Lane() Lane    { return LaneLibrary }
func (*HostFuncOp) Lane() Lane    { return LaneHost }
func (*SignalOp) Lane() Lane      { return LaneKernel }

// Lane is the lane the recording was made for (LaneKernel without one).
func (op *ReplayOp) Lane() Lane {
	if op.Recorded != nil {
		return op.Recorded.Lane()
	}
	return LaneKernel
}

func (op *DispatchOp) Clone() Op    { c := *op; return &c }
func (op *GemmOp) Clone() Op        { c := *op; return &c }
func (op *LibraryCallOp) Clone() Op { c := *op; return &c }
func (op *CopyOp) Clone() Op        { c := *op; return &c }
func (op *PeerCopyOp) Clone() Op    { c := *op; return &c }
func (op *HostFuncOp) Clone() Op    { c := *op; return &c }
func (op *ReplayOp) Clone() Op      { c := *op; return &c }
func (op *SignalOp) Clone() Op      { c := *op; return &c }

func (*DispatchOp) isOp()    {}
func (*GemmOp) isOp()        {}
func (*LibraryCallOp) isOp() {}
func (*CopyOp) isOp()        {}
func (*PeerCopyOp) isOp()    {}
func (*HostFuncOp) isOp()    {}
func (*ReplayOp) isOp()      {}
func (*SignalOp) isOp()      {}

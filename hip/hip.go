// Package hip defines the Go-level interface to the HIP runtime
// (libamdhip64) functions that rocsync uses, and their enum values.
//
// The purego binding to the real library and the emulated device in
// internal/rocmdev/emu both implement Runtime.
package hip

import (
	"fmt"
	"unsafe"
)

// Opaque handles. hipStream_t, hipEvent_t, hipModule_t and hipFunction_t are
// pointers in C; they are carried as integers because the host never
// dereferences them.
type (
	Stream   uintptr
	Event    uintptr
	Module   uintptr
	Function uintptr
)

// DevicePtr is a device address. The host cannot dereference it.
type DevicePtr uint64

// ErrorCode is hipError_t.
type ErrorCode uint32

const (
	Success             ErrorCode = 0
	ErrorInvalidValue   ErrorCode = 1
	ErrorOutOfMemory    ErrorCode = 2
	ErrorNotInitialized ErrorCode = 3
	ErrorNoDevice       ErrorCode = 100
	ErrorInvalidDevice  ErrorCode = 101
	ErrorInvalidImage   ErrorCode = 200
	ErrorInvalidHandle  ErrorCode = 400
	ErrorNotFound       ErrorCode = 500
	ErrorNotReady       ErrorCode = 600
	ErrorIllegalAddress ErrorCode = 700
	// ErrorLaunchOutOfResources is also what current clr returns for
	// arguments given to a kernel without parameters (hip_module.cpp,
	// ihipLaunchKernelCommand).
	ErrorLaunchOutOfResources ErrorCode = 701
	ErrorLaunchFailure        ErrorCode = 719
	ErrorNotSupported         ErrorCode = 801
	ErrorUnknown              ErrorCode = 999
	ErrorInvalidResource      ErrorCode = ErrorInvalidHandle
)

// The answers of hipDeviceEnablePeerAccess for a pair already enabled,
// and for two devices that cannot reach each other.
const (
	ErrorPeerAccessAlreadyEnabled ErrorCode = 704
	ErrorPeerAccessUnsupported    ErrorCode = 217
)

// ErrorSharedObjectInitFailed (hipErrorSharedObjectInitFailed) is what
// hipModuleLoadData returns for a code object the runtime cannot take,
// e.g. code object v5 on HIP 5.2.
const ErrorSharedObjectInitFailed ErrorCode = 303

// Error is a failed HIP call, with hipGetErrorName and hipGetErrorString.
type Error struct {
	Func string
	Code ErrorCode
	Name string
	Text string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("hip: %s: error %d", e.Func, uint32(e.Code))
	if e.Name != "" {
		s += " " + e.Name
	}
	if e.Text != "" && e.Text != e.Name {
		s += ": " + e.Text
	}
	return s
}

// Is matches another *Error by code (and by function when the target names one).
func (e *Error) Is(target error) bool {
	// errors.Is hands over the target as the caller wrote it; a type
	// assertion (not errors.As) keeps the comparison allocation-free.
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Func == "" || t.Func == e.Func)
}

// Flags and enum values (hip_runtime_api.h, identical in ROCm 5.2 and 6.2).
const (
	StreamDefault     uint32 = 0
	StreamNonBlocking uint32 = 1

	EventDefault       uint32 = 0
	EventBlockingSync  uint32 = 1
	EventDisableTiming uint32 = 2

	MemcpyHostToHost     uint32 = 0
	MemcpyHostToDevice   uint32 = 1
	MemcpyDeviceToHost   uint32 = 2
	MemcpyDeviceToDevice uint32 = 3

	StreamWaitValueGte uint32 = 0
	StreamWaitValueEq  uint32 = 1
	StreamWaitValueAnd uint32 = 2
	StreamWaitValueNor uint32 = 3

	DeviceMallocDefault     uint32 = 0
	DeviceMallocFinegrained uint32 = 1
	MallocSignalMemory      uint32 = 2
)

// StreamPriorityHigh is clr's hip::Stream::Priority::High
// (hipamd/src/hip_internal.hpp), the greatest priority
// hipDeviceGetStreamPriorityRange reports; hipStreamCreateWithPriority
// takes any value at or below it as high. clr keeps a pool of hardware
// queues per priority (rocdevice.cpp, Device::acquireQueue), so a
// high-priority stream never shares a hardware queue with normal ones.
const StreamPriorityHigh = -1

// Runtime is the set of HIP functions rocsync calls. HIP's current device is
// per OS thread; every method that acts on a device takes it explicitly so
// that implementations can make the call correct on whatever thread runs it.
type Runtime interface {
	Init() error
	DeviceCount() (int, error)
	DeviceSynchronize(device int) error
	DeviceName(device int) (string, error)
	// DevicePCIBusID is hipDeviceGetPCIBusId: "dddd:bb:dd.f".
	DevicePCIBusID(device int) (string, error)
	// DeviceAttribute is hipDeviceGetAttribute (a DeviceAttribute* value).
	DeviceAttribute(device int, attr int32) (int32, error)
	// RuntimeVersion is hipRuntimeGetVersion: major*10_000_000 +
	// minor*100_000 + patch (HIP 5.2.3 reports 50221153).
	RuntimeVersion() (int, error)

	StreamCreate(device int, flags uint32) (Stream, error)
	// StreamCreateWithPriority is hipStreamCreateWithPriority
	// (StreamPriorityHigh: a stream of the high-priority hardware queues).
	StreamCreateWithPriority(device int, flags uint32, priority int) (Stream, error)
	// MemcpyWithStream is hipMemcpyWithStream: a synchronous copy made
	// on s (kind MemcpyHostToDevice or MemcpyDeviceToHost).
	MemcpyWithStream(dst, src unsafe.Pointer, size uint64, kind uint32, s Stream) error
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	// StreamQuery returns nil when all work is done, or an *Error with
	// ErrorNotReady while work is pending.
	StreamQuery(s Stream) error

	EventCreate(device int, flags uint32) (Event, error)
	// EventElapsedTime is hipEventElapsedTime: milliseconds from start's
	// newest record to stop's, both reached; events made with
	// EventDisableTiming are refused (ErrorInvalidHandle), records not
	// yet reached are ErrorNotReady.
	EventElapsedTime(start, stop Event) (float32, error)
	EventDestroy(e Event) error
	EventRecord(e Event, s Stream) error
	EventQuery(e Event) error
	EventSynchronize(e Event) error
	StreamWaitEvent(s Stream, e Event) error

	Malloc(device int, size uint64) (DevicePtr, error)
	Free(device int, p DevicePtr) error
	MemcpyHtoD(device int, dst DevicePtr, src unsafe.Pointer, size uint64) error
	MemcpyDtoH(device int, dst unsafe.Pointer, src DevicePtr, size uint64) error
	MemcpyDtoDAsync(dst, src DevicePtr, size uint64, s Stream) error
	MemsetAsync(dst DevicePtr, value byte, size uint64, s Stream) error
	// MemcpyHtoDAsync and MemcpyDtoHAsync are hipMemcpyAsync with pinned
	// host memory from HostMalloc (hipHostMalloc, freed by hipHostFree).
	MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, size uint64, s Stream) error
	MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, size uint64, s Stream) error
	HostMalloc(size uint64) (unsafe.Pointer, error)
	HostFree(p unsafe.Pointer) error

	ModuleLoadData(device int, image []byte) (Module, error)
	ModuleUnload(m Module) error
	ModuleGetFunction(m Module, name string) (Function, error)
	// ModuleLaunchKernel launches f with its explicit arguments packed in
	// args (the HIP_LAUNCH_PARAM_BUFFER_POINTER form). Grid is in blocks.
	ModuleLaunchKernel(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, args []byte) error

	StreamWaitValue64(s Stream, ptr unsafe.Pointer, value uint64, flags uint32, mask uint64) error
	StreamWriteValue64(s Stream, ptr unsafe.Pointer, value uint64, flags uint32) error
}

// PeerRuntime is a Runtime with peer-to-peer access between its devices
// (every HIP release has it; a separate interface so that test runtimes
// need not implement it).
type PeerRuntime interface {
	// DeviceCanAccessPeer is hipDeviceCanAccessPeer: whether device can
	// map peer's memory.
	DeviceCanAccessPeer(device, peer int) (bool, error)
	// DeviceEnablePeerAccess is hipDeviceEnablePeerAccess(peer, 0) with
	// device current: device's kernels and copies may then touch all of
	// peer's memory, present and future. A pair already enabled is an
	// *Error with ErrorPeerAccessAlreadyEnabled.
	DeviceEnablePeerAccess(device, peer int) error
	// MemcpyPeerAsync is hipMemcpyPeerAsync on s: size bytes from src on
	// srcDevice to dst on dstDevice.
	MemcpyPeerAsync(dst DevicePtr, dstDevice int, src DevicePtr, srcDevice int, size uint64, s Stream) error
}

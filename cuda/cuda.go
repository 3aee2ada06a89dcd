// Package cuda is a purego binding (no cgo) of the parts of the NVIDIA CUDA
// driver API (libcuda.so.1) that rocsync uses: devices, primary contexts,
// streams, events, device memory, PTX modules and cuLaunchKernel.
//
// Two levels are offered:
//
//   - *Lib methods call the driver on the calling OS thread and act on that
//     thread's current context, exactly like the C API. A program that keeps
//     its driver calls on one locked OS thread (runtime.LockOSThread) with
//     the context made current once uses them directly (bench/rawcuda).
//   - *Ctx methods are correct from any goroutine: each locks the goroutine
//     to its OS thread, makes the context current there (cuCtxSetCurrent)
//     and then makes the call, because CUDA keeps the current context per OS
//     thread and a goroutine may change threads between any two calls.
//
// The calls that a dispatch loop makes (cuLaunchKernel, cuEventRecord,
// cuStreamWaitEvent, cuEventQuery, cuStreamQuery) allocate nothing: the
// argument array handed to purego.SyscallN and the out-parameters live in
// pooled blocks (see cmem.go), and the *Error values for a failed call are
// cached, so a poll that returns CUDA_ERROR_NOT_READY allocates nothing
// either.
package cuda

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rocsync/rocsync/internal/dl"
)

// Opaque handles. CUcontext, CUstream, CUevent, CUmodule and CUfunction are
// pointers in C; they are carried as integers because the host never
// dereferences them.
type (
	Context  uintptr
	Stream   uintptr
	Event    uintptr
	Module   uintptr
	Function uintptr
)

// Device is a CUdevice (an ordinal-like int).
type Device int32

// DevicePtr is a CUdeviceptr: 64 bits with the _v2 entry points. The host
// cannot dereference it.
type DevicePtr uint64

// Result is CUresult.
type Result uint32

// CUresult values (cuda.h) that rocsync tells apart.
const (
	Success                   Result = 0
	ErrorInvalidValue         Result = 1
	ErrorOutOfMemory          Result = 2
	ErrorNotInitialized       Result = 3
	ErrorDeinitialized        Result = 4
	ErrorStubLibrary          Result = 34
	ErrorNoDevice             Result = 100
	ErrorInvalidDevice        Result = 101
	ErrorInvalidImage         Result = 200
	ErrorInvalidContext       Result = 201
	ErrorNoBinaryForGPU       Result = 209
	ErrorInvalidPTX           Result = 218
	ErrorUnsupportedPTX       Result = 222
	ErrorInvalidHandle        Result = 400
	ErrorNotFound             Result = 500
	ErrorNotReady             Result = 600
	ErrorIllegalAddress       Result = 700
	ErrorLaunchOutOfResources Result = 701
	ErrorLaunchFailed         Result = 719
	ErrorNotSupported         Result = 801
	ErrorUnknown              Result = 999
)

// ErrorPeerAccessAlreadyEnabled is cuCtxEnablePeerAccess's answer for a
// pair already enabled.
const ErrorPeerAccessAlreadyEnabled Result = 704

// Flags and attributes (cuda.h).
const (
	// StreamNonBlocking is CU_STREAM_NON_BLOCKING: the stream does not
	// synchronize with the legacy default stream.
	StreamNonBlocking uint32 = 1
	// EventDisableTiming is CU_EVENT_DISABLE_TIMING: the cheapest event,
	// all rocsync needs for ordering.
	EventDisableTiming uint32 = 2
	// EventBlockingSync is CU_EVENT_BLOCKING_SYNC.
	EventBlockingSync uint32 = 1

	AttrMultiprocessorCount          int32 = 16
	AttrComputeCapabilityMajor       int32 = 75
	AttrComputeCapabilityMinor       int32 = 76
	AttrMaxThreadsPerBlock           int32 = 1
	AttrMaxGridDimX                  int32 = 5
	AttrUnifiedAddressing            int32 = 41
	AttrConcurrentKernels            int32 = 31
	AttrPCIBusID                     int32 = 33
	AttrMaxSharedMemoryPerBlockOptin int32 = 97
)

// Error is a failed driver call, with cuGetErrorName and cuGetErrorString.
type Error struct {
	Func string // the bound symbol, e.g. "cuLaunchKernel"
	Code Result
	Name string // e.g. "CUDA_ERROR_INVALID_VALUE"
	Text string // e.g. "invalid argument"
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: error %d", e.Func, uint32(e.Code))
	if e.Name != "" {
		s += " " + e.Name
	}
	if e.Text != "" && e.Text != e.Name {
		s += ": " + e.Text
	}
	return s
}

// Is matches another *Error by code, and by function when the target names
// one: errors.Is(err, &cuda.Error{Code: cuda.ErrorNotReady}).
func (e *Error) Is(target error) bool {
	// errors.Is hands over the target as the caller wrote it; a type
	// assertion (not errors.As) keeps the comparison allocation-free.
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Func == "" || t.Func == e.Func)
}

// ErrNoDriver is matched by errors.Is when libcuda.so.1 (the NVIDIA driver's
// user-space library) cannot be loaded. The error also matches
// dl.ErrNotFound and unwraps to the *dl.NotFoundError that lists every path
// tried.
var ErrNoDriver = errors.New("cuda: NVIDIA driver library libcuda.so.1 not found")

// ErrNoDevice is matched by errors.Is when the driver loads but reports no
// GPU (cuInit or cuDeviceGetCount returns CUDA_ERROR_NO_DEVICE, or a count
// of zero).
var ErrNoDevice = errors.New("cuda: no NVIDIA GPU found")

type noDriverError struct {
	nf       *dl.NotFoundError
	override string // the ROCSYNC_LIBCUDA value, if any
}

func (e *noDriverError) Error() string {
	var b strings.Builder
	b.WriteString("cuda: the NVIDIA driver library libcuda.so.1 could not be loaded")
	if e.override != "" {
		fmt.Fprintf(&b, " from %s=%s", EnvLibCUDA, e.override)
	} else {
		fmt.Fprintf(&b, " (install the NVIDIA driver, or set %s to the path of libcuda.so.1)", EnvLibCUDA)
	}
	b.WriteString("; ")
	b.WriteString(e.nf.Attempts())
	return b.String()
}

func (e *noDriverError) Unwrap() []error { return []error{ErrNoDriver, e.nf} }

// noDevice wraps both ErrNoDevice and the driver's *Error.
func noDevice(cerr *Error) error {
	if cerr == nil {
		return ErrNoDevice
	}
	return fmt.Errorf("%w (%w)", ErrNoDevice, cerr)
}

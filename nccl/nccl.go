// Package nccl is a purego binding (no cgo) of the collective
// communication libraries: NCCL (libnccl.so.2) on CUDA and RCCL
// (librccl.so.1) on ROCm, which share one C API (RCCL is AMD's port of
// NCCL and keeps its names, prototypes and enum values). It binds what
// rocsync orders as ops: communicators for the devices of one process
// (ncclCommInitAll) and across processes from a distributed unique id
// (ncclCommInitRank), group calls, and all-reduce, all-gather, broadcast
// and reduce-scatter on a stream. It writes no communication of its own.
//
// Buffers are device addresses and streams are cudaStream_t or hipStream_t
// values, both passed as uintptr, so the package depends on neither the
// cuda nor the hip binding. The collective calls allocate nothing.
//
// Devices and threads. ncclCommInitRank makes a communicator for the
// device current on the calling OS thread (CUDA: the context made current
// with cuda.Ctx.MakeCurrent; HIP: hipSetDevice), so call it from a
// goroutine locked to its thread (runtime.LockOSThread) after setting the
// device. ncclCommInitAll and the collectives select the communicator's
// device themselves; the stream passed must belong to that device.
// NCCL keeps group state per thread: ncclGroupStart, the calls of the
// group and ncclGroupEnd must come from one locked goroutine.
//
// NVLink multicast. A program that uses NVLink SHARP multicast (NCCL's
// NVLS algorithms) can take the GPUs of a shared host out of service for
// a long time. Before it loads the library, Open makes sure
// NCCL_NVLS_ENABLE is "0" in the C environment that NCCL reads with
// getenv (see DisableNVLS), and refuses with ErrNVLSEnabled when the user
// asked for anything else. ChildEnv gives the environment for a worker
// process. Nothing in this package calls a multicast function.
package nccl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rocsync/rocsync/internal/dl"
)

// Comm is an ncclComm_t.
type Comm uintptr

// Result is ncclResult_t.
type Result uint32

// ncclResult_t values (nccl.h). RCCL has the same values up to
// InProgress, and no Timeout.
const (
	Success            Result = 0
	UnhandledCudaError Result = 1 // the CUDA or HIP runtime failed
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6 // a peer process exited, or the network failed
	InProgress         Result = 7 // a non-blocking communicator is still working
	Timeout            Result = 8 // NCCL only
)

var resultNames = [...]string{
	Success:            "ncclSuccess",
	UnhandledCudaError: "ncclUnhandledCudaError",
	SystemError:        "ncclSystemError",
	InternalError:      "ncclInternalError",
	InvalidArgument:    "ncclInvalidArgument",
	InvalidUsage:       "ncclInvalidUsage",
	RemoteError:        "ncclRemoteError",
	InProgress:         "ncclInProgress",
	Timeout:            "ncclTimeout",
}

func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", uint32(r))
}

// DataType is ncclDataType_t.
type DataType int32

// ncclDataType_t values (nccl.h; the same in RCCL's nccl.h). The aliases
// ncclChar, ncclInt, ncclHalf, ncclFloat and ncclDouble are Int8, Int32,
// Float16, Float32 and Float64.
const (
	Int8       DataType = 0
	Uint8      DataType = 1
	Int32      DataType = 2
	Uint32     DataType = 3
	Int64      DataType = 4
	Uint64     DataType = 5
	Float16    DataType = 6
	Float32    DataType = 7
	Float64    DataType = 8
	Bfloat16   DataType = 9
	Float8e4m3 DataType = 10
	Float8e5m2 DataType = 11
)

var dataTypeNames = [...]string{"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64",
	"ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"}

var dataTypeSizes = [...]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

func (t DataType) String() string {
	if t >= 0 && int(t) < len(dataTypeNames) {
		return dataTypeNames[t]
	}
	return fmt.Sprintf("ncclDataType(%d)", int32(t))
}

// Size is the element size in bytes, 0 for an unknown type.
func (t DataType) Size() int {
	if t >= 0 && int(t) < len(dataTypeSizes) {
		return dataTypeSizes[t]
	}
	return 0
}

// RedOp is ncclRedOp_t (the built-in operations).
type RedOp int32

// ncclRedOp_t values (nccl.h; the same in RCCL's nccl.h).
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

var redOpNames = [...]string{"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"}

func (o RedOp) String() string {
	if o >= 0 && int(o) < len(redOpNames) {
		return redOpNames[o]
	}
	return fmt.Sprintf("ncclRedOp(%d)", int32(o))
}

// Error is a failed NCCL or RCCL call.
type Error struct {
	Func   string // e.g. "ncclAllReduce"
	Result Result
	Text   string // ncclGetErrorString, or the binding's reason
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s", e.Func, e.Result)
	if e.Text != "" {
		s += ": " + e.Text
	}
	return s
}

// Is matches another *Error by result, and by function when the target
// names one: errors.Is(err, &nccl.Error{Result: nccl.InvalidArgument}).
func (e *Error) Is(target error) bool {
	// A type assertion, not errors.As, keeps the comparison allocation-free.
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Result == e.Result && (t.Func == "" || t.Func == e.Func)
}

// ErrNotFound is matched by errors.Is when the library cannot be loaded.
// The error also matches dl.ErrNotFound and unwraps to the
// *dl.NotFoundError listing every path tried.
var ErrNotFound = errors.New("nccl: collective library not found")

type notFoundError struct {
	nf       *dl.NotFoundError
	soname   string
	envVar   string
	override string
}

func (e *notFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nccl: %s could not be loaded", e.soname)
	if e.override != "" {
		fmt.Fprintf(&b, " from %s=%s", e.envVar, e.override)
	} else {
		fmt.Fprintf(&b, " (collectives need it: install it, or set %s to its path)", e.envVar)
	}
	b.WriteString("; ")
	b.WriteString(e.nf.Attempts())
	return b.String()
}

func (e *notFoundError) Unwrap() []error { return []error{ErrNotFound, e.nf} }

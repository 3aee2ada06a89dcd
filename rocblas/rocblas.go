// Package rocblas defines the Go-level interface to the rocBLAS functions
// rocsync uses (librocblas), with their enum values.
//
// rocBLAS is column-major, like every BLAS. The purego binding and the
// emulated device in internal/rocmdev/emu both implement Library.
package rocblas

import (
	"fmt"

	"github.com/rocsync/rocsync/hip"
)

// Handle is rocblas_handle.
type Handle uintptr

// Operation is rocblas_operation.
type Operation uint32

const (
	OperationNone      Operation = 111
	OperationTranspose Operation = 112
	OperationConjTrans Operation = 113
)

// PointerMode is rocblas_pointer_mode.
type PointerMode uint32

const (
	PointerModeHost   PointerMode = 0
	PointerModeDevice PointerMode = 1
)

// Status is rocblas_status.
type Status uint32

const (
	StatusSuccess        Status = 0
	StatusInvalidHandle  Status = 1
	StatusNotImplemented Status = 2
	StatusInvalidPointer Status = 3
	StatusInvalidSize    Status = 4
	StatusMemoryError    Status = 5
	StatusInternalError  Status = 6
	StatusInvalidValue   Status = 11
)

// Error is a failed rocBLAS call with rocblas_status_to_string's text.
type Error struct {
	Func   string
	Status Status
	Text   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("rocblas: %s: status %d: %s", e.Func, uint32(e.Status), e.Text)
}

// Is matches another *Error by status.
func (e *Error) Is(target error) bool {
	// errors.Is hands over the target as the caller wrote it; a type
	// assertion (not errors.As) keeps the comparison allocation-free.
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Status == e.Status
}

// Library is the set of rocBLAS functions rocsync calls.
// WorkspaceSetter is a Library that can give a handle a workspace of the
// caller's (rocblas_set_workspace; addr 0 and size 0 give the handle back
// to rocBLAS's own managed workspace). With one, rocBLAS never allocates
// or frees workspace for the handle: a function that needs more than
// size fails with StatusMemoryError. rocBLAS documents that graph capture
// needs this (a workspace big enough before the capture) or stream-ordered
// allocation (ROCBLAS_STREAM_ORDER_ALLOC): a captured function that grows
// the managed workspace frees and reallocates it inside the capture, and
// the nodes captured before keep pointing at the freed memory (rocBLAS
// documentation, "Device memory allocation in rocBLAS" and the beta
// features' "Graph support for rocBLAS").
type WorkspaceSetter interface {
	SetWorkspace(h Handle, addr hip.DevicePtr, size uint64) error
}

type Library interface {
	CreateHandle(device int) (Handle, error)
	DestroyHandle(h Handle) error
	SetStream(h Handle, s hip.Stream) error
	GetStream(h Handle) (hip.Stream, error)
	SetPointerMode(h Handle, m PointerMode) error
	Sgemm(h Handle, transA, transB Operation, m, n, k int32, alpha float32,
		a hip.DevicePtr, lda int32, b hip.DevicePtr, ldb int32, beta float32, c hip.DevicePtr, ldc int32) error
	Dgemm(h Handle, transA, transB Operation, m, n, k int32, alpha float64,
		a hip.DevicePtr, lda int32, b hip.DevicePtr, ldb int32, beta float64, c hip.DevicePtr, ldc int32) error
	StatusString(s Status) string
}

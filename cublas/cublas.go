// Package cublas is a purego binding (no cgo) of the cuBLAS functions
// rocsync uses: handles, stream binding, sgemm and dgemm, from
// libcublas.so.13 (CUDA 13) or libcublas.so.12.
//
// cuBLAS works in the CUDA context current on the calling OS thread when a
// handle is created, and every later call with the handle must be made with
// that context current. The binding does not manage contexts: call it on a
// goroutine locked to its OS thread (runtime.LockOSThread) after
// cuda.Ctx.MakeCurrent, as internal/cudadev does for every call.
//
// Sgemm and Dgemm allocate nothing: alpha and beta (host pointer mode, the
// default) and the argument array live in pooled blocks.
package cublas

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rocsync/rocsync/internal/dl"
)

// Handle is a cublasHandle_t.
type Handle uintptr

// Status is cublasStatus_t.
type Status uint32

// cublasStatus_t values (cublas_api.h).
const (
	StatusSuccess         Status = 0
	StatusNotInitialized  Status = 1
	StatusAllocFailed     Status = 3
	StatusInvalidValue    Status = 7
	StatusArchMismatch    Status = 8
	StatusMappingError    Status = 11
	StatusExecutionFailed Status = 13
	StatusInternalError   Status = 14
	StatusNotSupported    Status = 15
	StatusLicenseError    Status = 16
)

var statusNames = map[Status]string{
	StatusSuccess:         "CUBLAS_STATUS_SUCCESS",
	StatusNotInitialized:  "CUBLAS_STATUS_NOT_INITIALIZED",
	StatusAllocFailed:     "CUBLAS_STATUS_ALLOC_FAILED",
	StatusInvalidValue:    "CUBLAS_STATUS_INVALID_VALUE",
	StatusArchMismatch:    "CUBLAS_STATUS_ARCH_MISMATCH",
	StatusMappingError:    "CUBLAS_STATUS_MAPPING_ERROR",
	StatusExecutionFailed: "CUBLAS_STATUS_EXECUTION_FAILED",
	StatusInternalError:   "CUBLAS_STATUS_INTERNAL_ERROR",
	StatusNotSupported:    "CUBLAS_STATUS_NOT_SUPPORTED",
	StatusLicenseError:    "CUBLAS_STATUS_LICENSE_ERROR",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("cublasStatus(%d)", uint32(s))
}

// Operation is cublasOperation_t.
type Operation int32

const (
	OpN Operation = 0 // no transpose
	OpT Operation = 1 // transpose
	OpC Operation = 2 // conjugate transpose
)

// Error is a failed cuBLAS call.
type Error struct {
	Func   string // e.g. "cublasSgemm_v2"
	Status Status
	Text   string // cublasGetStatusString, when the library has it
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cublas: %s: %s", e.Func, e.Status)
	if e.Text != "" && e.Text != e.Status.String() {
		s += ": " + e.Text
	}
	return s
}

// Is matches another *Error by status, and by function when the target
// names one.
func (e *Error) Is(target error) bool {
	// errors.Is hands over the target as the caller wrote it; a type
	// assertion (not errors.As) keeps the comparison allocation-free.
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Status == e.Status && (t.Func == "" || t.Func == e.Func)
}

// ErrNotFound is matched by errors.Is when no cuBLAS library can be loaded.
// The error also matches dl.ErrNotFound and unwraps to the
// *dl.NotFoundError listing every path tried.
var ErrNotFound = errors.New("cublas: libcublas not found")

type notFoundError struct {
	nf       *dl.NotFoundError
	override string
}

func (e *notFoundError) Error() string {
	var b strings.Builder
	b.WriteString("cublas: libcublas.so.13 could not be loaded")
	if e.override != "" {
		fmt.Fprintf(&b, " from %s=%s", EnvLibCUBLAS, e.override)
	} else {
		fmt.Fprintf(&b, " (gemm needs cuBLAS: install the CUDA toolkit's libcublas, or set %s to its path)", EnvLibCUBLAS)
	}
	b.WriteString("; ")
	b.WriteString(e.nf.Attempts())
	return b.String()
}

func (e *notFoundError) Unwrap() []error { return []error{ErrNotFound, e.nf} }

package cublas

import (
	"fmt"
	"math"
	"os"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/internal/errcache"
)

// Indexes into Lib.sym; BoundSymbols lists the names in the same order.
const (
	symCreate = iota
	symDestroy
	symSetStream
	symSgemm
	symDgemm
	numSyms
)

// BoundSymbols are the functions Open requires. The _v2 entry points are
// the ones cublas_v2.h maps the names to; the unversioned ones belong to the
// legacy API, which has no handle.
var BoundSymbols = []string{
	symCreate:    "cublasCreate_v2",
	symDestroy:   "cublasDestroy_v2",
	symSetStream: "cublasSetStream_v2",
	symSgemm:     "cublasSgemm_v2",
	symDgemm:     "cublasDgemm_v2",
}

// Optional symbols, used when present.
const (
	symStatusString = "cublasGetStatusString"
	symGetProperty  = "cublasGetProperty"
)

// EnvLibCUBLAS names the environment variable that, when set, is the only
// path Open tries.
const EnvLibCUBLAS = "ROCSYNC_LIBCUBLAS"

// Sonames are tried newest first.
var Sonames = []string{"libcublas.so.13", "libcublas.so.12"}

// SearchDirs returns the directories Open looks in before the loader's own
// search: PyTorch's CUDA 13 wheels, then the CUDA toolkits under
// /usr/local (newest first).
func SearchDirs() []string {
	return append([]string{"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib"}, dl.CUDAToolkitDirs()...)
}

// Lib is the purego binding to libcublas. It is safe for use by many
// goroutines; cuBLAS itself wants one handle per thread of work.
type Lib struct {
	path         string
	handle       uintptr
	sym          [numSyms]uintptr
	statusString uintptr
	getProperty  uintptr

	errs errcache.Cache[Error] // one immutable *Error per (function, status)
}

// Open loads libcuBLAS ($ROCSYNC_LIBCUBLAS when set, else SearchDirs, else
// the loader's search). It does not create a handle and needs no GPU.
func Open() (*Lib, error) {
	var lib *dl.Library
	var err error
	override := os.Getenv(EnvLibCUBLAS)
	if override != "" {
		lib, err = dl.Open("libcublas", []string{override}, nil)
	} else {
		lib, err = dl.Open("libcublas", Sonames, SearchDirs())
	}
	if err != nil {
		if nf, ok := err.(*dl.NotFoundError); ok {
			return nil, &notFoundError{nf: nf, override: override}
		}
		return nil, err
	}
	addrs, err := lib.Symbols(BoundSymbols)
	if err != nil {
		return nil, fmt.Errorf("cublas: %s is not a usable cuBLAS: %w", lib.Path, err)
	}
	if err := cmem.Libc(); err != nil {
		return nil, err
	}
	l := &Lib{path: lib.Path, handle: lib.Handle}
	copy(l.sym[:], addrs)
	l.statusString, _ = dl.Dlsym(lib.Handle, symStatusString)
	l.getProperty, _ = dl.Dlsym(lib.Handle, symGetProperty)
	return l, nil
}

// Path is the path or soname that opened.
func (l *Lib) Path() string { return l.path }

// Version is cublasGetProperty's major, minor and patch (13, 1, x for the
// CUDA 13.0 toolkit's cuBLAS), or an error when the library lacks it.
func (l *Lib) Version() (major, minor, patch int, err error) {
	if l.getProperty == 0 {
		return 0, 0, 0, fmt.Errorf("cublas: %s has no %s", l.path, symGetProperty)
	}
	var v [3]int
	b := blocks.Get()
	defer blocks.Put(b)
	for i := range v {
		*b.U64(0) = 0
		if s := Status(uint32(b.Call(l.getProperty, uintptr(i), b.Word(0)))); s != StatusSuccess {
			return 0, 0, 0, &Error{Func: symGetProperty, Status: s}
		}
		v[i] = int(int32(*b.U64(0)))
	}
	return v[0], v[1], v[2], nil
}

// StatusString is cublasGetStatusString, or the status's name when the
// library lacks it.
func (l *Lib) StatusString(s Status) string {
	if l.statusString == 0 {
		return s.String()
	}
	b := blocks.Get()
	defer blocks.Put(b)
	return cmem.GoString(b.Call(l.statusString, uintptr(s)))
}

// check turns a cublasStatus_t into nil or a cached *Error.
func (l *Lib) check(fn int, r uintptr) error {
	s := Status(uint32(r))
	if s == StatusSuccess {
		return nil
	}
	return l.errs.Get(fn, uint32(s), func() *Error {
		return &Error{Func: BoundSymbols[fn], Status: s, Text: l.StatusString(s)}
	})
}

// Create is cublasCreate_v2, in the context current on the calling thread.
func (l *Lib) Create() (Handle, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	if err := l.check(symCreate, b.Call(l.sym[symCreate], b.Word(0))); err != nil {
		return 0, err
	}
	return Handle(*b.U64(0)), nil
}

// Destroy is cublasDestroy_v2.
func (l *Lib) Destroy(h Handle) error {
	b := blocks.Get()
	defer blocks.Put(b)
	return l.check(symDestroy, b.Call(l.sym[symDestroy], uintptr(h)))
}

// SetStream is cublasSetStream_v2: later calls with h run on s.
func (l *Lib) SetStream(h Handle, s cuda.Stream) error {
	b := blocks.Get()
	defer blocks.Put(b)
	return l.check(symSetStream, b.Call(l.sym[symSetStream], uintptr(h), uintptr(s)))
}

// Sgemm is cublasSgemm_v2: C = alpha·op(A)·op(B) + beta·C, column-major,
// with alpha and beta passed by host pointer (the default pointer mode).
// It enqueues the work on the handle's stream and allocates nothing.
func (l *Lib) Sgemm(h Handle, transA, transB Operation, m, n, k int, alpha float32,
	a cuda.DevicePtr, lda int, bm cuda.DevicePtr, ldb int, beta float32, c cuda.DevicePtr, ldc int) error {
	b := blocks.Get()
	*(*uint32)(cmem.Ptr(b.Word(0))) = math.Float32bits(alpha)
	*(*uint32)(cmem.Ptr(b.Word(1))) = math.Float32bits(beta)
	r := b.Call(l.sym[symSgemm], uintptr(h), uintptr(uint32(transA)), uintptr(uint32(transB)),
		uintptr(uint32(int32(m))), uintptr(uint32(int32(n))), uintptr(uint32(int32(k))),
		b.Word(0), uintptr(a), uintptr(uint32(int32(lda))), uintptr(bm), uintptr(uint32(int32(ldb))),
		b.Word(1), uintptr(c), uintptr(uint32(int32(ldc))))
	blocks.Put(b)
	return l.check(symSgemm, r)
}

// Dgemm is cublasDgemm_v2 (see Sgemm).
func (l *Lib) Dgemm(h Handle, transA, transB Operation, m, n, k int, alpha float64,
	a cuda.DevicePtr, lda int, bm cuda.DevicePtr, ldb int, beta float64, c cuda.DevicePtr, ldc int) error {
	b := blocks.Get()
	*b.U64(0) = math.Float64bits(alpha)
	*b.U64(1) = math.Float64bits(beta)
	r := b.Call(l.sym[symDgemm], uintptr(h), uintptr(uint32(transA)), uintptr(uint32(transB)),
		uintptr(uint32(int32(m))), uintptr(uint32(int32(n))), uintptr(uint32(int32(k))),
		b.Word(0), uintptr(a), uintptr(uint32(int32(lda))), uintptr(bm), uintptr(uint32(int32(ldb))),
		b.Word(1), uintptr(c), uintptr(uint32(int32(ldc))))
	blocks.Put(b)
	return l.check(symDgemm, r)
}

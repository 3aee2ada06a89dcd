package rocblas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
)

// Indexes into Lib.sym; BoundSymbols lists the names in the same order.
const (
	symCreateHandle = iota
	symDestroyHandle
	symSetStream
	symGetStream
	symSetPointerMode
	symSgemm
	symDgemm
	symStatusToString
	numSyms
)

// BoundSymbols are the librocblas functions that Open resolves.
var BoundSymbols = []string{
	symCreateHandle:   "rocblas_create_handle",
	symDestroyHandle:  "rocblas_destroy_handle",
	symSetStream:      "rocblas_set_stream",
	symGetStream:      "rocblas_get_stream",
	symSetPointerMode: "rocblas_set_pointer_mode",
	symSgemm:          "rocblas_sgemm",
	symDgemm:          "rocblas_dgemm",
	symStatusToString: "rocblas_status_to_string",
}

// Sonames maps the libamdhip64 soname major (the ROCm release) to the
// librocblas sonames built against it (rocm-api.md section 4): ROCm 7 ships
// rocBLAS 5.x (.so.5), ROCm 6 rocBLAS 4.x (.so.4), ROCm 5.6-5.7 rocBLAS 3.x
// (.so.3) and ROCm 5.5 and older rocBLAS 2.x (.so.0).
var Sonames = map[int][]string{
	7: {"librocblas.so.5"},
	6: {"librocblas.so.4"},
	5: {"librocblas.so.3", "librocblas.so.0"},
}

// releaseOf names the ROCm release of each librocblas soname.
var releaseOf = map[string]string{
	"librocblas.so.5": "7.x",
	"librocblas.so.4": "6.x",
	"librocblas.so.3": "5.6-5.7",
	"librocblas.so.0": "5.5 or older",
}

// allSonames is every known soname, newest first.
var allSonames = []string{"librocblas.so.5", "librocblas.so.4", "librocblas.so.3", "librocblas.so.0"}

// Lib is the purego binding to librocblas. It implements Library and is safe
// for use by many goroutines; calls on one handle are serialised.
//
// Current device. rocBLAS takes the device from HIP's per-thread current
// device when a handle is created, and requires that same device to be
// current for every later call with the handle. Lib remembers each handle's
// device and, for every call, locks the goroutine to its OS thread and calls
// hipSetDevice first. It uses the hipSetDevice of rocBLAS's own libamdhip64
// dependency, found through the rocBLAS handle.
type Lib struct {
	path     string
	soname   string
	hipMajor int
	handle   uintptr
	sym      [numSyms]uintptr
	setDev   uintptr // hipSetDevice
	errName  uintptr // hipGetErrorName, or 0
	setWS    uintptr // rocblas_set_workspace, or 0

	mu      sync.RWMutex
	handles map[Handle]*handleState
}

var _ Library = (*Lib)(nil)

// handleState is what Lib keeps per rocBLAS handle.
//
// The gemm scalars. In host pointer mode sgemm/dgemm read *alpha and *beta
// before they return, so passing the address of a Go local would be allowed
// by the cgo rules that purego follows (a float holds no Go pointer, and the
// memory is used only during the call). With purego.SyscallN it would also
// be safe, but only because SyscallN is //go:uintptrescapes: writing
// uintptr(unsafe.Pointer(&alpha)) in the call moves alpha to the heap and
// keeps it alive until the call returns (a bare uintptr to a stack variable
// would not be safe, since the stack may move). That costs an allocation per
// gemm, plus the variadic slice. Instead each handle owns 24 bytes of C
// memory: alpha at 0, beta at 8, and an out-parameter word at 16; they are
// written under the handle's mutex, and the arguments go through args, so
// a gemm makes no Go allocation.
type handleState struct {
	mu     sync.Mutex
	dead   bool
	device int
	mode   PointerMode
	mem    unsafe.Pointer // C: alpha, beta, out
	args   [14]uintptr
}

// call runs fn through st.args (integers and C addresses only); st.mu must
// be held.
func (st *handleState) call(fn uintptr, args ...uintptr) uintptr {
	n := copy(st.args[:], args)
	r, _, _ := purego.SyscallN(fn, st.args[:n]...)
	return r
}

func (st *handleState) word(i int) uintptr { return uintptr(st.mem) + uintptr(8*i) }

// Open loads the librocblas that belongs to the same ROCm release as the
// HIP runtime in use, given as its libamdhip64 soname major (hip.Lib.Major).
// When none is installed, the error matches ErrNotFound and dl.ErrNotFound
// and lists every path tried. When only another release's rocBLAS is
// installed, the error is a *MismatchError; that library is not loaded.
func Open(hipMajor int) (*Lib, error) {
	want, ok := Sonames[hipMajor]
	if !ok {
		return nil, fmt.Errorf("rocblas: no rocBLAS soname is known for libamdhip64.so.%d (want 5, 6 or 7)", hipMajor)
	}
	dirs := dl.SearchDirs()
	lib, err := dl.Open("librocblas", want, dirs)
	if err != nil {
		var nf *dl.NotFoundError
		if !errors.As(err, &nf) {
			return nil, err
		}
		if path, soname := findOther(want, dirs); path != "" {
			return nil, &MismatchError{HIPMajor: hipMajor, Path: path, Soname: soname,
				RocBLASRelease: releaseOf[soname], Want: want}
		}
		return nil, &notFoundError{nf: nf}
	}
	addrs, err := lib.Symbols(BoundSymbols)
	if err != nil {
		purego.Dlclose(lib.Handle)
		return nil, err
	}
	l := &Lib{
		path:     lib.Path,
		soname:   soname(lib.Path, want),
		hipMajor: hipMajor,
		handle:   lib.Handle,
		handles:  make(map[Handle]*handleState),
	}
	copy(l.sym[:], addrs)
	if l.setDev, err = dl.Dlsym(lib.Handle, "hipSetDevice"); err != nil || l.setDev == 0 {
		purego.Dlclose(lib.Handle)
		return nil, fmt.Errorf("rocblas: %s does not bring libamdhip64 (no hipSetDevice): %v", lib.Path, err)
	}
	l.errName, _ = dl.Dlsym(lib.Handle, "hipGetErrorName")
	l.setWS, _ = dl.Dlsym(lib.Handle, "rocblas_set_workspace")
	if err := cmem.Libc(); err != nil {
		purego.Dlclose(lib.Handle)
		return nil, err
	}
	return l, nil
}

func soname(path string, want []string) string {
	base := filepath.Base(path)
	if slices.Contains(want, base) {
		return base
	}
	return path
}

// findOther looks, without loading anything, for a rocBLAS of another ROCm
// release in dirs, $LD_LIBRARY_PATH and the usual system directories.
// Loading it would pull its own libamdhip64 into the process next to ours.
func findOther(want, dirs []string) (path, soname string) {
	search := slices.Clone(dirs)
	if p := os.Getenv("LD_LIBRARY_PATH"); p != "" {
		search = append(search, filepath.SplitList(p)...)
	}
	multiarch := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	for _, d := range []string{"/usr/local/lib", "/usr/lib64", "/lib64", "/usr/lib", "/lib"} {
		if multiarch != "" && (d == "/usr/lib" || d == "/lib") {
			search = append(search, filepath.Join(d, multiarch))
		}
		search = append(search, d)
	}
	for _, s := range allSonames {
		if slices.Contains(want, s) {
			continue
		}
		for _, d := range search {
			if d == "" {
				continue
			}
			p := filepath.Join(d, s)
			if _, err := os.Stat(p); err == nil {
				return p, s
			}
		}
	}
	return "", ""
}

// Path is the path or soname that opened.
func (l *Lib) Path() string { return l.path }

// Close unloads the library. Nothing from l may be used afterwards.
func (l *Lib) Close() error { return purego.Dlclose(l.handle) }

// StatusString is rocblas_status_to_string.
func (l *Lib) StatusString(s Status) string {
	r, _, _ := purego.SyscallN(l.sym[symStatusToString], uintptr(s))
	return cmem.GoString(r)
}

func (l *Lib) check(fn int, r uintptr) error {
	s := Status(uint32(r)) // a 32-bit enum: the upper half of RAX is undefined
	if s == StatusSuccess {
		return nil
	}
	return &Error{Func: BoundSymbols[fn], Status: s, Text: l.StatusString(s)}
}

// setDevice makes st's device current; the caller holds st.mu and
// runtime.LockOSThread.
func (l *Lib) setDevice(st *handleState) error {
	code := hip.ErrorCode(uint32(st.call(l.setDev, uintptr(st.device))))
	if code == hip.Success {
		return nil
	}
	e := &hip.Error{Func: "hipSetDevice", Code: code}
	if l.errName != 0 {
		r, _, _ := purego.SyscallN(l.errName, uintptr(code))
		e.Name = cmem.GoString(r)
	}
	return e
}

// lock returns h's state, locked, with h's device current on this OS thread,
// which stays locked to the goroutine until unlock.
func (l *Lib) lock(fn int, h Handle) (*handleState, error) {
	l.mu.RLock()
	st := l.handles[h]
	l.mu.RUnlock()
	if st == nil {
		return nil, &Error{Func: BoundSymbols[fn], Status: StatusInvalidHandle,
			Text: "handle was not created by this rocblas.Lib, or was destroyed"}
	}
	st.mu.Lock()
	if st.dead {
		st.mu.Unlock()
		return nil, &Error{Func: BoundSymbols[fn], Status: StatusInvalidHandle, Text: "handle was destroyed"}
	}
	runtime.LockOSThread()
	if err := l.setDevice(st); err != nil {
		runtime.UnlockOSThread()
		st.mu.Unlock()
		return nil, err
	}
	return st, nil
}

func unlock(st *handleState) {
	runtime.UnlockOSThread()
	st.mu.Unlock()
}

// CreateHandle is rocblas_create_handle with device current.
func (l *Lib) CreateHandle(device int) (Handle, error) {
	st := &handleState{device: device, mem: cmem.Alloc(24)}
	if st.mem == nil {
		return 0, errors.New("rocblas: cannot allocate C memory")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := l.setDevice(st); err != nil {
		cmem.Free(st.mem)
		return 0, err
	}
	if err := l.check(symCreateHandle, st.call(l.sym[symCreateHandle], st.word(2))); err != nil {
		cmem.Free(st.mem)
		return 0, err
	}
	h := Handle(*(*uintptr)(unsafe.Add(st.mem, 16)))
	l.mu.Lock()
	l.handles[h] = st
	l.mu.Unlock()
	return h, nil
}

// DestroyHandle is rocblas_destroy_handle with the handle's device current.
func (l *Lib) DestroyHandle(h Handle) error {
	st, err := l.lock(symDestroyHandle, h)
	if err != nil {
		return err
	}
	defer unlock(st)
	if err := l.check(symDestroyHandle, st.call(l.sym[symDestroyHandle], uintptr(h))); err != nil {
		return err
	}
	st.dead = true
	cmem.Free(st.mem)
	st.mem = nil
	l.mu.Lock()
	delete(l.handles, h)
	l.mu.Unlock()
	return nil
}

// SetStream is rocblas_set_stream. The stream must belong to the handle's
// device.
func (l *Lib) SetStream(h Handle, s hip.Stream) error {
	st, err := l.lock(symSetStream, h)
	if err != nil {
		return err
	}
	defer unlock(st)
	return l.check(symSetStream, st.call(l.sym[symSetStream], uintptr(h), uintptr(s)))
}

// GetStream is rocblas_get_stream.
func (l *Lib) GetStream(h Handle) (hip.Stream, error) {
	st, err := l.lock(symGetStream, h)
	if err != nil {
		return 0, err
	}
	defer unlock(st)
	*(*uintptr)(unsafe.Add(st.mem, 16)) = 0
	if err := l.check(symGetStream, st.call(l.sym[symGetStream], uintptr(h), st.word(2))); err != nil {
		return 0, err
	}
	return hip.Stream(*(*uintptr)(unsafe.Add(st.mem, 16))), nil
}

// ErrNoWorkspaceAPI is SetWorkspace's error where the library has no
// rocblas_set_workspace.
var ErrNoWorkspaceAPI = errors.New("rocblas: rocblas_set_workspace is missing")

var _ WorkspaceSetter = (*Lib)(nil)

// SetWorkspace is rocblas_set_workspace(h, addr, size), with the handle's
// device current.
func (l *Lib) SetWorkspace(h Handle, addr hip.DevicePtr, size uint64) error {
	if l.setWS == 0 {
		return ErrNoWorkspaceAPI
	}
	st, err := l.lock(symSetStream, h)
	if err != nil {
		return err
	}
	defer unlock(st)
	if r := Status(uint32(st.call(l.setWS, uintptr(h), uintptr(addr), uintptr(size)))); r != StatusSuccess {
		return &Error{Func: "rocblas_set_workspace", Status: r, Text: l.StatusString(r)}
	}
	return nil
}

// SetPointerMode is rocblas_set_pointer_mode. Sgemm and Dgemm take alpha and
// beta by value, so they always run in host pointer mode: with the handle in
// device mode they switch it to host mode for the call and back afterwards.
func (l *Lib) SetPointerMode(h Handle, m PointerMode) error {
	st, err := l.lock(symSetPointerMode, h)
	if err != nil {
		return err
	}
	defer unlock(st)
	if err := l.check(symSetPointerMode, st.call(l.sym[symSetPointerMode], uintptr(h), uintptr(m))); err != nil {
		return err
	}
	st.mode = m
	return nil
}

// Sgemm is rocblas_sgemm: C = alpha*op(A)*op(B) + beta*C, column-major,
// with op(A) m×k. alpha and beta are passed by pointer to C memory of the
// handle (host pointer mode).
func (l *Lib) Sgemm(h Handle, transA, transB Operation, m, n, k int32, alpha float32,
	a hip.DevicePtr, lda int32, b hip.DevicePtr, ldb int32, beta float32, c hip.DevicePtr, ldc int32) error {
	st, err := l.lock(symSgemm, h)
	if err != nil {
		return err
	}
	defer unlock(st)
	*(*float32)(st.mem) = alpha
	*(*float32)(unsafe.Add(st.mem, 8)) = beta
	return l.gemm(st, symSgemm, h, transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
}

// Dgemm is rocblas_dgemm (see Sgemm).
func (l *Lib) Dgemm(h Handle, transA, transB Operation, m, n, k int32, alpha float64,
	a hip.DevicePtr, lda int32, b hip.DevicePtr, ldb int32, beta float64, c hip.DevicePtr, ldc int32) error {
	st, err := l.lock(symDgemm, h)
	if err != nil {
		return err
	}
	defer unlock(st)
	*(*float64)(st.mem) = alpha
	*(*float64)(unsafe.Add(st.mem, 8)) = beta
	return l.gemm(st, symDgemm, h, transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
}

// gemm makes the call, in host pointer mode. rocblas_int and the enums are
// 32-bit: each goes in its own register or 8-byte stack slot, of which the
// callee reads the low half, so sign extension of negative values does not
// matter.
func (l *Lib) gemm(st *handleState, fn int, h Handle, transA, transB Operation, m, n, k int32,
	a hip.DevicePtr, lda int32, b hip.DevicePtr, ldb int32, c hip.DevicePtr, ldc int32) error {
	if st.mode != PointerModeHost {
		if err := l.check(symSetPointerMode, st.call(l.sym[symSetPointerMode], uintptr(h), uintptr(PointerModeHost))); err != nil {
			return err
		}
		defer st.call(l.sym[symSetPointerMode], uintptr(h), uintptr(st.mode))
	}
	r := st.call(l.sym[fn], uintptr(h), uintptr(transA), uintptr(transB),
		uintptr(m), uintptr(n), uintptr(k), st.word(0),
		uintptr(a), uintptr(lda), uintptr(b), uintptr(ldb), st.word(1),
		uintptr(c), uintptr(ldc))
	return l.check(fn, r)
}

// String describes the library, e.g. for logs.
func (l *Lib) String() string {
	return fmt.Sprintf("%s (%s, for libamdhip64.so.%d)", l.soname, l.path, l.hipMajor)
}

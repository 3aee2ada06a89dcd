package cuda

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/internal/errcache"
)

// Indexes into Lib.sym; BoundSymbols lists the names in the same order.
const (
	symInit = iota
	symDriverGetVersion
	symDeviceGet
	symDeviceGetCount
	symDeviceGetName
	symDeviceGetAttribute
	symDevicePrimaryCtxRetain
	symDevicePrimaryCtxRelease
	symCtxSetCurrent
	symCtxGetCurrent
	symCtxSynchronize
	symStreamCreate
	symStreamDestroy
	symStreamSynchronize
	symStreamQuery
	symEventCreate
	symEventRecord
	symEventQuery
	symEventSynchronize
	symEventDestroy
	symEventElapsedTime
	symStreamWaitEvent
	symMemAlloc
	symMemFree
	symMemcpyHtoD
	symMemcpyDtoH
	symMemcpyHtoDAsync
	symMemcpyDtoHAsync
	symMemcpyDtoDAsync
	symMemHostAlloc
	symMemFreeHost
	symModuleLoadData
	symModuleUnload
	symModuleGetFunction
	symLaunchKernel
	symGetErrorName
	symGetErrorString
	symDeviceCanAccessPeer
	symCtxEnablePeerAccess
	symMemcpyPeerAsync
	numSyms
)

// BoundSymbols are the libcuda functions that Open resolves, every one of
// which must be present. Where cuda.h maps a name to a versioned entry point
// the versioned one is bound: the unversioned cuMemAlloc, cuMemcpyHtoD, ...
// still resolve but take 32-bit device pointers.
var BoundSymbols = []string{
	symInit:                    "cuInit",
	symDriverGetVersion:        "cuDriverGetVersion",
	symDeviceGet:               "cuDeviceGet",
	symDeviceGetCount:          "cuDeviceGetCount",
	symDeviceGetName:           "cuDeviceGetName",
	symDeviceGetAttribute:      "cuDeviceGetAttribute",
	symDevicePrimaryCtxRetain:  "cuDevicePrimaryCtxRetain",
	symDevicePrimaryCtxRelease: "cuDevicePrimaryCtxRelease_v2",
	symCtxSetCurrent:           "cuCtxSetCurrent",
	symCtxGetCurrent:           "cuCtxGetCurrent",
	symCtxSynchronize:          "cuCtxSynchronize",
	symStreamCreate:            "cuStreamCreate",
	symStreamDestroy:           "cuStreamDestroy_v2",
	symStreamSynchronize:       "cuStreamSynchronize",
	symStreamQuery:             "cuStreamQuery",
	symEventCreate:             "cuEventCreate",
	symEventRecord:             "cuEventRecord",
	symEventQuery:              "cuEventQuery",
	symEventSynchronize:        "cuEventSynchronize",
	symEventDestroy:            "cuEventDestroy_v2",
	// Every driver exports cuEventElapsedTime, CUDA 2.0's entry point
	// (drivers keep old entry points for old binaries); CUDA 12.8 added a
	// _v2 that newer headers map the name to.
	symEventElapsedTime:    "cuEventElapsedTime",
	symStreamWaitEvent:     "cuStreamWaitEvent",
	symMemAlloc:            "cuMemAlloc_v2",
	symMemFree:             "cuMemFree_v2",
	symMemcpyHtoD:          "cuMemcpyHtoD_v2",
	symMemcpyDtoH:          "cuMemcpyDtoH_v2",
	symMemcpyHtoDAsync:     "cuMemcpyHtoDAsync_v2",
	symMemcpyDtoHAsync:     "cuMemcpyDtoHAsync_v2",
	symMemcpyDtoDAsync:     "cuMemcpyDtoDAsync_v2",
	symMemHostAlloc:        "cuMemHostAlloc",
	symMemFreeHost:         "cuMemFreeHost",
	symModuleLoadData:      "cuModuleLoadData",
	symModuleUnload:        "cuModuleUnload",
	symModuleGetFunction:   "cuModuleGetFunction",
	symLaunchKernel:        "cuLaunchKernel",
	symGetErrorName:        "cuGetErrorName",
	symGetErrorString:      "cuGetErrorString",
	symDeviceCanAccessPeer: "cuDeviceCanAccessPeer",
	symCtxEnablePeerAccess: "cuCtxEnablePeerAccess",
	symMemcpyPeerAsync:     "cuMemcpyPeerAsync",
}

// EnvLibCUDA names the environment variable that, when set, is the only
// path Open tries.
const EnvLibCUDA = "ROCSYNC_LIBCUDA"

// Sonames is the driver library's soname.
var Sonames = []string{"libcuda.so.1"}

// SearchDirs are the directories Open looks in before the dynamic loader's
// own search (LD_LIBRARY_PATH, the ld.so cache): where NVIDIA's container
// toolkit mounts the driver, and the distributions' library directories.
// The CUDA toolkit's lib64/stubs/libcuda.so is deliberately absent: it is a
// link-time stub whose every call fails.
var SearchDirs = []string{
	"/usr/local/nvidia/lib64",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib64",
	"/usr/lib/wsl/lib",
}

// Lib is the purego binding to libcuda. It is safe for use by many
// goroutines.
type Lib struct {
	path   string
	handle uintptr
	sym    [numSyms + numOptional]uintptr

	errs errcache.Cache[Error] // one immutable *Error per (function, code)

	modMu   sync.Mutex
	modules map[Module]unsafe.Pointer // the C copy of each module's image

	graph dl.LazySymbols // the optional cuGraph* entry points (graph.go)
}

// Open loads libcuda.so.1 ($ROCSYNC_LIBCUDA when set, else SearchDirs, else
// the loader's search) and resolves BoundSymbols. It does not call cuInit
// and succeeds on a machine without a GPU where the driver is installed.
// When the library is missing the error matches ErrNoDriver and
// dl.ErrNotFound, and lists every path tried.
func Open() (*Lib, error) {
	var lib *dl.Library
	var err error
	override := os.Getenv(EnvLibCUDA)
	if override != "" {
		lib, err = dl.Open("libcuda", []string{override}, nil)
	} else {
		lib, err = dl.Open("libcuda", Sonames, SearchDirs)
	}
	if err != nil {
		if nf, ok := err.(*dl.NotFoundError); ok {
			return nil, &noDriverError{nf: nf, override: override}
		}
		return nil, err
	}
	addrs, err := lib.Symbols(BoundSymbols)
	if err != nil {
		return nil, fmt.Errorf("cuda: %s is not a usable CUDA driver: %w", lib.Path, err)
	}
	if err := cmem.Libc(); err != nil {
		return nil, err
	}
	l := &Lib{path: lib.Path, handle: lib.Handle, modules: make(map[Module]unsafe.Pointer)}
	copy(l.sym[:], addrs)
	l.resolveOptional()
	return l, nil
}

// Path is the path or soname that opened.
func (l *Lib) Path() string { return l.path }

// check turns a CUresult into nil or the cached *Error. CUresult is a
// 32-bit enum: the upper half of RAX is not defined by the ABI.
func (l *Lib) check(fn int, r uintptr) error {
	code := Result(uint32(r))
	if code == Success {
		return nil
	}
	return l.errorFor(fn, code)
}

// errorFor returns the *Error for a failed call. The values are cached, so
// the polling paths (cuEventQuery and cuStreamQuery returning
// CUDA_ERROR_NOT_READY) do not allocate; callers must treat them as
// read-only.
func (l *Lib) errorFor(fn int, code Result) *Error {
	return l.errs.Get(fn, uint32(code), func() *Error {
		return &Error{Func: symbolName(fn), Code: code, Name: l.ErrorName(code), Text: l.ErrorString(code)}
	})
}

// ErrorName is cuGetErrorName ("" for an unknown code).
func (l *Lib) ErrorName(code Result) string {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	if uint32(b.Call(l.sym[symGetErrorName], uintptr(code), b.Word(0))) != 0 {
		return ""
	}
	return cmem.GoString(uintptr(*b.U64(0)))
}

// ErrorString is cuGetErrorString ("" for an unknown code).
func (l *Lib) ErrorString(code Result) string {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	if uint32(b.Call(l.sym[symGetErrorString], uintptr(code), b.Word(0))) != 0 {
		return ""
	}
	return cmem.GoString(uintptr(*b.U64(0)))
}

// invoke calls fn (integer and C-address arguments only). With c non-nil it
// first locks the goroutine to its OS thread and makes c current there, and
// unlocks after the call.
func (l *Lib) invoke(c *Ctx, fn int, args ...uintptr) error {
	b := blocks.Get()
	r, failed := l.callOn(b, c, fn, args)
	blocks.Put(b)
	return l.check(failed, r)
}

// callOn makes the call with b's argument array, on c when non-nil. It
// returns the result and the symbol it belongs to (cuCtxSetCurrent when
// that failed). The thread's context is put back afterwards (restoreIn).
func (l *Lib) callOn(b *cmem.Block, c *Ctx, fn int, args []uintptr) (uintptr, int) {
	if c == nil {
		return b.Call(l.sym[fn], args...), fn
	}
	runtime.LockOSThread()
	r, prev := l.currentIn(b, c)
	if uint32(r) == 0 {
		r = b.Call(l.sym[fn], args...)
		l.restoreIn(b, c, prev)
	} else {
		fn = symCtxSetCurrent
	}
	runtime.UnlockOSThread()
	return r, fn
}

// currentIn makes c current on this thread, which the caller has locked,
// using b's last word: it returns cuCtxSetCurrent's result, or 0 (success)
// where c was current already and no call was needed, and the context
// that was current before (0 for none, or unknown without checkCurrent).
// Every Ctx call goes through it, so that the check is one foreign call in
// one block.
func (l *Lib) currentIn(b *cmem.Block, c *Ctx) (r uintptr, prev Context) {
	if checkCurrent {
		// cuCtxGetCurrent into the block's last word, which no call's
		// out-parameter uses. A failed cuCtxGetCurrent leaves it 0, and
		// the context is then set.
		*b.U64(lastWord) = 0
		b.Call(l.sym[symCtxGetCurrent], b.Word(lastWord))
		if prev = Context(*b.U64(lastWord)); prev == c.h {
			return 0, prev
		}
	}
	return b.Call(l.sym[symCtxSetCurrent], uintptr(c.h)), prev
}

// restoreIn puts back prev, the context currentIn found on the thread,
// where it was another context than c: the caller's own CUDA work on a
// thread it locked goes on in the context it chose, not silently in c's
// (a driver call in the wrong context runs on the wrong GPU). A thread
// with no context keeps c, which no caller can have relied on: the
// driver refuses calls without a current context. The common cases, c
// already current or none, cost nothing more.
func (l *Lib) restoreIn(b *cmem.Block, c *Ctx, prev Context) {
	if prev != 0 && prev != c.h {
		b.Call(l.sym[symCtxSetCurrent], uintptr(prev))
	}
}

// checkCurrent makes Ctx calls ask cuCtxGetCurrent first and call
// cuCtxSetCurrent only when another context (or none) is current on the
// thread, instead of setting it every time. Both cost one foreign call
// when the context is already current (the usual case); cuCtxGetCurrent
// only reads the driver's thread-local state while cuCtxSetCurrent updates
// it; the two forms time alike within run-to-run noise on an H100
// (BenchmarkGPUCtx* against BenchmarkGPUCtx*SetAlways). The tests run
// both.
var checkCurrent = true

const lastWord = blockBytes/8 - 1

// outInvoke is invoke with the address of a zeroed C word prepended to the
// arguments; it returns the word.
func (l *Lib) outInvoke(c *Ctx, fn int, args ...uintptr) (uint64, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	var all [cmem.MaxArgs]uintptr
	all[0] = b.Word(0)
	n := 1 + copy(all[1:], args)
	r, failed := l.callOn(b, c, fn, all[:n])
	if err := l.check(failed, r); err != nil {
		return 0, err
	}
	return *b.U64(0), nil
}

// Init is cuInit(0). With no GPU the error matches ErrNoDevice as well as
// the *Error (CUDA_ERROR_NO_DEVICE).
func (l *Lib) Init() error {
	err := l.invoke(nil, symInit, 0)
	if e, ok := err.(*Error); ok && e.Code == ErrorNoDevice {
		return noDevice(e)
	}
	return err
}

// DriverVersion is cuDriverGetVersion: 1000*major + 10*minor (13000 for
// CUDA 13.0).
func (l *Lib) DriverVersion() (int, error) {
	v, err := l.outInvoke(nil, symDriverGetVersion)
	return int(int32(v)), err
}

// DeviceCount is cuDeviceGetCount; zero devices is ErrNoDevice.
func (l *Lib) DeviceCount() (int, error) {
	v, err := l.outInvoke(nil, symDeviceGetCount)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Code == ErrorNoDevice {
			return 0, noDevice(e)
		}
		return 0, err
	}
	if n := int(int32(v)); n > 0 {
		return n, nil
	}
	return 0, ErrNoDevice
}

// DeviceGet is cuDeviceGet.
func (l *Lib) DeviceGet(ordinal int) (Device, error) {
	v, err := l.outInvoke(nil, symDeviceGet, uintptr(ordinal))
	return Device(int32(v)), err
}

// DeviceName is cuDeviceGetName.
func (l *Lib) DeviceName(d Device) (string, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	clear(unsafe.Slice((*byte)(b.Ptr()), blockBytes))
	r := b.Call(l.sym[symDeviceGetName], uintptr(b.Ptr()), blockBytes-1, uintptr(d))
	if err := l.check(symDeviceGetName, r); err != nil {
		return "", err
	}
	return cmem.GoString(uintptr(b.Ptr())), nil
}

// DeviceAttribute is cuDeviceGetAttribute (the Attr* constants).
func (l *Lib) DeviceAttribute(d Device, attr int32) (int32, error) {
	v, err := l.outInvoke(nil, symDeviceGetAttribute, uintptr(uint32(attr)), uintptr(d))
	return int32(v), err
}

// ComputeCapability reads the major and minor compute capability (9, 0 on
// an H100).
func (l *Lib) ComputeCapability(d Device) (major, minor int, err error) {
	ma, err := l.DeviceAttribute(d, AttrComputeCapabilityMajor)
	if err != nil {
		return 0, 0, err
	}
	mi, err := l.DeviceAttribute(d, AttrComputeCapabilityMinor)
	return int(ma), int(mi), err
}

// DeviceCanAccessPeer is cuDeviceCanAccessPeer: whether d can map peer's
// memory.
func (l *Lib) DeviceCanAccessPeer(d, peer Device) (bool, error) {
	v, err := l.outInvoke(nil, symDeviceCanAccessPeer, uintptr(d), uintptr(peer))
	return int32(v) != 0, err
}

// CtxSetCurrent is cuCtxSetCurrent on the calling OS thread: the caller
// must hold runtime.LockOSThread for as long as it relies on it.
func (l *Lib) CtxSetCurrent(c Context) error { return l.invoke(nil, symCtxSetCurrent, uintptr(c)) }

// CtxGetCurrent is cuCtxGetCurrent on the calling OS thread (0 when none).
func (l *Lib) CtxGetCurrent() (Context, error) {
	v, err := l.outInvoke(nil, symCtxGetCurrent)
	return Context(v), err
}

// The calls below act on the calling OS thread's current context (as in
// C). Ctx has the same calls made correct from any goroutine.

// CtxSynchronize is cuCtxSynchronize.
func (l *Lib) CtxSynchronize() error { return l.invoke(nil, symCtxSynchronize) }

// StreamCreate is cuStreamCreate (flags: StreamNonBlocking).
func (l *Lib) StreamCreate(flags uint32) (Stream, error) {
	v, err := l.outInvoke(nil, symStreamCreate, uintptr(flags))
	return Stream(v), err
}

// StreamDestroy is cuStreamDestroy_v2.
func (l *Lib) StreamDestroy(s Stream) error { return l.invoke(nil, symStreamDestroy, uintptr(s)) }

// StreamSynchronize is cuStreamSynchronize.
func (l *Lib) StreamSynchronize(s Stream) error {
	return l.invoke(nil, symStreamSynchronize, uintptr(s))
}

// StreamQuery is cuStreamQuery: nil when all work is done, an *Error with
// ErrorNotReady (cached, no allocation) while work is pending.
func (l *Lib) StreamQuery(s Stream) error { return l.invoke(nil, symStreamQuery, uintptr(s)) }

// EventCreate is cuEventCreate (flags: EventDisableTiming).
func (l *Lib) EventCreate(flags uint32) (Event, error) {
	v, err := l.outInvoke(nil, symEventCreate, uintptr(flags))
	return Event(v), err
}

// EventDestroy is cuEventDestroy_v2.
func (l *Lib) EventDestroy(e Event) error { return l.invoke(nil, symEventDestroy, uintptr(e)) }

// EventRecord is cuEventRecord.
func (l *Lib) EventRecord(e Event, s Stream) error {
	return l.invoke(nil, symEventRecord, uintptr(e), uintptr(s))
}

// EventQuery is cuEventQuery: nil when reached, an *Error with
// ErrorNotReady (cached) before.
func (l *Lib) EventQuery(e Event) error { return l.invoke(nil, symEventQuery, uintptr(e)) }

// EventSynchronize is cuEventSynchronize.
func (l *Lib) EventSynchronize(e Event) error { return l.invoke(nil, symEventSynchronize, uintptr(e)) }

// StreamWaitEvent is cuStreamWaitEvent(s, e, 0). The wait captures the
// event's most recent record at the time of the call.
func (l *Lib) StreamWaitEvent(s Stream, e Event) error {
	return l.invoke(nil, symStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

// MemAlloc is cuMemAlloc_v2.
func (l *Lib) MemAlloc(size uint64) (DevicePtr, error) {
	v, err := l.outInvoke(nil, symMemAlloc, uintptr(size))
	return DevicePtr(v), err
}

// MemFree is cuMemFree_v2.
func (l *Lib) MemFree(p DevicePtr) error { return l.invoke(nil, symMemFree, uintptr(p)) }

// MemcpyHtoD is cuMemcpyHtoD_v2. src may be Go memory without Go pointers
// in it. With pageable memory the call returns once the data is staged,
// possibly before the DMA to dst completes: see Ctx.MemcpyHtoD.
func (l *Lib) MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, size uint64) error {
	// The Go pointer is converted inside the SyscallN call expression, so
	// //go:uintptrescapes keeps it alive and in place; that costs
	// SyscallN's one allocation, which copies can afford.
	r, _, _ := purego.SyscallN(l.sym[symMemcpyHtoD], uintptr(dst), uintptr(src), uintptr(size))
	return l.check(symMemcpyHtoD, r)
}

// MemcpyDtoH is cuMemcpyDtoH_v2. It returns once the data is in dst.
func (l *Lib) MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, size uint64) error {
	r, _, _ := purego.SyscallN(l.sym[symMemcpyDtoH], uintptr(dst), uintptr(src), uintptr(size))
	return l.check(symMemcpyDtoH, r)
}

// ModuleLoadData is cuModuleLoadData. The image (PTX text, a cubin or a
// fatbin) is copied into C memory, NUL-terminated, and kept until
// ModuleUnload. PTX is JIT-compiled for the current context's device inside
// this call.
func (l *Lib) ModuleLoadData(image []byte) (Module, error) { return l.moduleLoad(nil, image) }

func (l *Lib) moduleLoad(c *Ctx, image []byte) (Module, error) {
	img := cmem.Alloc(uintptr(len(image) + 1))
	if img == nil {
		return 0, fmt.Errorf("cuda: cuModuleLoadData: cannot allocate %d bytes of C memory", len(image)+1)
	}
	copy(unsafe.Slice((*byte)(img), len(image)), image)
	v, err := l.outInvoke(c, symModuleLoadData, uintptr(img))
	if err != nil {
		cmem.Free(img)
		return 0, err
	}
	m := Module(v)
	l.modMu.Lock()
	l.modules[m] = img
	l.modMu.Unlock()
	return m, nil
}

// ModuleUnload is cuModuleUnload; it then frees the image's C copy.
func (l *Lib) ModuleUnload(m Module) error { return l.moduleUnload(nil, m) }

func (l *Lib) moduleUnload(c *Ctx, m Module) error {
	if err := l.invoke(c, symModuleUnload, uintptr(m)); err != nil {
		return err
	}
	l.modMu.Lock()
	img := l.modules[m]
	delete(l.modules, m)
	l.modMu.Unlock()
	cmem.Free(img)
	return nil
}

// ModuleGetFunction is cuModuleGetFunction.
func (l *Lib) ModuleGetFunction(m Module, name string) (Function, error) {
	return l.moduleGetFunction(nil, m, name)
}

func (l *Lib) moduleGetFunction(c *Ctx, m Module, name string) (Function, error) {
	cname := cmem.Alloc(uintptr(len(name) + 1))
	if cname == nil {
		return 0, fmt.Errorf("cuda: cuModuleGetFunction: cannot allocate C memory")
	}
	defer cmem.Free(cname)
	copy(unsafe.Slice((*byte)(cname), len(name)), name)
	v, err := l.outInvoke(c, symModuleGetFunction, uintptr(m), uintptr(cname))
	return Function(v), err
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// LaunchKernel is cuLaunchKernel with kernelParams (the C address of an
// array of pointers to the argument values, such as ParamBlock.Params) and
// no extra. It allocates nothing.
func (l *Lib) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params uintptr) error {
	return l.invoke(nil, symLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedMem), uintptr(s), params, 0)
}

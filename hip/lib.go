package hip

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/internal/errcache"
)

// Indexes into Lib.sym; BoundSymbols lists the names in the same order.
const (
	symInit = iota
	symGetDeviceCount
	symSetDevice
	symGetDevice
	symDeviceSynchronize
	symDeviceGetName
	symDeviceGetAttribute
	symDeviceGetPCIBusId
	symStreamCreateWithFlags
	symStreamDestroy
	symStreamSynchronize
	symStreamQuery
	symEventCreateWithFlags
	symEventRecord
	symEventQuery
	symEventSynchronize
	symEventDestroy
	symEventElapsedTime
	symStreamWaitEvent
	symMalloc
	symExtMallocWithFlags
	symFree
	symMemcpy
	symMemcpyAsync
	symMemsetAsync
	symHostMalloc
	symHostFree
	symModuleLoadData
	symModuleUnload
	symModuleGetFunction
	symModuleLaunchKernel
	symStreamWaitValue64
	symStreamWriteValue64
	symGetErrorName
	symGetErrorString
	symRuntimeGetVersion
	symDeviceCanAccessPeer
	symDeviceEnablePeerAccess
	symMemcpyPeerAsync
	symStreamCreateWithPriority
	symMemcpyWithStream
	numSyms
)

// BoundSymbols are the libamdhip64 functions that Open resolves, every one of
// which must be present. hipGetDeviceProperties is deliberately absent: its
// struct changed size in ROCm 6 and dlsym returns the old-layout entry point
// (see DeviceAttribute and DeviceName instead).
var BoundSymbols = []string{
	symInit:                  "hipInit",
	symGetDeviceCount:        "hipGetDeviceCount",
	symSetDevice:             "hipSetDevice",
	symGetDevice:             "hipGetDevice",
	symDeviceSynchronize:     "hipDeviceSynchronize",
	symDeviceGetName:         "hipDeviceGetName",
	symDeviceGetAttribute:    "hipDeviceGetAttribute",
	symDeviceGetPCIBusId:     "hipDeviceGetPCIBusId",
	symStreamCreateWithFlags: "hipStreamCreateWithFlags",
	symStreamDestroy:         "hipStreamDestroy",
	symStreamSynchronize:     "hipStreamSynchronize",
	symStreamQuery:           "hipStreamQuery",
	symEventCreateWithFlags:  "hipEventCreateWithFlags",
	symEventElapsedTime:      "hipEventElapsedTime",
	symEventRecord:           "hipEventRecord",
	symEventQuery:            "hipEventQuery",
	symEventSynchronize:      "hipEventSynchronize",
	symEventDestroy:          "hipEventDestroy",
	symStreamWaitEvent:       "hipStreamWaitEvent",
	symMalloc:                "hipMalloc",
	symExtMallocWithFlags:    "hipExtMallocWithFlags",
	symFree:                  "hipFree",
	symMemcpy:                "hipMemcpy",
	symMemcpyAsync:           "hipMemcpyAsync",
	symMemsetAsync:           "hipMemsetAsync",
	symHostMalloc:            "hipHostMalloc",
	symHostFree:              "hipHostFree",
	symModuleLoadData:        "hipModuleLoadData",
	symModuleUnload:          "hipModuleUnload",
	symModuleGetFunction:     "hipModuleGetFunction",
	symModuleLaunchKernel:    "hipModuleLaunchKernel",
	symStreamWaitValue64:     "hipStreamWaitValue64",
	symStreamWriteValue64:    "hipStreamWriteValue64",
	symGetErrorName:          "hipGetErrorName",
	symGetErrorString:        "hipGetErrorString",
	symRuntimeGetVersion:     "hipRuntimeGetVersion",

	symDeviceCanAccessPeer:    "hipDeviceCanAccessPeer",
	symDeviceEnablePeerAccess: "hipDeviceEnablePeerAccess",
	symMemcpyPeerAsync:        "hipMemcpyPeerAsync",

	symStreamCreateWithPriority: "hipStreamCreateWithPriority",
	symMemcpyWithStream:         "hipMemcpyWithStream",
}

// Sonames tries the HIP runtime of ROCm 7, 6 and 5, newest first.
var Sonames = []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"}

const (
	scratchSize  = 64 // out-parameters: a few words
	launchHeader = 64 // extra[5] at word 0..4, size_t at word 5
	launchArgCap = 4096
)

// Lib is the purego binding to libamdhip64. It implements Runtime and is
// safe for use by many goroutines.
//
// Current device. HIP keeps the current device per OS thread, while a
// goroutine may run on any thread and move between calls. Every method that
// depends on the current device therefore locks the goroutine to its thread
// (runtime.LockOSThread), calls hipSetDevice and then the function, and only
// then unlocks. That is: the methods taking a device (StreamCreate,
// EventCreate, Malloc, ExtMalloc, Free, the synchronous memcpys,
// ModuleLoadData, DeviceSynchronize), plus ModuleGetFunction and
// ModuleUnload, which HIP aborts the process for (DynCO::CheckDeviceIdMatch)
// unless the module's device is current, and ModuleLaunchKernel, which HIP
// rejects unless the stream's device is current. Lib remembers the device of
// each stream, module and function it created for that. hipSetDevice is
// called every time rather than checked first with hipGetDevice: both are one
// foreign call of the same cost, and a cached per-thread value could be
// changed behind our back by other C code on the thread. DeviceName and
// DeviceAttribute pass the device as an argument to HIP and need no current
// device. StreamWaitValue64 and StreamWriteValue64 make the stream's device
// current too: HIP looks up a pointer it did not allocate through the
// calling thread's current device. The other stream calls (EventRecord,
// StreamWaitEvent, the async copies, ...) act on the stream's own device; with the null
// stream (0) they would act on the calling thread's current device, which is
// unspecified here, so always pass a stream from StreamCreate.
type Lib struct {
	path    string
	major   int
	handle  uintptr
	sym     [numSyms]uintptr
	scratch *cmem.Pool
	launch  *cmem.Pool
	graph   dl.LazySymbols // the hipGraph API, resolved on first use (graph.go)

	errs      errcache.Cache[Error] // one immutable *Error per (function, code)
	noDevOnce sync.Once
	noDevErr  error // DeviceCount's no-device error, made once

	mu      sync.Mutex // serialises changes to modules and idx
	modules map[Module]*module
	idx     atomic.Pointer[devIndex]
}

// devIndex maps streams and functions to their devices for
// ModuleLaunchKernel. It is copied on write and read with one atomic load,
// so concurrent launches do not contend on a lock.
type devIndex struct {
	streams map[Stream]int
	funcs   map[Function]int
}

// updateIndex applies change to a copy of the index; the caller holds l.mu.
func (l *Lib) updateIndex(change func(*devIndex)) {
	old := l.idx.Load()
	n := &devIndex{streams: maps.Clone(old.streams), funcs: maps.Clone(old.funcs)}
	change(n)
	l.idx.Store(n)
}

type module struct {
	device int
	image  unsafe.Pointer // C copy of the code object, freed by ModuleUnload
	funcs  []Function
}

var _ Runtime = (*Lib)(nil)

// Open loads libamdhip64 (ROCm 7, 6 or 5, from $ROCM_PATH/lib, /opt/rocm/lib
// or the system paths) and resolves every symbol in BoundSymbols. It does not
// call hipInit, and it succeeds on a machine without a GPU.
func Open() (*Lib, error) {
	lib, err := dl.Open("libamdhip64", Sonames, dl.SearchDirs())
	if err != nil {
		return nil, err
	}
	major, err := sonameMajor(lib.Path)
	if err != nil {
		return nil, err
	}
	addrs, err := lib.Symbols(BoundSymbols)
	if err != nil {
		return nil, err
	}
	l := &Lib{
		path:    lib.Path,
		major:   major,
		handle:  lib.Handle,
		modules: make(map[Module]*module),
	}
	l.idx.Store(&devIndex{streams: map[Stream]int{}, funcs: map[Function]int{}})
	copy(l.sym[:], addrs)
	if err := cmem.Libc(); err != nil {
		return nil, err
	}
	l.scratch = &cmem.Pool{Size: scratchSize}
	l.launch = &cmem.Pool{Size: launchHeader + launchArgCap, Init: initLaunchBlock}
	return l, nil
}

func sonameMajor(path string) (int, error) {
	base := filepath.Base(path)
	i := strings.LastIndex(base, ".so.")
	if i < 0 {
		return 0, fmt.Errorf("hip: cannot tell the ROCm release of %s", path)
	}
	v := base[i+len(".so."):]
	if j := strings.IndexByte(v, '.'); j >= 0 {
		v = v[:j]
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("hip: cannot tell the ROCm release of %s", path)
	}
	return n, nil
}

// Major is the soname major of the libamdhip64 that opened: 5, 6 or 7, which
// is also the ROCm release. rocBLAS must come from the same release.
func (l *Lib) Major() int { return l.major }

// Path is the path or soname that opened.
func (l *Lib) Path() string { return l.path }

// check turns a hipError_t return into nil or the cached *Error. hipError_t
// is a 32-bit enum: the upper half of RAX is not defined by the ABI.
func (l *Lib) check(fn int, r uintptr) error {
	code := ErrorCode(uint32(r))
	if code == Success {
		return nil
	}
	return l.errorFor(fn, code)
}

// errorFor returns the *Error for a failed call. The values are cached, so
// the polling paths (StreamQuery, EventQuery returning hipErrorNotReady) do
// not allocate; callers must treat them as read-only.
func (l *Lib) errorFor(fn int, code ErrorCode) *Error {
	return l.errs.Get(fn, uint32(code), func() *Error {
		return &Error{Func: BoundSymbols[fn], Code: code, Name: l.ErrorName(code), Text: l.ErrorString(code)}
	})
}

// simple calls fn, whose arguments are integers or C addresses, and checks
// its hipError_t.
func (l *Lib) simple(fn int, args ...uintptr) error {
	b := l.scratch.Get()
	r := b.Call(l.sym[fn], args...)
	l.scratch.Put(b)
	return l.check(fn, r)
}

// ErrorName is hipGetErrorName.
func (l *Lib) ErrorName(code ErrorCode) string {
	b := l.scratch.Get()
	defer l.scratch.Put(b)
	return cmem.GoString(b.Call(l.sym[symGetErrorName], uintptr(code)))
}

// ErrorString is hipGetErrorString (in ROCm 5.2 it returns the name).
func (l *Lib) ErrorString(code ErrorCode) string {
	b := l.scratch.Get()
	defer l.scratch.Put(b)
	return cmem.GoString(b.Call(l.sym[symGetErrorString], uintptr(code)))
}

// setDevice makes device current on this OS thread, using b's argument
// array. The caller must hold runtime.LockOSThread until its
// device-sensitive call has returned.
func (l *Lib) setDevice(b *cmem.Block, device int) error {
	return l.check(symSetDevice, b.Call(l.sym[symSetDevice], uintptr(device)))
}

// outCall runs fn with the address of a zeroed C word as its first argument,
// after making device current when device >= 0, and returns the word.
func (l *Lib) outCall(device int, fn int, args ...uintptr) (uint64, error) {
	b := l.scratch.Get()
	defer l.scratch.Put(b)
	*b.U64(0) = 0
	var all [cmem.MaxArgs]uintptr
	all[0] = b.Word(0)
	n := 1 + copy(all[1:], args)
	if device >= 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := l.setDevice(b, device); err != nil {
			return 0, err
		}
	}
	if err := l.check(fn, b.Call(l.sym[fn], all[:n]...)); err != nil {
		return 0, err
	}
	return *b.U64(0), nil
}

// noDeviceArg tells outCall and onDevice not to set a device.
const noDeviceArg = -1

// onDevice runs fn (integer and C-address arguments) with device current.
func (l *Lib) onDevice(device int, fn int, args ...uintptr) error {
	b := l.scratch.Get()
	defer l.scratch.Put(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := l.setDevice(b, device); err != nil {
		return err
	}
	return l.check(fn, b.Call(l.sym[fn], args...))
}

// RuntimeVersion is hipRuntimeGetVersion: major*10000000 + minor*100000 +
// patch (50221153 for 5.2.21153). It works without a GPU.
func (l *Lib) RuntimeVersion() (int, error) {
	v, err := l.outCall(noDeviceArg, symRuntimeGetVersion)
	return int(int32(v)), err
}

// Init is hipInit(0).
func (l *Lib) Init() error { return l.simple(symInit, 0) }

// DeviceCount is hipGetDeviceCount. With no GPU it returns an error that
// matches both ErrNoDevice and the *Error (hipErrorNoDevice, 100).
func (l *Lib) DeviceCount() (int, error) {
	v, err := l.outCall(noDeviceArg, symGetDeviceCount)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Code == ErrorNoDevice {
			l.noDevOnce.Do(func() { l.noDevErr = noDevice(e) })
			err = l.noDevErr
		}
		return 0, err
	}
	if n := int(int32(v)); n > 0 {
		return n, nil
	}
	return 0, ErrNoDevice
}

// DeviceSynchronize waits for all work on device.
func (l *Lib) DeviceSynchronize(device int) error {
	return l.onDevice(device, symDeviceSynchronize)
}

// DeviceName is hipDeviceGetName (the marketing name; take the gfx name
// from HSA). The device is an argument, so no current device is involved.
func (l *Lib) DeviceName(device int) (string, error) {
	// Go memory is fine here: it holds no pointers, HIP is done with it when
	// the call returns, and the conversion inside the SyscallN call keeps it
	// in place. Not a hot path, so the allocations are accepted.
	buf := make([]byte, 256)
	r, _, _ := purego.SyscallN(l.sym[symDeviceGetName], uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)-1), uintptr(device))
	if err := l.check(symDeviceGetName, r); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// DevicePCIBusID is hipDeviceGetPCIBusId: the device's PCI location as
// "dddd:bb:dd.f" (domain, bus, device, function in hex). HIP 5.2.3 reports
// the domain here but refuses hipDeviceAttributePciDomainID.
func (l *Lib) DevicePCIBusID(device int) (string, error) {
	// As in DeviceName: pointer-free Go memory, not a hot path.
	buf := make([]byte, 64)
	r, _, _ := purego.SyscallN(l.sym[symDeviceGetPCIBusId], uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)-1), uintptr(device))
	if err := l.check(symDeviceGetPCIBusId, r); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// DeviceAttribute is hipDeviceGetAttribute (see the DeviceAttribute*
// constants). The device is an argument, so no current device is involved.
func (l *Lib) DeviceAttribute(device int, attr int32) (int32, error) {
	v, err := l.outCall(noDeviceArg, symDeviceGetAttribute, uintptr(uint32(attr)), uintptr(device))
	return int32(v), err
}

// StreamCreate is hipStreamCreateWithFlags on device.
func (l *Lib) StreamCreate(device int, flags uint32) (Stream, error) {
	if device < 0 {
		return 0, l.errorFor(symSetDevice, ErrorInvalidDevice)
	}
	v, err := l.outCall(device, symStreamCreateWithFlags, uintptr(flags))
	return l.newStream(device, v, err)
}

// newStream records a stream a create call returned on device.
func (l *Lib) newStream(device int, v uint64, err error) (Stream, error) {
	if err != nil {
		return 0, err
	}
	s := Stream(v)
	l.mu.Lock()
	l.updateIndex(func(x *devIndex) { x.streams[s] = device })
	l.mu.Unlock()
	return s, nil
}

// StreamCreateWithPriority is hipStreamCreateWithPriority on device.
func (l *Lib) StreamCreateWithPriority(device int, flags uint32, priority int) (Stream, error) {
	if device < 0 {
		return 0, l.errorFor(symSetDevice, ErrorInvalidDevice)
	}
	v, err := l.outCall(device, symStreamCreateWithPriority, uintptr(flags), uintptr(int64(priority)))
	return l.newStream(device, v, err)
}

// StreamDestroy is hipStreamDestroy.
func (l *Lib) StreamDestroy(s Stream) error {
	if err := l.simple(symStreamDestroy, uintptr(s)); err != nil {
		return err
	}
	l.mu.Lock()
	if _, ok := l.idx.Load().streams[s]; ok {
		l.updateIndex(func(x *devIndex) { delete(x.streams, s) })
	}
	l.mu.Unlock()
	return nil
}

// StreamSynchronize is hipStreamSynchronize. It holds an OS thread while it
// waits.
func (l *Lib) StreamSynchronize(s Stream) error { return l.simple(symStreamSynchronize, uintptr(s)) }

// StreamQuery is hipStreamQuery: nil when done, *Error ErrorNotReady while
// work is pending.
func (l *Lib) StreamQuery(s Stream) error { return l.simple(symStreamQuery, uintptr(s)) }

// EventCreate is hipEventCreateWithFlags on device.
func (l *Lib) EventCreate(device int, flags uint32) (Event, error) {
	if device < 0 {
		return 0, l.errorFor(symSetDevice, ErrorInvalidDevice)
	}
	v, err := l.outCall(device, symEventCreateWithFlags, uintptr(flags))
	return Event(v), err
}

// EventDestroy is hipEventDestroy.
func (l *Lib) EventDestroy(e Event) error { return l.simple(symEventDestroy, uintptr(e)) }

// EventRecord is hipEventRecord. The event and the stream must belong to the
// same device.
func (l *Lib) EventRecord(e Event, s Stream) error {
	return l.simple(symEventRecord, uintptr(e), uintptr(s))
}

// EventQuery is hipEventQuery: nil when reached, *Error ErrorNotReady
// before.
func (l *Lib) EventQuery(e Event) error { return l.simple(symEventQuery, uintptr(e)) }

// EventSynchronize is hipEventSynchronize. It holds an OS thread while it
// waits.
func (l *Lib) EventSynchronize(e Event) error { return l.simple(symEventSynchronize, uintptr(e)) }

// EventElapsedTime is hipEventElapsedTime: the time between two reached
// records of events created with timing (flags without
// EventDisableTiming), in milliseconds.
func (l *Lib) EventElapsedTime(start, stop Event) (float32, error) {
	v, err := l.outCall(-1, symEventElapsedTime, uintptr(start), uintptr(stop))
	return math.Float32frombits(uint32(v)), err
}

// StreamWaitEvent is hipStreamWaitEvent(s, e, 0).
func (l *Lib) StreamWaitEvent(s Stream, e Event) error {
	return l.simple(symStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

// Malloc is hipMalloc on device.
func (l *Lib) Malloc(device int, size uint64) (DevicePtr, error) {
	if device < 0 {
		return 0, l.errorFor(symSetDevice, ErrorInvalidDevice)
	}
	v, err := l.outCall(device, symMalloc, uintptr(size))
	return DevicePtr(v), err
}

// ExtMalloc is hipExtMallocWithFlags on device (DeviceMallocFinegrained, or
// MallocSignalMemory for the target of StreamWaitValue64).
func (l *Lib) ExtMalloc(device int, size uint64, flags uint32) (DevicePtr, error) {
	if device < 0 {
		return 0, l.errorFor(symSetDevice, ErrorInvalidDevice)
	}
	v, err := l.outCall(device, symExtMallocWithFlags, uintptr(size), uintptr(flags))
	return DevicePtr(v), err
}

// Free is hipFree, with device current.
func (l *Lib) Free(device int, p DevicePtr) error {
	return l.onDevice(device, symFree, uintptr(p))
}

// memcpy is the synchronous hipMemcpy with device current. The host side
// may be Go memory (without Go pointers in it): hipMemcpy is done with it
// when it returns, and converting it inside the SyscallN call keeps it alive
// and in place until then. That costs SyscallN's one allocation.
func (l *Lib) memcpy(device int, dst, src unsafe.Pointer, size uint64, kind uint32) error {
	b := l.scratch.Get()
	defer l.scratch.Put(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := l.setDevice(b, device); err != nil {
		return err
	}
	r, _, _ := purego.SyscallN(l.sym[symMemcpy], uintptr(dst), uintptr(src), uintptr(size), uintptr(kind))
	return l.check(symMemcpy, r)
}

// MemcpyWithStream is hipMemcpyWithStream: a copy made on stream s (after
// its earlier work), returning once it is done (clr hip_memory.cpp: it is
// ihipMemcpy with isHostAsync false). The host side may be Go memory, as
// with memcpy.
func (l *Lib) MemcpyWithStream(dst, src unsafe.Pointer, size uint64, kind uint32, s Stream) error {
	r, _, _ := purego.SyscallN(l.sym[symMemcpyWithStream], uintptr(dst), uintptr(src), uintptr(size), uintptr(kind), uintptr(s))
	return l.check(symMemcpyWithStream, r)
}

// MemcpyHtoD is the synchronous hipMemcpy host to device.
func (l *Lib) MemcpyHtoD(device int, dst DevicePtr, src unsafe.Pointer, size uint64) error {
	return l.memcpy(device, cmem.Ptr(uintptr(dst)), src, size, MemcpyHostToDevice)
}

// MemcpyDtoH is the synchronous hipMemcpy device to host.
func (l *Lib) MemcpyDtoH(device int, dst unsafe.Pointer, src DevicePtr, size uint64) error {
	return l.memcpy(device, dst, cmem.Ptr(uintptr(src)), size, MemcpyDeviceToHost)
}

// MemcpyDtoDAsync is hipMemcpyAsync device to device on s.
func (l *Lib) MemcpyDtoDAsync(dst, src DevicePtr, size uint64, s Stream) error {
	return l.simple(symMemcpyAsync, uintptr(dst), uintptr(src), uintptr(size), uintptr(MemcpyDeviceToDevice), uintptr(s))
}

// MemcpyHtoDAsync is hipMemcpyAsync host to device on s. src must be
// pinned memory (HostMalloc) that stays unchanged until the copy completes:
// HIP reads it when the stream gets there, not at the call.
func (l *Lib) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, size uint64, s Stream) error {
	return l.simple(symMemcpyAsync, uintptr(dst), uintptr(src), uintptr(size), uintptr(MemcpyHostToDevice), uintptr(s))
}

// MemcpyDtoHAsync is hipMemcpyAsync device to host on s; dst must be
// pinned memory (HostMalloc).
func (l *Lib) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, size uint64, s Stream) error {
	return l.simple(symMemcpyAsync, uintptr(dst), uintptr(src), uintptr(size), uintptr(MemcpyDeviceToHost), uintptr(s))
}

// HostMalloc is hipHostMalloc (hipHostMallocDefault): pinned host memory
// that every GPU can reach, for asynchronous copies.
func (l *Lib) HostMalloc(size uint64) (unsafe.Pointer, error) {
	p, err := l.outCall(noDeviceArg, symHostMalloc, uintptr(size), 0)
	if err != nil {
		return nil, err
	}
	return cmem.Ptr(uintptr(p)), nil
}

// DeviceCanAccessPeer is hipDeviceCanAccessPeer (no current device needed).
func (l *Lib) DeviceCanAccessPeer(device, peer int) (bool, error) {
	v, err := l.outCall(noDeviceArg, symDeviceCanAccessPeer, uintptr(device), uintptr(peer))
	return int32(v) != 0, err
}

// DeviceEnablePeerAccess is hipDeviceEnablePeerAccess(peer, 0) with device
// current on the calling thread.
func (l *Lib) DeviceEnablePeerAccess(device, peer int) error {
	return l.onDevice(device, symDeviceEnablePeerAccess, uintptr(peer), 0)
}

// MemcpyPeerAsync is hipMemcpyPeerAsync on s (a stream of either device).
func (l *Lib) MemcpyPeerAsync(dst DevicePtr, dstDevice int, src DevicePtr, srcDevice int, size uint64, s Stream) error {
	return l.simple(symMemcpyPeerAsync, uintptr(dst), uintptr(dstDevice), uintptr(src), uintptr(srcDevice), uintptr(size), uintptr(s))
}

var _ PeerRuntime = (*Lib)(nil)

// HostFree is hipHostFree.
func (l *Lib) HostFree(p unsafe.Pointer) error { return l.simple(symHostFree, uintptr(p)) }

// MemsetAsync is hipMemsetAsync on s.
func (l *Lib) MemsetAsync(dst DevicePtr, value byte, size uint64, s Stream) error {
	return l.simple(symMemsetAsync, uintptr(dst), uintptr(value), uintptr(size), uintptr(s))
}

// ModuleLoadData is hipModuleLoadData on device. The image is copied into C
// memory that lives until ModuleUnload, because HIP may read it again after
// hipModuleLoadData returns (C must not keep Go pointers).
func (l *Lib) ModuleLoadData(device int, image []byte) (Module, error) {
	if device < 0 {
		return 0, l.errorFor(symSetDevice, ErrorInvalidDevice)
	}
	img := cmem.Alloc(uintptr(max(len(image), 1)))
	if img == nil {
		return 0, fmt.Errorf("hip: hipModuleLoadData: cannot allocate %d bytes of C memory", len(image))
	}
	copy(unsafe.Slice((*byte)(img), len(image)), image)
	v, err := l.outCall(device, symModuleLoadData, uintptr(img))
	if err != nil {
		cmem.Free(img)
		return 0, err
	}
	m := Module(v)
	l.mu.Lock()
	l.modules[m] = &module{device: device, image: img}
	l.mu.Unlock()
	return m, nil
}

// moduleDevice is the device a module was loaded on.
func (l *Lib) moduleDevice(m Module) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if mod := l.modules[m]; mod != nil {
		return mod.device, true
	}
	return 0, false
}

// ModuleUnload is hipModuleUnload, with the module's device current; it then
// frees the C copy of the image.
func (l *Lib) ModuleUnload(m Module) error {
	var err error
	if dev, known := l.moduleDevice(m); known {
		err = l.onDevice(dev, symModuleUnload, uintptr(m))
	} else {
		err = l.simple(symModuleUnload, uintptr(m))
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	if mod := l.modules[m]; mod != nil {
		l.updateIndex(func(x *devIndex) {
			for _, f := range mod.funcs {
				delete(x.funcs, f)
			}
		})
		delete(l.modules, m)
		cmem.Free(mod.image)
	}
	l.mu.Unlock()
	return nil
}

// ModuleGetFunction is hipModuleGetFunction, with the module's device
// current (HIP aborts the process otherwise).
func (l *Lib) ModuleGetFunction(m Module, name string) (Function, error) {
	dev, known := l.moduleDevice(m)
	b := l.scratch.Get()
	defer l.scratch.Put(b)
	*b.U64(0) = 0
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if known {
		if err := l.setDevice(b, dev); err != nil {
			return 0, err
		}
	}
	cname := append([]byte(name), 0) // Go memory: HIP copies the name
	r, _, _ := purego.SyscallN(l.sym[symModuleGetFunction], b.Word(0), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	if err := l.check(symModuleGetFunction, r); err != nil {
		return 0, err
	}
	f := Function(*b.U64(0))
	if known {
		l.mu.Lock()
		if mod := l.modules[m]; mod != nil {
			mod.funcs = append(mod.funcs, f)
			l.updateIndex(func(x *devIndex) { x.funcs[f] = dev })
		}
		l.mu.Unlock()
	}
	return f, nil
}

// initLaunchBlock writes the constant part of the extra array:
//
//	extra = {HIP_LAUNCH_PARAM_BUFFER_POINTER, argbuf,
//	         HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END}
//
// with extra at word 0, size at word 5 and argbuf at byte 64, all in the
// block's C memory.
func initLaunchBlock(b *cmem.Block) {
	*b.U64(0) = uint64(LaunchParamBufferPointer)
	*b.U64(1) = uint64(b.Word(launchHeader / 8))
	*b.U64(2) = uint64(LaunchParamBufferSize)
	*b.U64(3) = uint64(b.Word(5))
	*b.U64(4) = uint64(LaunchParamEnd)
	*b.U64(5) = 0
}

// launchDevice is the device whose stream (or, for the null stream, whose
// function) a launch uses.
func (l *Lib) launchDevice(f Function, s Stream) (int, bool) {
	x := l.idx.Load()
	if s != 0 {
		if d, ok := x.streams[s]; ok {
			return d, true
		}
	}
	d, ok := x.funcs[f]
	return d, ok
}

// ModuleLaunchKernel is hipModuleLaunchKernel with kernelParams NULL and the
// arguments passed through extra (HIP_LAUNCH_PARAM_BUFFER_POINTER). args is
// copied into C memory from a pool: the extra array points at it, so neither
// may be Go memory. HIP copies the kernarg buffer when it enqueues the
// launch, so the buffer is reused as soon as the call returns. The stream's
// device is made current first, as HIP requires.
func (l *Lib) ModuleLaunchKernel(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, args []byte) error {
	dev, known := l.launchDevice(f, s)
	b := l.launch.Get()
	defer l.launch.Put(b)
	if need := launchHeader + uintptr(len(args)); need > b.Size() {
		if !b.Grow(need) {
			return fmt.Errorf("hip: hipModuleLaunchKernel: cannot allocate %d bytes of C memory", need)
		}
		initLaunchBlock(b)
	}
	copy(unsafe.Slice((*byte)(unsafe.Add(b.Ptr(), launchHeader)), len(args)), args)
	*b.U64(5) = uint64(len(args))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if known {
		if err := l.setDevice(b, dev); err != nil {
			return err
		}
	}
	r := b.Call(l.sym[symModuleLaunchKernel], uintptr(f),
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		uintptr(sharedMem), uintptr(s), 0, uintptr(b.Ptr()))
	return l.check(symModuleLaunchKernel, r)
}

// StreamWaitValue64 is hipStreamWaitValue64. ptr must be memory HIP knows
// (from ExtMalloc with MallocSignalMemory, or host memory registered with
// HIP), or, from HIP 5.6, memory ROCr allocated (an HSA signal's value
// address), never Go memory: the GPU reads it after the call returns. The
// stream's device is made current first: HIP resolves a pointer it did not
// allocate through the calling thread's current device (clr
// hipamd/src/hip_memory.cpp, getMemoryObject: the current device's arena
// memory object, rocm-6.2), and on another device that lookup fails.
func (l *Lib) StreamWaitValue64(s Stream, ptr unsafe.Pointer, value uint64, flags uint32, mask uint64) error {
	return l.onStreamDevice(symStreamWaitValue64, s, uintptr(s), uintptr(ptr), uintptr(value), uintptr(flags), uintptr(mask))
}

// StreamWriteValue64 is hipStreamWriteValue64 (flags reserved, 0). ptr and
// the current device as for StreamWaitValue64.
func (l *Lib) StreamWriteValue64(s Stream, ptr unsafe.Pointer, value uint64, flags uint32) error {
	return l.onStreamDevice(symStreamWriteValue64, s, uintptr(s), uintptr(ptr), uintptr(value), uintptr(flags))
}

// onStreamDevice runs fn with s's device current (when Lib made s; else on
// whatever device the thread has), as ModuleLaunchKernel does.
func (l *Lib) onStreamDevice(fn int, s Stream, args ...uintptr) error {
	dev, known := l.idx.Load().streams[s]
	if !known {
		return l.simple(fn, args...)
	}
	return l.onDevice(dev, fn, args...)
}

// OnDevice runs fn on a locked OS thread with device current
// (hipSetDevice), for C libraries that act on the calling thread's
// device, such as RCCL's ncclCommInitRank.
func (l *Lib) OnDevice(device int, fn func() error) error {
	if device < 0 {
		return l.errorFor(symSetDevice, ErrorInvalidDevice)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := l.scratch.Get()
	err := l.setDevice(b, device)
	l.scratch.Put(b)
	if err != nil {
		return err
	}
	return fn()
}

package cuda

import (
	"math"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// Ctx is a context whose calls are correct from any goroutine.
//
// CUDA keeps the current context per OS thread: on a thread where nothing
// made it current, cuCtxGetCurrent returns 0 and cuMemAlloc fails with
// CUDA_ERROR_INVALID_CONTEXT. A goroutine may run on a different thread for
// each call, so every Ctx method locks the goroutine to its thread
// (runtime.LockOSThread, a few nanoseconds), asks the driver which context
// is current there (cuCtxGetCurrent, a read of the driver's thread-local
// state), makes c current with cuCtxSetCurrent if it is not, calls the
// function, and unlocks. A cache of "this thread already has c" on the Go
// side is not possible without thread-local storage, and could be
// invalidated by other C code on the thread; the check costs one foreign
// call, about 0.1-0.2 µs through purego (BenchmarkGPUCtx* against
// BenchmarkGPULib*).
type Ctx struct {
	lib     *Lib
	h       Context
	dev     Device
	primary bool
}

// PrimaryCtxRetain is cuDevicePrimaryCtxRetain: the device's primary
// context, the one the CUDA runtime (and so cuBLAS) uses too, which is what
// lets driver-API streams and cuBLAS handles mix.
func (l *Lib) PrimaryCtxRetain(d Device) (*Ctx, error) {
	v, err := l.outInvoke(nil, symDevicePrimaryCtxRetain, uintptr(d))
	if err != nil {
		return nil, err
	}
	return &Ctx{lib: l, h: Context(v), dev: d, primary: true}, nil
}

// Release is cuDevicePrimaryCtxRelease_v2 for a primary context.
func (c *Ctx) Release() error {
	if !c.primary || c.h == 0 {
		return nil
	}
	err := c.lib.invoke(nil, symDevicePrimaryCtxRelease, uintptr(c.dev))
	c.h = 0
	return err
}

// Lib is the library the context belongs to.
func (c *Ctx) Lib() *Lib { return c.lib }

// Handle is the CUcontext.
func (c *Ctx) Handle() Context { return c.h }

// Device is the context's device.
func (c *Ctx) Device() Device { return c.dev }

// MakeCurrent makes the context current on the calling thread
// (cuCtxSetCurrent, after a cuCtxGetCurrent check as in every Ctx call).
// The caller must hold runtime.LockOSThread from before this call until
// after the calls that need the context (cuBLAS calls, for instance).
func (c *Ctx) MakeCurrent() error {
	_, err := c.Bind()
	return err
}

// Bind is MakeCurrent that returns the context current before, for
// Unbind once the calls that need c are made: a caller's own context on
// a thread it locked is then theirs again after rocsync's calls.
func (c *Ctx) Bind() (prev Context, err error) {
	b := blocks.Get()
	r, prev := c.lib.currentIn(b, c)
	blocks.Put(b)
	return prev, c.lib.check(symCtxSetCurrent, r)
}

// Unbind puts back the context Bind found current, where it was another
// than c (a thread that had none keeps c). The thread is still locked.
func (c *Ctx) Unbind(prev Context) {
	if prev != 0 && prev != c.h {
		b := blocks.Get()
		c.lib.restoreIn(b, c, prev)
		blocks.Put(b)
	}
}

// Synchronize is cuCtxSynchronize.
func (c *Ctx) Synchronize() error { return c.lib.invoke(c, symCtxSynchronize) }

// StreamCreate is cuStreamCreate in this context.
func (c *Ctx) StreamCreate(flags uint32) (Stream, error) {
	v, err := c.lib.outInvoke(c, symStreamCreate, uintptr(flags))
	return Stream(v), err
}

// StreamDestroy is cuStreamDestroy_v2.
func (c *Ctx) StreamDestroy(s Stream) error { return c.lib.invoke(c, symStreamDestroy, uintptr(s)) }

// StreamSynchronize is cuStreamSynchronize; stream 0 is the context's
// legacy default stream.
func (c *Ctx) StreamSynchronize(s Stream) error {
	return c.lib.invoke(c, symStreamSynchronize, uintptr(s))
}

// StreamQuery is cuStreamQuery (ErrorNotReady while work is pending).
func (c *Ctx) StreamQuery(s Stream) error { return c.lib.invoke(c, symStreamQuery, uintptr(s)) }

// EventCreate is cuEventCreate in this context.
func (c *Ctx) EventCreate(flags uint32) (Event, error) {
	v, err := c.lib.outInvoke(c, symEventCreate, uintptr(flags))
	return Event(v), err
}

// EventDestroy is cuEventDestroy_v2.
func (c *Ctx) EventDestroy(e Event) error { return c.lib.invoke(c, symEventDestroy, uintptr(e)) }

// EventRecord is cuEventRecord.
func (c *Ctx) EventRecord(e Event, s Stream) error {
	return c.lib.invoke(c, symEventRecord, uintptr(e), uintptr(s))
}

// EventQuery is cuEventQuery (ErrorNotReady before the event is reached).
func (c *Ctx) EventQuery(e Event) error { return c.lib.invoke(c, symEventQuery, uintptr(e)) }

// EventSynchronize is cuEventSynchronize. The OS thread is held while it
// waits, as with any blocking C call.
func (c *Ctx) EventSynchronize(e Event) error {
	return c.lib.invoke(c, symEventSynchronize, uintptr(e))
}

// EventElapsedTime is cuEventElapsedTime: milliseconds from start's newest
// record to stop's, both reached (ErrorNotReady before); events created
// with EventDisableTiming are refused (ErrorInvalidHandle).
func (c *Ctx) EventElapsedTime(start, stop Event) (float32, error) {
	v, err := c.lib.outInvoke(c, symEventElapsedTime, uintptr(start), uintptr(stop))
	return math.Float32frombits(uint32(v)), err
}

// StreamWaitEvent is cuStreamWaitEvent(s, e, 0).
func (c *Ctx) StreamWaitEvent(s Stream, e Event) error {
	return c.lib.invoke(c, symStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

// MemAlloc is cuMemAlloc_v2 in this context.
func (c *Ctx) MemAlloc(size uint64) (DevicePtr, error) {
	v, err := c.lib.outInvoke(c, symMemAlloc, uintptr(size))
	return DevicePtr(v), err
}

// MemFree is cuMemFree_v2.
func (c *Ctx) MemFree(p DevicePtr) error { return c.lib.invoke(c, symMemFree, uintptr(p)) }

// MemcpyHtoD is cuMemcpyHtoD_v2 followed by a synchronization of the
// context's legacy default stream, which the copy runs on. From pageable
// memory cuMemcpyHtoD may return once the data is staged, before the DMA to
// dst is done, and rocsync's streams are non-blocking, so without it a
// kernel queued right after could read dst too early. When this returns,
// dst holds the data.
func (c *Ctx) MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, size uint64) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.lib.CtxSetCurrent(c.h); err != nil {
		return err
	}
	r, _, _ := purego.SyscallN(c.lib.sym[symMemcpyHtoD], uintptr(dst), uintptr(src), uintptr(size))
	if err := c.lib.check(symMemcpyHtoD, r); err != nil {
		return err
	}
	return c.lib.invoke(nil, symStreamSynchronize, 0)
}

// MemcpyDtoH is cuMemcpyDtoH_v2; it returns once the data is in dst. It is
// not ordered after work on non-blocking streams: wait for that first.
func (c *Ctx) MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, size uint64) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.lib.CtxSetCurrent(c.h); err != nil {
		return err
	}
	r, _, _ := purego.SyscallN(c.lib.sym[symMemcpyDtoH], uintptr(dst), uintptr(src), uintptr(size))
	return c.lib.check(symMemcpyDtoH, r)
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync_v2 on s. src must be pinned
// (MemHostAlloc) and unchanged until the copy completes.
func (c *Ctx) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, size uint64, s Stream) error {
	return c.lib.invoke(c, symMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(size), uintptr(s))
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync_v2 on s, into pinned memory.
func (c *Ctx) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, size uint64, s Stream) error {
	return c.lib.invoke(c, symMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(size), uintptr(s))
}

// MemcpyDtoDAsync is cuMemcpyDtoDAsync_v2 on s.
func (c *Ctx) MemcpyDtoDAsync(dst, src DevicePtr, size uint64, s Stream) error {
	return c.lib.invoke(c, symMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(size), uintptr(s))
}

// MemHostAllocPortable is CU_MEMHOSTALLOC_PORTABLE.
const MemHostAllocPortable = 0x01

// MemHostAlloc is cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE): page-locked
// host memory the copies of every context can use asynchronously. Without
// PORTABLE it is pinned for this context only, and another context's
// cuMemcpyHtoDAsync would treat it as pageable and read it at the call,
// before the copy it is ordered after has filled it (a copy between GPUs
// staged through it).
func (c *Ctx) MemHostAlloc(size uint64) (unsafe.Pointer, error) {
	v, err := c.lib.outInvoke(c, symMemHostAlloc, uintptr(size), MemHostAllocPortable)
	if err != nil {
		return nil, err
	}
	return cmem.Ptr(uintptr(v)), nil
}

// EnablePeerAccess is cuCtxEnablePeerAccess(peer, 0) with c current: c's
// kernels and copies may then touch peer's memory. A pair already enabled
// is an *Error with ErrorPeerAccessAlreadyEnabled.
func (c *Ctx) EnablePeerAccess(peer *Ctx) error {
	return c.lib.invoke(c, symCtxEnablePeerAccess, uintptr(peer.h), 0)
}

// MemcpyPeerAsync is cuMemcpyPeerAsync on s: size bytes from src in
// srcCtx to dst in dstCtx.
func (c *Ctx) MemcpyPeerAsync(dst DevicePtr, dstCtx *Ctx, src DevicePtr, srcCtx *Ctx, size uint64, s Stream) error {
	return c.lib.invoke(c, symMemcpyPeerAsync, uintptr(dst), uintptr(dstCtx.h), uintptr(src), uintptr(srcCtx.h), uintptr(size), uintptr(s))
}

// MemFreeHost is cuMemFreeHost.
func (c *Ctx) MemFreeHost(p unsafe.Pointer) error { return c.lib.invoke(c, symMemFreeHost, uintptr(p)) }

// ModuleLoadData is cuModuleLoadData in this context (see
// Lib.ModuleLoadData).
func (c *Ctx) ModuleLoadData(image []byte) (Module, error) { return c.lib.moduleLoad(c, image) }

// ModuleUnload is cuModuleUnload in this context.
func (c *Ctx) ModuleUnload(m Module) error { return c.lib.moduleUnload(c, m) }

// ModuleGetFunction is cuModuleGetFunction in this context.
func (c *Ctx) ModuleGetFunction(m Module, name string) (Function, error) {
	return c.lib.moduleGetFunction(c, m, name)
}

// LaunchKernel is cuLaunchKernel in this context (see Lib.LaunchKernel).
// It allocates nothing.
func (c *Ctx) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params uintptr) error {
	return c.lib.invoke(c, symLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedMem), uintptr(s), params, 0)
}

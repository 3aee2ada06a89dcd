package cudadev

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
)

// backend is every CUDA and cuBLAS call the driver makes, for one device.
// The real one (cudaBackend) goes through the cuda and cublas bindings; the
// tests substitute an emulated one to check the timeline logic, the
// policies and the results without a GPU. Handles are plain integers
// (CUstream, CUevent, CUfunction, cublasHandle_t).
type backend interface {
	streamCreate() (uintptr, error)
	streamDestroy(s uintptr) error
	// streamQuery reports whether all work on s is done.
	streamQuery(s uintptr) (bool, error)
	// streamSynchronize waits on the host for all work on s.
	streamSynchronize(s uintptr) error
	eventCreate() (uintptr, error)
	eventDestroy(e uintptr) error
	eventRecord(e, s uintptr) error
	// eventQuery reports whether the work before e's newest record is done.
	eventQuery(e uintptr) (bool, error)
	eventSynchronize(e uintptr) error
	streamWaitEvent(s, e uintptr) error

	malloc(size uint64) (driver.DevicePtr, error)
	free(p driver.DevicePtr) error
	copyHtoD(dst driver.DevicePtr, src unsafe.Pointer, size uint64) error
	copyDtoH(dst unsafe.Pointer, src driver.DevicePtr, size uint64) error

	// loadModule loads the PTX (NUL-terminated) once; function looks up
	// an entry in it.
	loadModule(ptx []byte) error
	function(name string) (uintptr, error)
	// launch runs fn over grid blocks of block threads on s, with the
	// kernel arguments in pb.
	launch(fn uintptr, grid, block [3]uint32, s uintptr, pb *cuda.ParamBlock) error
	// loadImage loads a user module (PTX, NUL-terminated); functionIn
	// looks up an entry in it.
	loadImage(image []byte) (uint64, error)
	functionIn(module uint64, name string) (uintptr, error)

	// copyAsync enqueues an asynchronous copy on s, the way dir says;
	// host is the pinned side.
	copyAsync(dir driver.CopyDirection, dst, src driver.DevicePtr, host unsafe.Pointer, size uint64, s uintptr) error
	hostAlloc(size uint64) (unsafe.Pointer, error)
	hostFree(p unsafe.Pointer) error
	// streamMemOps is nil when streams can wait on the device for a
	// 64-bit word in mapped host memory (cuStreamWaitValue64), else why
	// not; mappedAlloc allocates such memory (freed by hostFree), and
	// streamWaitValueGEQ makes s wait until the word at addr is >= value.
	streamMemOps() error
	mappedAlloc(size uint64) (host unsafe.Pointer, dev driver.DevicePtr, err error)
	streamWaitValueGEQ(s uintptr, addr driver.DevicePtr, value uint64) error
	// streamWriteSupport is nil when streams can write a 64-bit word of
	// mapped host memory after their work (cuStreamWriteValue64), else
	// why not; streamWriteValue enqueues such a write of value on s.
	streamWriteSupport() error
	streamWriteValue(s uintptr, addr driver.DevicePtr, value uint64) error
	// call runs a library call's function with the device's context
	// current on a locked OS thread: CUDA libraries (cuBLAS, cuFFT,
	// cuDNN) act in the calling thread's context.
	call(fn func(stream uintptr) error, s uintptr) error

	// blasError is nil when cuBLAS is available, else why not.
	blasError() error
	// blasCreate makes a cuBLAS handle bound to stream s.
	blasCreate(s uintptr) (uintptr, error)
	blasDestroy(h uintptr) error
	gemm(h uintptr, dt kernels.DType, transA, transB bool, m, n, k int, alpha float64,
		a driver.DevicePtr, lda int, b driver.DevicePtr, ldb int, beta float64, c driver.DevicePtr, ldc int) error

	// Stream capture and graphs (replay.go): what s's calls enqueue
	// between captureBegin and captureEnd is recorded into a graph;
	// graphInstantiate makes it launchable and destroys the graph.
	captureBegin(s uintptr) error
	captureEnd(s uintptr) (graph uintptr, err error)
	graphInstantiate(graph uintptr) (exec uintptr, err error)
	// graphDestroy destroys a graph that will not be instantiated.
	graphDestroy(graph uintptr) error
	graphLaunch(exec, s uintptr) error
	graphExecDestroy(exec uintptr) error
	// blasSetStream binds a cuBLAS handle to stream s.
	blasSetStream(h, s uintptr) error

	close() error
}

// cudaBackend is a backend on the real driver: one device's primary
// context, retained on first use (so that opening every GPU of a machine to
// use one costs no context on the others), plus cuBLAS.
type cudaBackend struct {
	lib     *cuda.Lib
	dev     cuda.Device
	blas    *cublas.Lib // nil when cuBLAS could not be loaded
	blasErr error

	ctxMu sync.Mutex
	ctx   atomic.Pointer[cuda.Ctx]

	module cuda.Module

	userMu      sync.Mutex
	userModules []cuda.Module // user kernels' modules, unloaded at close
}

var _ backend = (*cudaBackend)(nil)

// context returns the device's primary context, retaining it on first use.
func (b *cudaBackend) context() (*cuda.Ctx, error) {
	if c := b.ctx.Load(); c != nil {
		return c, nil
	}
	b.ctxMu.Lock()
	defer b.ctxMu.Unlock()
	if c := b.ctx.Load(); c != nil {
		return c, nil
	}
	c, err := b.lib.PrimaryCtxRetain(b.dev)
	if err != nil {
		return nil, fmt.Errorf("cudadev: retaining the primary context of CUDA device %d: %w", b.dev, err)
	}
	b.ctx.Store(c)
	return c, nil
}

func (b *cudaBackend) streamCreate() (uintptr, error) {
	c, err := b.context()
	if err != nil {
		return 0, err
	}
	s, err := c.StreamCreate(cuda.StreamNonBlocking)
	return uintptr(s), err
}

// The calls on handles run only after streamCreate or eventCreate has
// retained the context, so they load it without the error path.

func (b *cudaBackend) streamDestroy(s uintptr) error {
	return b.ctx.Load().StreamDestroy(cuda.Stream(s))
}

func (b *cudaBackend) streamQuery(s uintptr) (bool, error) {
	return done(b.ctx.Load().StreamQuery(cuda.Stream(s)))
}

func (b *cudaBackend) streamSynchronize(s uintptr) error {
	return b.ctx.Load().StreamSynchronize(cuda.Stream(s))
}

// done turns a query result into (complete, error).
func done(err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	if e, ok := err.(*cuda.Error); ok && e.Code == cuda.ErrorNotReady {
		return false, nil
	}
	return false, err
}

func (b *cudaBackend) eventCreate() (uintptr, error) {
	c, err := b.context()
	if err != nil {
		return 0, err
	}
	e, err := c.EventCreate(cuda.EventDisableTiming)
	return uintptr(e), err
}

var _ timingBackend = (*cudaBackend)(nil)

// timingEventCreate makes an event with timing on (flags 0), for the
// trace's device timestamps.
func (b *cudaBackend) timingEventCreate() (uintptr, error) {
	c, err := b.context()
	if err != nil {
		return 0, err
	}
	e, err := c.EventCreate(0)
	return uintptr(e), err
}

// eventElapsed is cuEventElapsedTime (float milliseconds, about 0.5 µs
// resolution per the CUDA documentation).
func (b *cudaBackend) eventElapsed(start, stop uintptr) (time.Duration, error) {
	ms, err := b.ctx.Load().EventElapsedTime(cuda.Event(start), cuda.Event(stop))
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

func (b *cudaBackend) eventDestroy(e uintptr) error { return b.ctx.Load().EventDestroy(cuda.Event(e)) }

func (b *cudaBackend) eventRecord(e, s uintptr) error {
	return b.ctx.Load().EventRecord(cuda.Event(e), cuda.Stream(s))
}

func (b *cudaBackend) eventQuery(e uintptr) (bool, error) {
	return done(b.ctx.Load().EventQuery(cuda.Event(e)))
}

func (b *cudaBackend) eventSynchronize(e uintptr) error {
	return b.ctx.Load().EventSynchronize(cuda.Event(e))
}

func (b *cudaBackend) streamWaitEvent(s, e uintptr) error {
	return b.ctx.Load().StreamWaitEvent(cuda.Stream(s), cuda.Event(e))
}

func (b *cudaBackend) malloc(size uint64) (driver.DevicePtr, error) {
	c, err := b.context()
	if err != nil {
		return 0, err
	}
	p, err := c.MemAlloc(size)
	return driver.DevicePtr(p), err
}

func (b *cudaBackend) free(p driver.DevicePtr) error {
	c, err := b.context()
	if err != nil {
		return err
	}
	return c.MemFree(cuda.DevicePtr(p))
}

func (b *cudaBackend) copyHtoD(dst driver.DevicePtr, src unsafe.Pointer, size uint64) error {
	c, err := b.context()
	if err != nil {
		return err
	}
	return c.MemcpyHtoD(cuda.DevicePtr(dst), src, size)
}

func (b *cudaBackend) copyDtoH(dst unsafe.Pointer, src driver.DevicePtr, size uint64) error {
	c, err := b.context()
	if err != nil {
		return err
	}
	return c.MemcpyDtoH(dst, cuda.DevicePtr(src), size)
}

func (b *cudaBackend) loadModule(ptx []byte) error {
	c, err := b.context()
	if err != nil {
		return err
	}
	m, err := c.ModuleLoadData(ptx)
	if err != nil {
		return err
	}
	b.module = m
	return nil
}

func (b *cudaBackend) function(name string) (uintptr, error) {
	f, err := b.ctx.Load().ModuleGetFunction(b.module, name)
	return uintptr(f), err
}

func (b *cudaBackend) launch(fn uintptr, grid, block [3]uint32, s uintptr, pb *cuda.ParamBlock) error {
	return b.ctx.Load().LaunchKernel(cuda.Function(fn), cuda.Dim3{X: grid[0], Y: grid[1], Z: grid[2]},
		cuda.Dim3{X: block[0], Y: block[1], Z: block[2]}, 0, cuda.Stream(s), pb.Params())
}

func (b *cudaBackend) loadImage(image []byte) (uint64, error) {
	c, err := b.context()
	if err != nil {
		return 0, err
	}
	m, err := c.ModuleLoadData(image)
	if err != nil {
		return 0, err
	}
	b.userMu.Lock()
	b.userModules = append(b.userModules, m)
	b.userMu.Unlock()
	return uint64(m), nil
}

func (b *cudaBackend) functionIn(module uint64, name string) (uintptr, error) {
	f, err := b.ctx.Load().ModuleGetFunction(cuda.Module(module), name)
	return uintptr(f), err
}

func (b *cudaBackend) copyAsync(dir driver.CopyDirection, dst, src driver.DevicePtr, host unsafe.Pointer, size uint64, s uintptr) error {
	c := b.ctx.Load()
	switch dir {
	case driver.HostToDevice:
		return c.MemcpyHtoDAsync(cuda.DevicePtr(dst), host, size, cuda.Stream(s))
	case driver.DeviceToHost:
		return c.MemcpyDtoHAsync(host, cuda.DevicePtr(src), size, cuda.Stream(s))
	case driver.DeviceToDevice:
		return c.MemcpyDtoDAsync(cuda.DevicePtr(dst), cuda.DevicePtr(src), size, cuda.Stream(s))
	}
	return fmt.Errorf("%w: copy of direction %d", driver.ErrUnsupported, dir)
}

func (b *cudaBackend) hostAlloc(size uint64) (unsafe.Pointer, error) {
	c, err := b.context()
	if err != nil {
		return nil, err
	}
	return c.MemHostAlloc(size)
}

// bind locks the goroutine to its thread and makes c current there, for
// calls of libraries that run in the thread's context (cuBLAS, a library
// call's function); unbind, deferred, puts back the caller's own context
// (cuda.Ctx.Unbind) and unlocks.
func bind(c *cuda.Ctx) (prev cuda.Context, err error) {
	runtime.LockOSThread()
	if prev, err = c.Bind(); err != nil {
		runtime.UnlockOSThread()
	}
	return prev, err
}

func unbind(c *cuda.Ctx, prev cuda.Context) {
	c.Unbind(prev)
	runtime.UnlockOSThread()
}

func (b *cudaBackend) call(fn func(stream uintptr) error, s uintptr) error {
	c := b.ctx.Load()
	prev, err := bind(c)
	if err != nil {
		return err
	}
	defer unbind(c, prev)
	return fn(s)
}

func (b *cudaBackend) hostFree(p unsafe.Pointer) error { return b.ctx.Load().MemFreeHost(p) }

func (b *cudaBackend) streamMemOps() error {
	if !b.lib.HasStreamMemOps() {
		return errors.New("the driver lacks cuStreamWaitValue64_v2 (CUDA 11.7 and later)")
	}
	v, err := b.lib.DeviceAttribute(b.dev, cuda.AttrCanUse64BitStreamMemOps)
	if err != nil {
		return fmt.Errorf("asking CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: %w", err)
	}
	if v == 0 {
		return errors.New("the device does not support 64-bit stream memory operations")
	}
	return nil
}

func (b *cudaBackend) streamWriteSupport() error {
	if !b.lib.HasStreamWriteValue() {
		return errors.New("the driver lacks cuStreamWriteValue64_v2 (CUDA 11.7 and later)")
	}
	return b.streamMemOps()
}

func (b *cudaBackend) streamWriteValue(s uintptr, addr driver.DevicePtr, value uint64) error {
	return b.ctx.Load().StreamWriteValue64(cuda.Stream(s), cuda.DevicePtr(addr), value)
}

func (b *cudaBackend) mappedAlloc(size uint64) (unsafe.Pointer, driver.DevicePtr, error) {
	c, err := b.context()
	if err != nil {
		return nil, 0, err
	}
	p, err := c.MemHostAllocFlags(size, cuda.MemHostAllocDeviceMap)
	if err != nil {
		return nil, 0, err
	}
	dp, err := c.MemHostGetDevicePointer(p)
	if err != nil {
		_ = c.MemFreeHost(p)
		return nil, 0, err
	}
	return p, driver.DevicePtr(dp), nil
}

func (b *cudaBackend) streamWaitValueGEQ(s uintptr, addr driver.DevicePtr, value uint64) error {
	return b.ctx.Load().StreamWaitValue64(cuda.Stream(s), cuda.DevicePtr(addr), value, cuda.StreamWaitValueGEQ)
}

func (b *cudaBackend) blasError() error { return b.blasErr }

// blasCreate creates the handle with the context current on this thread,
// as cuBLAS requires, and binds it to s.
func (b *cudaBackend) blasCreate(s uintptr) (uintptr, error) {
	if b.blas == nil {
		return 0, b.blasErr
	}
	c, err := b.context()
	if err != nil {
		return 0, err
	}
	prev, err := bind(c)
	if err != nil {
		return 0, err
	}
	defer unbind(c, prev)
	h, err := b.blas.Create()
	if err != nil {
		return 0, err
	}
	if err := b.blas.SetStream(h, cuda.Stream(s)); err != nil {
		_ = b.blas.Destroy(h)
		return 0, err
	}
	return uintptr(h), nil
}

func (b *cudaBackend) blasDestroy(h uintptr) error {
	c := b.ctx.Load()
	prev, err := bind(c)
	if err != nil {
		return err
	}
	defer unbind(c, prev)
	return b.blas.Destroy(cublas.Handle(h))
}

// gemm locks the OS thread and makes the context current around the cuBLAS
// call: cuBLAS runs in the calling thread's context.
func (b *cudaBackend) gemm(h uintptr, dt kernels.DType, transA, transB bool, m, n, k int, alpha float64,
	a driver.DevicePtr, lda int, bm driver.DevicePtr, ldb int, beta float64, c driver.DevicePtr, ldc int) error {
	opA, opB := cublas.OpN, cublas.OpN
	if transA {
		opA = cublas.OpT
	}
	if transB {
		opB = cublas.OpT
	}
	ctx := b.ctx.Load()
	prev, err := bind(ctx)
	if err != nil {
		return err
	}
	defer unbind(ctx, prev)
	if dt == kernels.F32 {
		return b.blas.Sgemm(cublas.Handle(h), opA, opB, m, n, k, float32(alpha),
			cuda.DevicePtr(a), lda, cuda.DevicePtr(bm), ldb, float32(beta), cuda.DevicePtr(c), ldc)
	}
	return b.blas.Dgemm(cublas.Handle(h), opA, opB, m, n, k, alpha,
		cuda.DevicePtr(a), lda, cuda.DevicePtr(bm), ldb, beta, cuda.DevicePtr(c), ldc)
}

func (b *cudaBackend) captureBegin(s uintptr) error {
	return b.ctx.Load().BeginCapture(cuda.Stream(s), cuda.CaptureModeRelaxed)
}

func (b *cudaBackend) captureEnd(s uintptr) (uintptr, error) {
	g, err := b.ctx.Load().EndCapture(cuda.Stream(s))
	return uintptr(g), err
}

func (b *cudaBackend) graphInstantiate(g uintptr) (uintptr, error) {
	c := b.ctx.Load()
	e, err := c.GraphInstantiate(cuda.Graph(g))
	return uintptr(e), errors.Join(err, c.GraphDestroy(cuda.Graph(g)))
}

func (b *cudaBackend) graphDestroy(g uintptr) error {
	return b.ctx.Load().GraphDestroy(cuda.Graph(g))
}

func (b *cudaBackend) graphLaunch(e, s uintptr) error {
	return b.ctx.Load().GraphLaunch(cuda.GraphExec(e), cuda.Stream(s))
}

func (b *cudaBackend) graphExecDestroy(e uintptr) error {
	return b.ctx.Load().GraphExecDestroy(cuda.GraphExec(e))
}

// blasSetStream binds h to s with the context current, as cuBLAS wants.
func (b *cudaBackend) blasSetStream(h, s uintptr) error {
	c := b.ctx.Load()
	prev, err := bind(c)
	if err != nil {
		return err
	}
	defer unbind(c, prev)
	return b.blas.SetStream(cublas.Handle(h), cuda.Stream(s))
}

func (b *cudaBackend) close() error {
	c := b.ctx.Load()
	if c == nil {
		return nil
	}
	var errs []error
	if b.module != 0 {
		errs = append(errs, c.ModuleUnload(b.module))
		b.module = 0
	}
	b.userMu.Lock()
	for _, m := range b.userModules {
		errs = append(errs, c.ModuleUnload(m))
	}
	b.userModules = nil
	b.userMu.Unlock()
	errs = append(errs, c.Release())
	b.ctx.Store(nil)
	return errors.Join(errs...)
}

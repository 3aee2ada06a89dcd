// Package cudadev is the CUDA family of rocsync drivers: it implements
// driver.Device and driver.Task on the CUDA driver API and cuBLAS (the cuda
// and cublas packages, purego, no cgo).
//
// The ROCm roles map onto CUDA streams. Each task has a kernel stream
// (syncstate.DomainKernel, where rocsync's elementwise kernels run, like the
// HSA queue on ROCm) and a library stream (syncstate.DomainLibrary, bound to
// the task's cuBLAS handle, like the HIP stream); under syncstate.Unified
// one stream serves both. All streams are CU_STREAM_NON_BLOCKING. Ordering
// between streams uses events (CU_EVENT_DISABLE_TIMING, pooled, recorded
// only when someone needs them) and cuStreamWaitEvent. Which crossings wait
// on the device is syncstate's policy: Timeline.CanWaitDevice says yes
// within a domain always and across the two domains only under
// DeviceBridge, so
//
//	WaitAlways     a host wait after every op
//	SkipSameQueue  a host wait at every crossing between streams
//	DeviceSide     events within a domain, a host wait kernel↔cuBLAS
//	DeviceBridge   events at every crossing
//	Unified        one stream per task; events between tasks
//
// Kernels come from the PTX embedded in package kernels (sm_90 on compute
// capability 9.x and later, sm_80 on 8.x), JIT-compiled by the driver when
// the device first launches one (Device.JITTime says how long that took).
package cudadev

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// ErrNoBLAS is returned by Gemm when cuBLAS could not be loaded; the error
// also wraps the reason (cublas.ErrNotFound, ...).
var ErrNoBLAS = errors.New("cudadev: cuBLAS is not loaded")

// BlockSize is the thread-block size of every kernel launch: 256, the
// largest the kernels were built for, as on AMD (kernels.DefaultWorkgroupSize).
const BlockSize = 256

// maxBlocks caps a launch's grid (2^24 threads, as on ROCm); the kernels
// loop over the rest with a grid stride.
const maxBlocks = (1 << 24) / BlockSize

// Open opens every CUDA device with the same configuration (so one
// cfg.Stats receives every device's counts). See OpenFunc.
func Open(cfg driver.DeviceConfig) ([]driver.Device, error) {
	return OpenFunc(func(int) driver.DeviceConfig { return cfg })
}

// OpenFunc loads libcuda (and, when it can, libcublas), calls cuInit and
// returns a driver.Device for every CUDA device, configured by configFor
// its ordinal. Without the driver the error matches cuda.ErrNoDriver; with
// no GPU, cuda.ErrNoDevice. A missing cuBLAS is not an error: Gemm then
// fails with ErrNoBLAS and everything else works. A device's primary
// context is retained only when the device is first used.
func OpenFunc(configFor func(index int) driver.DeviceConfig) ([]driver.Device, error) {
	lib, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	if err := lib.Init(); err != nil {
		return nil, err
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, err
	}
	blas, blasErr := cublas.Open()
	var devs []driver.Device
	for i := 0; i < n; i++ {
		d, err := openDevice(lib, blas, blasErr, i, configFor(i))
		if err != nil {
			for _, x := range devs {
				_ = x.Close()
			}
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func openDevice(lib *cuda.Lib, blas *cublas.Lib, blasErr error, i int, cfg driver.DeviceConfig) (*Device, error) {
	cd, err := lib.DeviceGet(i)
	if err != nil {
		return nil, err
	}
	name, err := lib.DeviceName(cd)
	if err != nil {
		return nil, err
	}
	major, minor, err := lib.ComputeCapability(cd)
	if err != nil {
		return nil, err
	}
	b := &cudaBackend{lib: lib, dev: cd, blas: blas}
	if blas == nil {
		b.blasErr = fmt.Errorf("%w: %w", ErrNoBLAS, blasErr)
	}
	return newDevice(b, cfg, i, name, major, minor)
}

// ptxArch picks the embedded PTX for a compute capability: the newest one
// not above it (PTX JIT-compiles forward, not backward).
func ptxArch(major, minor int) (string, error) {
	cc := major*10 + minor
	best, bestCC := "", 0
	for _, a := range kernels.PTXTargets() {
		var v int
		if _, err := fmt.Sscanf(a, "sm_%d", &v); err == nil && v <= cc && v > bestCC {
			best, bestCC = a, v
		}
	}
	if best == "" {
		return "", &kernels.UnsupportedTargetError{ISA: fmt.Sprintf("sm_%d%d", major, minor), Supported: kernels.PTXTargets()}
	}
	return best, nil
}

// Device is one CUDA GPU.
type Device struct {
	b       backend
	cfg     driver.DeviceConfig
	index   int
	name    string
	major   int
	minor   int
	ptxArch string
	api     stream.API
	events  *stream.EventPool
	tasks   atomic.Int64

	kmu     sync.Mutex
	kready  atomic.Bool
	kerr    error
	jit     time.Duration
	funcs   [kernels.NumOps][2]uintptr // by op, then by DType (F32, F64)
	offsets []int
}

var _ driver.Device = (*Device)(nil)

func newDevice(b backend, cfg driver.DeviceConfig, index int, name string, major, minor int) (*Device, error) {
	arch, err := ptxArch(major, minor)
	if err != nil {
		return nil, fmt.Errorf("cudadev: %s (CUDA device %d): %w", name, index, err)
	}
	d := &Device{b: b, cfg: cfg, index: index, name: name, major: major, minor: minor, ptxArch: arch,
		api: streamAPI{b}}
	d.events = stream.NewEventPool(d.api)
	for _, s := range kernels.Layout {
		d.offsets = append(d.offsets, int(s.Offset))
	}
	return d, nil
}

// Target implements driver.Device: the GPU's architecture, "sm_90" on an
// H100.
func (d *Device) Target() string { return fmt.Sprintf("sm_%d%d", d.major, d.minor) }

// PTXArch is the embedded PTX the kernels are loaded from ("sm_90").
func (d *Device) PTXArch() string { return d.ptxArch }

// Name is the GPU's name (cuDeviceGetName).
func (d *Device) Name() string { return d.name }

// JITTime is how long loading the kernels' PTX took (cuModuleLoadData,
// which JIT-compiles it, plus the 24 cuModuleGetFunction calls), or 0
// before the first launch.
func (d *Device) JITTime() time.Duration {
	if !d.kready.Load() {
		return 0
	}
	return d.jit
}

// SignalsCreated implements driver.Device: CUDA has no signals.
func (d *Device) SignalsCreated() uint64 { return 0 }

// EventsCreated implements driver.Device: the events the pool ever created.
func (d *Device) EventsCreated() uint64 { return d.events.Created() }

// Malloc implements driver.Device with cuMemAlloc_v2.
func (d *Device) Malloc(size uint64) (driver.DevicePtr, error) { return d.b.malloc(size) }

// Free implements driver.Device with cuMemFree_v2.
func (d *Device) Free(p driver.DevicePtr) error { return d.b.free(p) }

// CopyHtoD implements driver.Device with cuMemcpyHtoD_v2 (complete when it
// returns; see cuda.Ctx.MemcpyHtoD).
func (d *Device) CopyHtoD(dst driver.DevicePtr, src unsafe.Pointer, size uint64) error {
	return d.b.copyHtoD(dst, src, size)
}

// CopyDtoH implements driver.Device with cuMemcpyDtoH_v2.
func (d *Device) CopyDtoH(dst unsafe.Pointer, src driver.DevicePtr, size uint64) error {
	return d.b.copyDtoH(dst, src, size)
}

// Close releases the events, the module and the primary context; the tasks
// must be closed first.
func (d *Device) Close() error {
	return errors.Join(d.events.Destroy(), d.b.close())
}

// function returns the kernel for op and dt, loading the module on first
// use.
func (d *Device) function(op kernels.Op, dt kernels.DType) (uintptr, error) {
	if !d.kready.Load() {
		if err := d.loadKernels(); err != nil {
			return 0, err
		}
	}
	if !op.Valid() || dt.Size() == 0 {
		return 0, fmt.Errorf("cudadev: no kernel for op %v, dtype %v", op, dt)
	}
	return d.funcs[op][dt], nil
}

func (d *Device) loadKernels() error {
	d.kmu.Lock()
	defer d.kmu.Unlock()
	if d.kready.Load() {
		return nil
	}
	if d.kerr != nil {
		return d.kerr
	}
	ptx, err := kernels.PTX(d.ptxArch)
	if err == nil {
		start := time.Now()
		if err = d.b.loadModule(ptx); err == nil {
		lookup:
			for _, op := range kernels.AllOps() {
				for _, dt := range kernels.AllDTypes() {
					if d.funcs[op][dt], err = d.b.function(op.KernelName(dt)); err != nil {
						err = fmt.Errorf("kernel %s: %w", op.KernelName(dt), err)
						break lookup
					}
				}
			}
		}
		d.jit = time.Since(start)
	}
	if err != nil {
		d.kerr = fmt.Errorf("cudadev: loading the %s kernels on %s: %w", d.ptxArch, d.name, err)
		return d.kerr
	}
	d.kready.Store(true)
	return nil
}

// Task is one task's kernel stream and library stream (one stream under
// Unified) with its cuBLAS handle and kernel parameter block.
type Task struct {
	d       *Device
	kernel  *stream.Stream
	library *stream.Stream
	params  *cuda.ParamBlock // kernel arguments, reused by every launch under the kernel stream's lock
	blas    uintptr          // the cuBLAS handle bound to the library stream, or 0
}

var _ driver.Task = (*Task)(nil)

// NewTask implements driver.Device.
func (d *Device) NewTask(sinks syncstate.Sinks) (driver.Task, error) {
	n := d.tasks.Add(1)
	t := &Task{d: d}
	var err error
	if t.params, err = cuda.NewParamBlock(kernels.KernargSize, d.offsets); err != nil {
		return nil, err
	}
	if t.library, err = d.newStream(fmt.Sprintf("gpu%d/cu-blas%d", d.index, n), syncstate.DomainLibrary, sinks); err != nil {
		_ = t.Close()
		return nil, err
	}
	if d.cfg.Policy == syncstate.Unified {
		t.kernel = t.library
	} else if t.kernel, err = d.newStream(fmt.Sprintf("gpu%d/cu-kern%d", d.index, n), syncstate.DomainKernel, sinks); err != nil {
		_ = t.Close()
		return nil, err
	}
	if d.b.blasError() == nil {
		if t.blas, err = d.b.blasCreate(t.library.Handle()); err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("cudadev: creating a cuBLAS handle: %w", err)
		}
	}
	return t, nil
}

// newStream makes a CUDA stream. Under DeviceBridge the kernel and library
// streams wait for each other with events too: on CUDA both are streams.
func (d *Device) newStream(name string, dom syncstate.Domain, sinks syncstate.Sinks) (*stream.Stream, error) {
	s, err := d.b.streamCreate()
	if err != nil {
		return nil, fmt.Errorf("cudadev: creating a CUDA stream: %w", err)
	}
	return stream.New(d.api, s, stream.Config{Name: name, Domain: dom, Events: d.events, Sinks: sinks,
		CrossDomain: d.cfg.Policy == syncstate.DeviceBridge, WaitTimeout: d.cfg.WaitTimeout, MaxInFlight: d.cfg.MaxInFlight}), nil
}

// KernelTimeline implements driver.Task.
func (t *Task) KernelTimeline() syncstate.Timeline { return t.kernel }

// LibraryTimeline implements driver.Task.
func (t *Task) LibraryTimeline() syncstate.Timeline { return t.library }

// Kernel and Library return the task's streams.
func (t *Task) Kernel() *stream.Stream  { return t.kernel }
func (t *Task) Library() *stream.Stream { return t.library }

// Launch implements driver.Task: cuLaunchKernel on the kernel stream with
// ceil(n/256) blocks (at least 1, at most 2^16) of 256 threads. The
// arguments are encoded into the stream's parameter block, whose pointer
// array is the kernelParams; the driver copies the values, so the block is
// reused by the next launch. It allocates nothing.
func (t *Task) Launch(op kernels.Op, dt kernels.DType, args kernels.Args) (uint64, error) {
	fn, err := t.d.function(op, dt)
	if err != nil {
		return 0, err
	}
	blocks := min(max((args.N+BlockSize-1)/BlockSize, 1), maxBlocks)
	return t.kernel.Submit(func(s uintptr) error {
		args.Encode(t.params.Bytes(), dt)
		return t.d.b.launch(fn, uint32(blocks), BlockSize, s, t.params)
	})
}

// Gemm implements driver.Task: cublasSgemm_v2 or cublasDgemm_v2 on the
// library stream, column-major, alpha and beta by host pointer.
func (t *Task) Gemm(dt kernels.DType, transA, transB bool, m, n, k int, alpha float64,
	a driver.DevicePtr, lda int, b driver.DevicePtr, ldb int, beta float64, c driver.DevicePtr, ldc int) (uint64, error) {
	if t.blas == 0 {
		if err := t.d.b.blasError(); err != nil {
			return 0, err
		}
		return 0, ErrNoBLAS
	}
	if dt.Size() == 0 {
		return 0, fmt.Errorf("cudadev: gemm of dtype %v", dt)
	}
	return t.library.Submit(func(uintptr) error {
		return t.d.b.gemm(t.blas, dt, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}

// Close implements driver.Task: it drains both streams and releases them
// and the cuBLAS handle.
func (t *Task) Close() error {
	var errs []error
	if t.library != nil && t.blas != 0 {
		// Drain first: destroying the handle does not wait for its work.
		errs = append(errs, t.library.Drain(), t.d.b.blasDestroy(t.blas))
		t.blas = 0
	}
	if t.kernel != nil && t.kernel != t.library {
		errs = append(errs, t.kernel.Close())
	}
	t.kernel = nil
	if t.library != nil {
		errs = append(errs, t.library.Close())
		t.library = nil
	}
	if t.params != nil {
		t.params.Free()
		t.params = nil
	}
	return errors.Join(errs...)
}

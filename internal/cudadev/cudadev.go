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
	"github.com/rocsync/rocsync/hostlane"

	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/testhooks"
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
// context is retained only when the device is first used. With the test
// switch testhooks.Switches.CUDAEmulator on, it returns one device of the
// Go emulator (emulator.go) instead.
func OpenFunc(configFor func(index int) driver.DeviceConfig) ([]driver.Device, error) {
	if testhooks.Switches.CUDAEmulator.Load() {
		return openEmulated(configFor)
	}
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
	place   uint64 // syncstate.Placed: this device's timelines

	kmu     sync.Mutex
	kready  atomic.Bool
	kerr    error
	jit     time.Duration
	funcs   [kernels.NumOps][2]uintptr // by op, then by DType (F32, F64)
	builtin [kernels.NumOps][2]driver.LoadedKernel
	offsets []int

	reductions driver.ReductionCache    // reduce.go
	peers      driver.PeerMemo[*Device] // peer.go
	hostWords  laneWords                // hostwait.go
	watches    streamWatches            // watch.go
}

var (
	_ driver.Device       = (*Device)(nil)
	_ driver.KernelLoader = (*Device)(nil)
	_ driver.HostMemory   = (*Device)(nil)
)

func newDevice(b backend, cfg driver.DeviceConfig, index int, name string, major, minor int) (*Device, error) {
	arch, err := ptxArch(major, minor)
	if err != nil {
		return nil, fmt.Errorf("cudadev: %s (CUDA device %d): %w", name, index, err)
	}
	d := &Device{b: b, cfg: cfg, index: index, name: name, major: major, minor: minor, ptxArch: arch,
		api: streamAPI{b}, place: syncstate.NewPlace()}
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
func (d *Device) Malloc(size uint64) (driver.DevicePtr, error) {
	p, err := d.b.malloc(size)
	if outOfMemory(err) {
		err = driver.WithKind(err, driver.ErrOutOfMemory)
	}
	return p, err
}

// outOfMemory reports whether an allocation failed for want of device
// memory (CUDA_ERROR_OUT_OF_MEMORY).
func outOfMemory(err error) bool { return errors.Is(err, &cuda.Error{Code: cuda.ErrorOutOfMemory}) }

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
// must be closed first. Close may run beside a task's first launch: it holds the kernel lock
// while it unloads, so a load in progress finishes first and is unloaded,
// and a later one finds the device closed and loads nothing.
func (d *Device) Close() error {
	d.kmu.Lock()
	defer d.kmu.Unlock()
	d.kerr = errClosed
	return errors.Join(d.events.Destroy(), d.freeLaneWords(), d.b.close())
}

// errClosed is a kernel load's answer after Close.
var errClosed = errors.New("cudadev: device closed")

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
					d.builtin[op][dt] = driver.LoadedKernel{Name: op.KernelName(dt), Object: uint64(d.funcs[op][dt]),
						ArgsSize: kernels.KernargSize, Workgroup: BlockSize, ParamOffsets: d.offsets}
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
	params  *cuda.ParamBlock // rocsync's kernels' arguments, reused by every launch under the kernel stream's lock
	// userParams are the parameter blocks of user kernels, one per
	// kernel (their layouts differ), made at the first launch.
	userParams map[*driver.LoadedKernel]*cuda.ParamBlock
	blas       uintptr           // the cuBLAS handle bound to the library stream, or 0
	dispatch   driver.DispatchOp // filled by Launch
	gemmOp     driver.GemmOp     // filled by Gemm
	// host is the task's host lane. CUDA streams wait for it on the host
	// (a boundary wait) by default; with
	// driver.DeviceConfig.StreamWaitsForHostLanes, and where stream memory
	// operations are supported, on the device instead, with
	// cuStreamWaitValue64 on a mapped word the lane publishes its tickets
	// to (hostwait.go).
	// cuLaunchHostFunc is not used: CUDA forbids CUDA calls in it.
	host *hostlane.Lane
	held stream.Holding // the library stream's hold (HoldLibrary)
}

var (
	_ driver.Task          = (*Task)(nil)
	_ driver.BLASHandler   = (*Task)(nil)
	_ driver.LibraryHolder = (*Task)(nil)
)

// ReadyLibrary implements driver.LibraryHolder: the throttle.
func (t *Task) ReadyLibrary() error { return t.library.Throttle() }

// HoldLibrary implements driver.LibraryHolder. The caller makes the
// call with a context current (Collectives.Group does).
func (t *Task) HoldLibrary() (uintptr, error) { return t.held.Hold(t.library) }

// ReleaseLibrary implements driver.LibraryHolder.
func (t *Task) ReleaseLibrary(enqueued bool) uint64 { return t.held.Release(t.library, enqueued) }

// NewTask implements driver.Device.
func (d *Device) NewTask(sinks syncstate.Sinks) (driver.Task, error) {
	n := d.tasks.Add(1)
	t := &Task{d: d}
	word, wordDev, err := d.newLaneWord()
	if err != nil {
		return nil, err
	}
	t.host = hostlane.New(hostlane.Config{Name: fmt.Sprintf("gpu%d/host%d", d.index, n), MaxPending: d.cfg.MaxInFlight,
		WaitTimeout: d.cfg.WaitTimeout, Sinks: sinks, OnThrottle: d.cfg.OnThrottle, Publish: word})
	if word != nil {
		d.registerLane(t.host, wordDev)
	}
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
	watch, err := d.newWatch()
	if err != nil {
		return nil, err
	}
	s, err := d.b.streamCreate()
	if err != nil {
		return nil, fmt.Errorf("cudadev: creating a CUDA stream: %w", err)
	}
	st := stream.New(d.api, s, stream.Config{Name: name, Domain: dom, Events: d.events, Sinks: sinks,
		CrossDomain: d.cfg.Policy == syncstate.DeviceBridge, WaitTimeout: d.cfg.WaitTimeout, MaxInFlight: d.cfg.MaxInFlight,
		OnThrottle: d.cfg.OnThrottle, Place: d.place, Watch: watch})
	if d.hostWaitSupport() == nil {
		st.SetHostBridge(d.hostToStream)
	}
	return st, nil
}

// Timeline implements driver.Task.
func (t *Task) Timeline(l driver.Lane) syncstate.Timeline {
	switch l {
	case driver.LaneKernel:
		return t.kernel
	case driver.LaneHost:
		return t.host
	}
	return t.library
}

// Kernel and Library return the task's streams.
func (t *Task) Kernel() *stream.Stream  { return t.kernel }
func (t *Task) Library() *stream.Stream { return t.library }

func (t *Task) lane(l driver.Lane) *stream.Stream {
	if l == driver.LaneKernel {
		return t.kernel
	}
	return t.library
}

// Builtin implements driver.Device, loading the module on first use.
func (d *Device) Builtin(op kernels.Op, dt kernels.DType) (*driver.LoadedKernel, error) {
	if _, err := d.function(op, dt); err != nil {
		return nil, err
	}
	return &d.builtin[op][dt], nil
}

// Submit implements driver.Task, one case per op type. A dispatch is
// cuLaunchKernel on the kernel stream with the grid counted in blocks; its
// argument block is copied into the kernel's parameter block (whose
// pointer array is the kernelParams) under the stream's lock, and the
// driver copies the values at the call, so the block is reused by the next
// launch. Copies are cuMemcpy*Async on the op's lane. It allocates nothing
// (a user kernel's parameter block is made at its first launch).
func (t *Task) Submit(o driver.Op) (uint64, error) {
	s := t.lane(o.Lane())
	switch op := o.(type) {
	case *driver.DispatchOp:
		k := op.Kernel
		if k == nil || k.Object == 0 {
			return 0, fmt.Errorf("%w: dispatch of no kernel", driver.ErrUnsupported)
		}
		pb, err := t.paramsFor(k)
		if err != nil {
			return 0, err
		}
		g := &op.Geometry
		var grid, block [3]uint32
		for i := range grid {
			// CUDA counts whole blocks: a partial last one becomes whole,
			// and the kernel's own bounds check covers the rest.
			block[i] = max(g.Workgroup[i], 1)
			grid[i] = (max(g.Grid[i], 1) + block[i] - 1) / block[i]
		}
		args := op.Args[:k.ArgsSize]
		fn := uintptr(k.Object)
		return t.kernel.Submit(func(s uintptr) error {
			copy(pb.Bytes(), args)
			return t.d.b.launch(fn, grid, block, s, pb)
		})
	case *driver.GemmOp:
		return t.gemm(op)
	case *driver.LibraryCallOp:
		if op.Call == nil {
			return 0, fmt.Errorf("%w: library call of no function", driver.ErrUnsupported)
		}
		call := op.Call
		return s.Submit(func(s uintptr) error { return t.d.b.call(call, s) })
	case *driver.CopyOp:
		if op.Kind() == driver.KindInvalid {
			return 0, fmt.Errorf("%w: copy of direction %d", driver.ErrUnsupported, op.Direction)
		}
		dir, dst, src, host, n := op.Direction, op.Dst, op.Src, op.Host, op.Size
		return s.Submit(func(s uintptr) error { return t.d.b.copyAsync(dir, dst, src, host, n, s) })
	case *driver.HostFuncOp:
		if op.Func == nil {
			return 0, fmt.Errorf("%w: host function of no function", driver.ErrUnsupported)
		}
		return t.host.Submit(op.Func)
	case *driver.ReplayOp:
		return t.replay(op)
	case *driver.PeerCopyOp:
		return t.submitPeerCopy(op, s)
	}
	return 0, fmt.Errorf("%w: %T", driver.ErrUnsupported, o)
}

// paramsFor returns the parameter block a kernel's launches use: the
// task's shared one for rocsync's kernels (one layout), one per user
// kernel otherwise.
func (t *Task) paramsFor(k *driver.LoadedKernel) (*cuda.ParamBlock, error) {
	if len(k.ParamOffsets) > 0 && len(t.d.offsets) > 0 && &k.ParamOffsets[0] == &t.d.offsets[0] {
		return t.params, nil
	}
	if pb := t.userParams[k]; pb != nil {
		return pb, nil
	}
	pb, err := cuda.NewParamBlock(int(max(k.ArgsSize, 1)), k.ParamOffsets)
	if err != nil {
		return nil, err
	}
	if t.userParams == nil {
		t.userParams = map[*driver.LoadedKernel]*cuda.ParamBlock{}
	}
	t.userParams[k] = pb
	return pb, nil
}

// Launch submits rocsync's kernel op for dt over args.N elements: ceil(n/256)
// blocks (at least 1, at most 2^16) of 256 threads.
func (t *Task) Launch(op kernels.Op, dt kernels.DType, args kernels.Args) (uint64, error) {
	return driver.LaunchBuiltin(t.d, t, &t.dispatch, op, dt, args)
}

// Gemm submits C = alpha·op(A)·op(B) + beta·C on the library stream.
func (t *Task) Gemm(dt kernels.DType, transA, transB bool, m, n, k int, alpha float64,
	a driver.DevicePtr, lda int, b driver.DevicePtr, ldb int, beta float64, c driver.DevicePtr, ldc int) (uint64, error) {
	t.gemmOp = driver.GemmOp{DType: dt, TransA: transA, TransB: transB,
		M: m, N: n, K: k, Alpha: alpha, A: a, LDA: lda, B: b, LDB: ldb, Beta: beta, C: c, LDC: ldc}
	return t.Submit(&t.gemmOp)
}

// gemm is cublasSgemm_v2 or cublasDgemm_v2 on the library stream,
// column-major, alpha and beta by host pointer.
func (t *Task) gemm(g *driver.GemmOp) (uint64, error) {
	if t.blas == 0 {
		if err := t.d.b.blasError(); err != nil {
			return 0, err
		}
		return 0, ErrNoBLAS
	}
	if g.DType.Size() == 0 {
		return 0, fmt.Errorf("cudadev: gemm of dtype %v", g.DType)
	}
	a := *g
	return t.library.Submit(func(uintptr) error {
		return t.d.b.gemm(t.blas, a.DType, a.TransA, a.TransB, a.M, a.N, a.K, a.Alpha, a.A, a.LDA, a.B, a.LDB, a.Beta, a.C, a.LDC)
	})
}

// BLASHandle implements driver.BLASHandler: the task's cuBLAS handle (0
// without cuBLAS), bound to its library stream.
func (t *Task) BLASHandle() uintptr { return t.blas }

// LoadModule implements driver.KernelLoader with cuModuleLoadData (PTX is
// JIT-compiled for the device in the call).
func (d *Device) LoadModule(image []byte) (uint64, error) { return d.b.loadImage(image) }

// Kernel implements driver.KernelLoader with cuModuleGetFunction.
func (d *Device) Kernel(module uint64, name string, argsSize uint32, paramOffsets []int) (*driver.LoadedKernel, error) {
	fn, err := d.b.functionIn(module, name)
	if err != nil {
		return nil, err
	}
	return &driver.LoadedKernel{Name: name, Object: uint64(fn), ArgsSize: argsSize, Workgroup: BlockSize,
		ParamOffsets: append([]int(nil), paramOffsets...)}, nil
}

// AcceptsCodeObject implements driver.KernelLoader: CUDA loads PTX, not
// AMD code objects, so the question does not arise.
func (d *Device) AcceptsCodeObject(kernels.CodeObjectVersion) bool { return true }

// HostAlloc implements driver.HostMemory with cuMemHostAlloc.
func (d *Device) HostAlloc(size uint64) (unsafe.Pointer, error) { return d.b.hostAlloc(size) }

// HostFree implements driver.HostMemory with cuMemFreeHost.
func (d *Device) HostFree(p unsafe.Pointer) error { return d.b.hostFree(p) }

// Close implements driver.Task: it drains both streams and releases them
// and the cuBLAS handle.
func (t *Task) Close() error {
	var errs []error
	if t.host != nil {
		// First: its functions may wait for the streams.
		errs = append(errs, t.host.Close())
		t.d.forgetLane(t.host)
		t.host = nil
	}
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
	for k, pb := range t.userParams {
		pb.Free()
		delete(t.userParams, k)
	}
	return errors.Join(errs...)
}

// Ordinal is the device's CUDA device number (what NCCL calls the device).
func (d *Device) Ordinal() int { return d.index }

// OnDevice runs fn on a locked OS thread with the device's context
// current, for C libraries that act on the calling thread's device, such
// as NCCL's ncclCommInitRank.
func (d *Device) OnDevice(fn func() error) error {
	return d.b.call(func(uintptr) error { return fn() }, 0)
}

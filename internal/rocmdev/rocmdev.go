// Package rocmdev is the ROCm family of rocsync drivers: it implements
// driver.Device and driver.Task on the hsa, hip and rocblas interfaces, so
// the same code drives the real libraries and the emulated device.
//
// Kernels go to HSA queues as AQL packets (queue/), library calls to HIP
// streams (stream/); under the Unified policy kernels are launched with
// hipModuleLaunchKernel on the task's stream instead.
package rocmdev

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/tls"
)

// Runtimes are the three libraries of one ROCm stack, real or emulated.
type Runtimes struct {
	HSA  hsa.Runtime
	HIP  hip.Runtime
	BLAS rocblas.Library // nil when rocBLAS is missing
	// BLASErr says why BLAS is nil; Gemm returns it.
	BLASErr error
}

// ErrNoBLAS is returned by Gemm when rocBLAS could not be loaded.
var ErrNoBLAS = errors.New("rocBLAS is not loaded")

// Open makes a driver.Device for every GPU agent, configured by configFor
// its index.
func Open(rt Runtimes, configFor func(index int) driver.DeviceConfig) ([]driver.Device, error) {
	agents, err := gpuAgents(rt.HSA)
	if err != nil {
		return nil, err
	}
	kernarg, err := kernargPool(rt.HSA)
	if err != nil {
		return nil, err
	}
	var devs []driver.Device
	for i, a := range agents {
		cfg := configFor(i)
		if cfg.QueueSize == 0 {
			cfg.QueueSize = 1024
		}
		if cfg.MaxQueues == 0 {
			cfg.MaxQueues = 8
		}
		d, err := newDevice(rt, cfg, i, a, kernarg)
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

func gpuAgents(rt hsa.Runtime) ([]hsa.Agent, error) {
	all, err := rt.Agents()
	if err != nil {
		return nil, err
	}
	var gpus []hsa.Agent
	for _, a := range all {
		t, err := rt.AgentInfoUint32(a, hsa.AgentInfoDevice)
		if err != nil {
			return nil, err
		}
		if hsa.DeviceType(t) == hsa.DeviceTypeGPU {
			gpus = append(gpus, a)
		}
	}
	if len(gpus) == 0 {
		return nil, hsa.ErrNoGPU
	}
	return gpus, nil
}

// kernargPool finds a CPU pool with the KERNARG_INIT flag.
func kernargPool(rt hsa.Runtime) (hsa.MemoryPool, error) {
	all, err := rt.Agents()
	if err != nil {
		return 0, err
	}
	for _, a := range all {
		t, err := rt.AgentInfoUint32(a, hsa.AgentInfoDevice)
		if err != nil || hsa.DeviceType(t) != hsa.DeviceTypeCPU {
			continue
		}
		pools, err := rt.MemoryPools(a)
		if err != nil {
			return 0, err
		}
		for _, p := range pools {
			flags, err := rt.MemoryPoolInfoUint32(p, hsa.PoolInfoGlobalFlags)
			if err == nil && flags&hsa.GlobalFlagKernargInit != 0 {
				return p, nil
			}
		}
	}
	return 0, errors.New("rocmdev: no kernarg memory pool")
}

func agentISA(rt hsa.Runtime, a hsa.Agent) (string, error) {
	isas, err := rt.AgentISAs(a)
	if err != nil {
		return "", err
	}
	if len(isas) == 0 {
		return rt.AgentInfoString(a, hsa.AgentInfoName)
	}
	return rt.ISAName(isas[0])
}

// Device is one GPU of the ROCm family.
type Device struct {
	rt        Runtimes
	cfg       driver.DeviceConfig
	index     int
	agent     hsa.Agent
	isa       string
	signals   *queue.SignalPool
	streamAPI stream.API
	events    *stream.EventPool
	queues    tls.QueuePool
	tasks     atomic.Int64

	kernelsOnce sync.Once
	kernelsErr  error
	kernelObjs  [kernels.NumOps][2]kernelObject
}

var _ driver.Device = (*Device)(nil)

type kernelObject struct {
	handle      uint64       // HSA kernel object
	function    hip.Function // the same kernel through HIP, under Unified
	kernargSize uint32
	groupSize   uint32
	privateSize uint32
	workgroup   uint16
}

func newDevice(rt Runtimes, cfg driver.DeviceConfig, index int, agent hsa.Agent, kernarg hsa.MemoryPool) (*Device, error) {
	isa, err := agentISA(rt.HSA, agent)
	if err != nil {
		return nil, fmt.Errorf("rocmdev: reading gpu%d's ISA: %w", index, err)
	}
	d := &Device{rt: rt, cfg: cfg, index: index, agent: agent, isa: isa}
	var attrs uint64
	if cfg.Policy == syncstate.DeviceBridge {
		// The bridge reads completion signals' values from HIP, which
		// hsa_amd_signal_value_pointer allows only for non-interrupt
		// signals; IPC signals are those that the host can still wait on.
		attrs = hsa.SignalAttrIPC
	}
	d.signals = queue.NewSignalPool(rt.HSA, attrs)
	d.streamAPI = stream.HIP(rt.HIP, index)
	d.events = stream.NewEventPool(d.streamAPI)
	d.queues = tls.QueuePool{Max: cfg.MaxQueues, Create: func(i int) (*queue.Queue, error) {
		q, err := queue.New(rt.HSA, queue.Config{Name: fmt.Sprintf("gpu%d/hsa-q%d", index, i), Agent: agent,
			Size: cfg.QueueSize, KernargPool: kernarg, Signals: d.signals, Sinks: syncstate.Sinks{cfg.Stats},
			WaitTimeout: cfg.WaitTimeout, MaxInFlight: cfg.MaxInFlight})
		if err == nil && cfg.Policy == syncstate.DeviceBridge {
			q.SetBridge(d.hipToHSA)
		}
		return q, err
	}}
	return d, nil
}

// Target implements driver.Device.
func (d *Device) Target() string { return d.isa }

// SignalsCreated implements driver.Device.
func (d *Device) SignalsCreated() uint64 { return d.signals.Created() }

// EventsCreated implements driver.Device.
func (d *Device) EventsCreated() uint64 { return d.events.Created() }

// Malloc implements driver.Device with hipMalloc: HIP and HSA share one
// ROCr instance, so the pointer is valid in self-dispatched kernels too.
func (d *Device) Malloc(size uint64) (driver.DevicePtr, error) {
	p, err := d.rt.HIP.Malloc(d.index, size)
	return driver.DevicePtr(p), err
}

// Free implements driver.Device.
func (d *Device) Free(p driver.DevicePtr) error { return d.rt.HIP.Free(d.index, hip.DevicePtr(p)) }

// CopyHtoD implements driver.Device.
func (d *Device) CopyHtoD(dst driver.DevicePtr, src unsafe.Pointer, size uint64) error {
	return d.rt.HIP.MemcpyHtoD(d.index, hip.DevicePtr(dst), src, size)
}

// CopyDtoH implements driver.Device.
func (d *Device) CopyDtoH(dst unsafe.Pointer, src driver.DevicePtr, size uint64) error {
	return d.rt.HIP.MemcpyDtoH(d.index, dst, hip.DevicePtr(src), size)
}

// Close releases the queues and pools; tasks must be closed first.
func (d *Device) Close() error {
	return errors.Join(d.queues.Close(), d.signals.Destroy(), d.events.Destroy())
}

// loadKernels loads the code object for the GPU's ISA once and looks up
// every kernel object.
func (d *Device) loadKernels() error {
	d.kernelsOnce.Do(func() { d.kernelsErr = d.doLoadKernels() })
	return d.kernelsErr
}

func (d *Device) doLoadKernels() error {
	rt := d.rt.HSA
	code, err := kernels.CodeObject(d.isa)
	if err != nil {
		return err
	}
	reader, err := rt.CodeObjectReaderCreateFromMemory(code)
	if err != nil {
		return err
	}
	defer rt.CodeObjectReaderDestroy(reader)
	exe, err := rt.ExecutableCreateAlt(hsa.ProfileFull, hsa.FloatRoundingDefault)
	if err != nil {
		return err
	}
	if err := rt.ExecutableLoadAgentCodeObject(exe, d.agent, reader); err != nil {
		return err
	}
	if err := rt.ExecutableFreeze(exe); err != nil {
		return err
	}
	wg := kernels.DefaultWorkgroupSize(d.isa)
	var module hip.Module
	if d.cfg.Policy == syncstate.Unified {
		// Unified launches the same code object through HIP, on the
		// task's stream next to rocBLAS.
		if module, err = d.rt.HIP.ModuleLoadData(d.index, code); err != nil {
			return err
		}
	}
	for _, op := range kernels.AllOps() {
		for di, dt := range kernels.AllDTypes() {
			sym, err := rt.ExecutableSymbolByName(exe, op.Symbol(dt), d.agent)
			if err != nil {
				return fmt.Errorf("kernel %s: %w", op.Symbol(dt), err)
			}
			k := kernelObject{workgroup: wg}
			if k.handle, err = rt.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject); err != nil {
				return err
			}
			if k.kernargSize, err = rt.SymbolInfoUint32(sym, hsa.SymbolInfoKernargSegmentSize); err != nil {
				return err
			}
			if k.kernargSize < kernels.KernargSize || k.kernargSize > queue.KernargSlot {
				return fmt.Errorf("kernel %s: kernarg segment is %d bytes, rocsync packs %d", op.Symbol(dt), k.kernargSize, kernels.KernargSize)
			}
			if k.groupSize, err = rt.SymbolInfoUint32(sym, hsa.SymbolInfoGroupSegmentSize); err != nil {
				return err
			}
			if k.privateSize, err = rt.SymbolInfoUint32(sym, hsa.SymbolInfoPrivateSegmentSize); err != nil {
				return err
			}
			if module != 0 {
				if k.function, err = d.rt.HIP.ModuleGetFunction(module, op.KernelName(dt)); err != nil {
					return err
				}
			}
			d.kernelObjs[op][di] = k
		}
	}
	return nil
}

// Task is one task's HSA queue (none under Unified), HIP stream and
// rocBLAS handle.
type Task struct {
	d     *Device
	st    tls.State
	sinks syncstate.Sinks
}

var _ driver.Task = (*Task)(nil)

// NewTask implements driver.Device.
func (d *Device) NewTask(sinks syncstate.Sinks) (driver.Task, error) {
	n := d.tasks.Add(1)
	t := &Task{d: d, sinks: sinks}
	var err error
	hs, err := d.rt.HIP.StreamCreate(d.index, hip.StreamNonBlocking)
	if err != nil {
		return nil, fmt.Errorf("creating a HIP stream: %w", err)
	}
	t.st.Stream = stream.New(d.streamAPI, uintptr(hs), stream.Config{Name: fmt.Sprintf("gpu%d/hip-s%d", d.index, n),
		Events: d.events, Sinks: sinks, Domain: syncstate.DomainLibrary,
		WaitTimeout: d.cfg.WaitTimeout, MaxInFlight: d.cfg.MaxInFlight})
	if d.cfg.Policy == syncstate.DeviceBridge {
		t.st.Stream.SetBridge(d.hsaToHIP)
	}
	if d.cfg.Policy != syncstate.Unified {
		if t.st.Queue, err = d.queues.Acquire(); err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("creating an HSA queue: %w", err)
		}
	}
	if d.rt.BLAS != nil {
		h, err := d.rt.BLAS.CreateHandle(d.index)
		if err == nil {
			t.st.BLAS = h
			err = d.rt.BLAS.SetStream(h, hip.Stream(t.st.Stream.Handle()))
		}
		if err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("creating a rocBLAS handle: %w", err)
		}
	}
	return t, nil
}

// KernelTimeline implements driver.Task.
func (t *Task) KernelTimeline() syncstate.Timeline {
	if t.st.Queue != nil {
		return t.st.Queue
	}
	return t.st.Stream
}

// LibraryTimeline implements driver.Task.
func (t *Task) LibraryTimeline() syncstate.Timeline { return t.st.Stream }

// maxGrid caps the work-items of one dispatch; the kernels loop over the
// rest with a grid stride.
const maxGrid = 1 << 24

// Launch implements driver.Task.
func (t *Task) Launch(op kernels.Op, dt kernels.DType, args kernels.Args) (uint64, error) {
	if err := t.d.loadKernels(); err != nil {
		return 0, err
	}
	di := 0
	if dt == kernels.F64 {
		di = 1
	}
	k := &t.d.kernelObjs[op][di]
	wg := uint64(k.workgroup)
	grid := min((args.N+wg-1)/wg*wg, maxGrid)
	if t.st.Queue == nil {
		return t.launchHIP(k, dt, args, grid)
	}
	var buf [queue.KernargSlot]byte
	args.Encode(buf[:], dt)
	return t.st.Queue.Dispatch(&queue.Dispatch{KernelObject: k.handle, Grid: uint32(grid), Workgroup: k.workgroup,
		PrivateSegmentSize: k.privateSize, GroupSegmentSize: k.groupSize, Kernarg: buf[:k.kernargSize]})
}

// launchHIP is Launch under Unified. HIP counts the grid in blocks, AQL in
// work-items; the runtime copies the argument block at enqueue.
func (t *Task) launchHIP(k *kernelObject, dt kernels.DType, args kernels.Args, grid uint64) (uint64, error) {
	var buf [queue.KernargSlot]byte
	args.Encode(buf[:], dt)
	kernarg := buf[:k.kernargSize]
	wg := uint64(k.workgroup)
	hp := t.d.rt.HIP
	return t.st.Stream.Submit(func(s uintptr) error {
		return hp.ModuleLaunchKernel(k.function, [3]uint32{uint32(grid / wg), 1, 1}, [3]uint32{uint32(wg), 1, 1},
			k.groupSize, hip.Stream(s), kernarg)
	})
}

// Gemm implements driver.Task with rocBLAS on the task's stream.
func (t *Task) Gemm(dt kernels.DType, transA, transB bool, m, n, k int, alpha float64,
	a driver.DevicePtr, lda int, b driver.DevicePtr, ldb int, beta float64, c driver.DevicePtr, ldc int) (uint64, error) {
	blas := t.d.rt.BLAS
	if blas == nil {
		return 0, fmt.Errorf("%w: %w", ErrNoBLAS, t.d.rt.BLASErr)
	}
	opA, opB := rocblas.OperationNone, rocblas.OperationNone
	if transA {
		opA = rocblas.OperationTranspose
	}
	if transB {
		opB = rocblas.OperationTranspose
	}
	h := t.st.BLAS
	return t.st.Stream.Submit(func(uintptr) error {
		if dt == kernels.F32 {
			return blas.Sgemm(h, opA, opB, int32(m), int32(n), int32(k), float32(alpha),
				hip.DevicePtr(a), int32(lda), hip.DevicePtr(b), int32(ldb), float32(beta), hip.DevicePtr(c), int32(ldc))
		}
		return blas.Dgemm(h, opA, opB, int32(m), int32(n), int32(k), alpha,
			hip.DevicePtr(a), int32(lda), hip.DevicePtr(b), int32(ldb), beta, hip.DevicePtr(c), int32(ldc))
	})
}

// Close implements driver.Task: it drains and releases.
func (t *Task) Close() error {
	var errs []error
	if t.st.BLAS != 0 {
		errs = append(errs, t.d.rt.BLAS.DestroyHandle(t.st.BLAS))
		t.st.BLAS = 0
	}
	if t.st.Stream != nil {
		errs = append(errs, t.st.Stream.Close())
		t.st.Stream = nil
	}
	if t.st.Queue != nil {
		errs = append(errs, t.st.Queue.WaitHost(t.st.Queue.LastTicket()))
		t.d.queues.Release(t.st.Queue)
		t.st.Queue = nil
	}
	return errors.Join(errs...)
}

// Queues returns the device's HSA queues (for tests).
func (d *Device) Queues() []*queue.Queue { return d.queues.Queues() }

// HSAQueue returns the task's HSA queue, nil under Unified (for tests).
func (t *Task) HSAQueue() *queue.Queue { return t.st.Queue }

// hipToHSA bridges a HIP fence to an HSA queue: the producer stream stores
// 0 into a pooled signal once its earlier work (the fence included) is
// done, and the consumer's barrier-AND packet waits for that signal.
// hipStreamWriteValue64 needs the signal's value address, which
// hsa_amd_signal_value_pointer gives only for non-interrupt signals: the
// device's pool makes IPC signals under DeviceBridge.
func (d *Device) hipToHSA(f syncstate.Fence) (*queue.Signal, error) {
	p, ok := f.TL.(*stream.Stream)
	if !ok {
		return nil, fmt.Errorf("rocmdev: cannot bridge from %s", f.TL.Name())
	}
	if f.Ticket <= p.Completed() {
		return nil, nil
	}
	sig, err := d.signals.Get()
	if err != nil {
		return nil, err
	}
	ptr, err := d.rt.HSA.SignalValuePointer(sig.H)
	if err != nil {
		sig.Release()
		return nil, err
	}
	hp := d.rt.HIP
	t, err := p.Submit(func(s uintptr) error { return hp.StreamWriteValue64(hip.Stream(s), ptr, 0, 0) })
	if err != nil {
		sig.Release()
		if errors.Is(err, stream.ErrClosed) {
			// The producer's task closed meanwhile (Completed read a
			// stale value while Close held the lock): Close drained the
			// stream, so the fence is complete, or failed.
			return nil, p.Failed(f.Ticket)
		}
		return nil, err
	}
	// A failed stream never runs the write, and the barrier waiting for
	// the signal would never pass: complete it then, and the consumer
	// learns of the failure from its upstream record.
	sig.Retain()
	p.OnFailure(t, func() { d.rt.HSA.SignalStoreScrelease(sig.H, 0) })
	p.AfterComplete(t, sig.Release)
	return sig, nil
}

// hsaToHIP bridges an HSA fence to a HIP stream: the stream waits with
// hipStreamWaitValue64 until the producer's completion signal reads 0. The
// signal stays retained (so the pool cannot reset it to 1) until the
// stream has passed the wait.
func (d *Device) hsaToHIP(s *stream.Stream, f syncstate.Fence) error {
	p, ok := f.TL.(*queue.Queue)
	if !ok {
		return fmt.Errorf("rocmdev: cannot bridge from %s", f.TL.Name())
	}
	sig := p.SignalFor(f.Ticket)
	if sig == nil {
		return nil
	}
	ptr, err := d.rt.HSA.SignalValuePointer(sig.H)
	if err != nil {
		sig.Release()
		return err
	}
	hp := d.rt.HIP
	t, err := s.Submit(func(hs uintptr) error {
		return hp.StreamWaitValue64(hip.Stream(hs), ptr, 0, hip.StreamWaitValueEq, ^uint64(0))
	})
	if err != nil {
		sig.Release()
		return err
	}
	s.AfterComplete(t, sig.Release)
	return nil
}

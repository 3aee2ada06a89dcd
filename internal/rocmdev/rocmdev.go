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
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hostlane"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/testhooks"
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
	// Log receives why a GPU is left out; nil discards it.
	Log *zerolog.Logger
	// Collectives, if set, returns the collective library in place of
	// RCCL (the emulator's model of it); timeout bounds its rendezvous.
	Collectives func(timeout time.Duration) (driver.Collectives, error)
}

// ErrNoBLAS is returned by Gemm when rocBLAS could not be loaded.
var ErrNoBLAS = errors.New("rocBLAS is not loaded")

// Open makes a driver.Device for every GPU agent, configured by configFor
// its index.
//
// Open takes over the caller's hsa_init reference of rt.HSA: the devices
// share it, and the last one to close calls hsa_shut_down (so does Open
// when it fails), which releases ROCr's queues, signals and threads.
func Open(rt Runtimes, configFor func(index int) driver.DeviceConfig) ([]driver.Device, error) {
	agents, err := gpuAgents(rt.HSA)
	if err != nil {
		return nil, errors.Join(err, rt.HSA.ShutDown())
	}
	kernarg, err := kernargPool(rt.HSA)
	if err != nil {
		return nil, errors.Join(err, rt.HSA.ShutDown())
	}
	gpus, err := matchHIPDevices(rt, agents)
	if err != nil {
		return nil, errors.Join(err, rt.HSA.ShutDown())
	}
	// Without a handler that handles it, ROCr aborts the process on a GPU
	// VM fault; with one, the fault becomes an error on its device.
	faults := &faultRouter{devs: map[hsa.Agent]*Device{}}
	cancelEvents, err := rt.HSA.RegisterSystemEventHandler(faults.handle)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("rocmdev: registering the GPU memory fault handler: %w", err), rt.HSA.ShutDown())
	}
	ref := &runtimeRef{rt: rt.HSA, cancelEvents: cancelEvents}
	ref.users.Add(int64(len(gpus)))
	var devs []driver.Device
	for i, g := range gpus {
		cfg := configFor(i)
		if cfg.QueueSize == 0 {
			cfg.QueueSize = 1024
		}
		if cfg.MaxQueues == 0 {
			cfg.MaxQueues = 8
		}
		d, err := func() (*Device, error) {
			if err := queueSizeFits(rt.HSA, g.agent, cfg.QueueSize); err != nil {
				return nil, err
			}
			return newDevice(rt, cfg, i, g.agent, g.hipIndex, kernarg)
		}()
		if err != nil {
			for _, x := range devs {
				_ = x.Close()
			}
			// The devices never made hold no reference; the last
			// reference dropped shuts the runtime down.
			_ = ref.release(int64(len(gpus) - len(devs)))
			return nil, err
		}
		d.ref = ref
		d.faults = faults
		faults.add(d)
		devs = append(devs, d)
	}
	return devs, nil
}

// queueSizeFits refuses a ring size the agent's queues cannot have, at
// Open, where every queue creation would refuse it later (each op of the
// device then failing): hsa_queue_create wants a power of two within the
// agent's HSA_AGENT_INFO_QUEUE_MIN_SIZE and _MAX_SIZE (HSA runtime spec,
// hsa_queue_create; ROCr GpuAgent minAqlSize_ 0x40 and maxAqlSize_
// 0x20000 packets). An agent that does not say keeps the size unchecked.
func queueSizeFits(rt hsa.Runtime, a hsa.Agent, size uint32) error {
	lo, errLo := rt.AgentInfoUint32(a, hsa.AgentInfoQueueMinSize)
	hi, errHi := rt.AgentInfoUint32(a, hsa.AgentInfoQueueMaxSize)
	if errLo == nil && errHi == nil && hi != 0 && (size < lo || size > hi) {
		return fmt.Errorf("%w: QueueSize %d is outside the GPU's queue sizes, %d to %d packets (HSA_AGENT_INFO_QUEUE_MIN_SIZE, _MAX_SIZE)",
			driver.ErrInvalidConfig, size, lo, hi)
	}
	return nil
}

// gpu is a GPU agent and the HIP device that is the same GPU.
type gpu struct {
	agent    hsa.Agent
	hipIndex int
}

// pciLocation identifies a GPU on PCIe: both runtimes report it, while
// their device orders may differ (HIP_VISIBLE_DEVICES reorders and filters
// HIP's devices, and HIP leaves out GPUs it fails to open). The function
// tells apart the partitions of one GPU (an MI300X or MI300A in CPX, DPX,
// QPX or TPX mode is several KFD nodes on one bus and device: amdgpu
// kfd_topology.c, kfd_topology_add_device, sets location_id |= node_id
// when the GPU has several nodes, and ROCr reports location_id as the
// agent's BDFID).
type pciLocation struct{ domain, bus, device, function uint32 }

func (l pciLocation) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%01x", l.domain, l.bus, l.device, l.function)
}

// slot is the location without the function: all HIP before 6.2 reports.
func (l pciLocation) slot() pciLocation { l.function = 0; return l }

// hipVersionPCIFunction is the first HIP whose hipDeviceGetPCIBusId prints
// the PCI function (clr hipamd/src/hip_device_runtime.cpp, rocm-6.2.0:
// "%04x:%02x:%02x.%01x" with deviceTopology_.pcie.function, which
// rocclr/device/rocm/rocdevice.cpp sets to the agent's BDFID & 7); up to
// rocm-6.1.2 it prints ".0" for every device.
const hipVersionPCIFunction = 60_200_000

// hipVisibilityVars reorder or filter HIP's devices relative to ROCr's GPU
// agents (clr honours both); ROCR_VISIBLE_DEVICES filters the agents
// themselves, for both runtimes alike.
var hipVisibilityVars = []string{"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}

// lookupEnv is os.LookupEnv (tests replace it).
var lookupEnv = os.LookupEnv

// matchHIPDevices pairs every GPU agent with the HIP device at the same
// PCI domain, bus, device and function. Where HIP does not report the
// function (before 6.2) and several agents share one bus and device (the
// partitions of one GPU), they are paired in order: HIP makes its devices
// from ROCr's GPU agents in ROCr's order (clr rocclr/device/rocm/
// rocdevice.cpp, Device::init), unless HIP_VISIBLE_DEVICES or
// CUDA_VISIBLE_DEVICES reorders them, when such agents are left out
// rather than guessed. Agents HIP does not present are left out, with a
// logged reason; no match at all is an error.
func matchHIPDevices(rt Runtimes, agents []hsa.Agent) ([]gpu, error) {
	n, err := rt.HIP.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("rocmdev: counting HIP devices: %w", err)
	}
	withFunction := false
	if v, err := rt.HIP.RuntimeVersion(); err == nil && v >= hipVersionPCIFunction {
		withFunction = true
	}
	// hipAt lists the HIP devices at each location, in HIP's order; the
	// location has no function unless HIP reports it.
	hipAt := map[pciLocation][]int{}
	for j := 0; j < n; j++ {
		// hipDeviceGetPCIBusId, not the PCI attributes: HIP 5.2.3 refuses
		// hipDeviceAttributePciDomainID (hipErrorInvalidValue).
		id, err := rt.HIP.DevicePCIBusID(j)
		if err != nil {
			return nil, fmt.Errorf("rocmdev: reading HIP device %d's PCI location: %w", j, err)
		}
		var loc pciLocation
		if _, err := fmt.Sscanf(id, "%x:%x:%x.%x", &loc.domain, &loc.bus, &loc.device, &loc.function); err != nil {
			return nil, fmt.Errorf("rocmdev: HIP device %d's PCI bus id %q: %w", j, id, err)
		}
		if !withFunction {
			loc = loc.slot()
		}
		if prev := hipAt[loc]; len(prev) > 0 && withFunction {
			return nil, fmt.Errorf("rocmdev: HIP devices %d and %d are both at PCI %s", prev[0], j, loc)
		}
		hipAt[loc] = append(hipAt[loc], j)
	}
	locs := make([]pciLocation, len(agents))
	agentsAt := map[pciLocation]int{}
	for i, a := range agents {
		bdf, err := rt.HSA.AgentInfoUint32(a, hsa.AgentInfoBDFID)
		if err != nil {
			return nil, fmt.Errorf("rocmdev: reading GPU agent %d's PCI location: %w", i, err)
		}
		domain, err := rt.HSA.AgentInfoUint32(a, hsa.AgentInfoDomain)
		if err != nil {
			return nil, fmt.Errorf("rocmdev: reading GPU agent %d's PCI domain: %w", i, err)
		}
		locs[i] = pciLocation{domain: domain, bus: bdf >> 8 & 0xff, device: bdf >> 3 & 0x1f, function: bdf & 7}
		agentsAt[locs[i].slot()]++
	}
	reordered := ""
	for _, v := range hipVisibilityVars {
		if x, ok := lookupEnv(v); ok {
			reordered = v + "=" + x
			break
		}
	}
	taken := map[pciLocation]int{} // by slot: HIP devices of it paired so far
	var out []gpu
	for i, a := range agents {
		loc := locs[i]
		key, why := loc, "rocsync: skipping a GPU that HIP does not present (HIP_VISIBLE_DEVICES, or HIP failed to open it)"
		j, ok := -1, false
		if withFunction {
			if js := hipAt[key]; len(js) == 1 {
				j, ok = js[0], true
			}
		} else {
			key = loc.slot()
			js := hipAt[key]
			switch {
			case agentsAt[key] == 1 && len(js) == 1:
				j, ok = js[0], true
			case len(js) == 0:
			case reordered != "" || len(js) != agentsAt[key]:
				why = "rocsync: skipping a GPU partition: HIP before 6.2 reports no PCI function, and with " +
					"HIP's devices reordered or filtered (" + reordered + ") which partition is which HIP device is unknown"
			default:
				j, ok = js[taken[key]], true
				taken[key]++
			}
		}
		if !ok {
			if rt.Log != nil {
				rt.Log.Warn().Int("agent", i).Str("pci", loc.String()).Msg(why)
			}
			continue
		}
		out = append(out, gpu{agent: a, hipIndex: j})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rocmdev: none of the %d GPU agents is a HIP device (%d HIP devices): %w", len(agents), n, hsa.ErrNoGPU)
	}
	return out, nil
}

// runtimeRef counts the devices that share one hsa_init reference.
type runtimeRef struct {
	rt           hsa.Runtime
	users        atomic.Int64
	cancelEvents func() // the system event registration of this Open
}

// release drops n users; the last one retires the system event handler
// and calls hsa_shut_down.
func (r *runtimeRef) release(n int64) error {
	if r.users.Add(-n) == 0 {
		r.cancelEvents()
		return r.rt.ShutDown()
	}
	return nil
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
	rt       Runtimes
	cfg      driver.DeviceConfig
	index    int // rocsync's ordinal: GPU agents in HSA's order that HIP presents
	agent    hsa.Agent
	hipIndex int // the same GPU's HIP device number
	isa      string
	signals  *queue.SignalPool // GPU-only: packets' completion signals
	// wakeSignals are interrupt signals, for the markers a blocking host
	// waits on.
	wakeSignals *queue.SignalPool
	// bridgeSignals are GPU-only signals, which have a value address for
	// HIP's stream memory operations (DeviceBridge).
	bridgeSignals *queue.SignalPool
	exported      exportedSignals // external.go
	streamAPI     stream.API
	events        *stream.EventPool
	queues        tls.QueuePool
	tasks         atomic.Int64
	place         uint64      // syncstate.Placed: this device's queues and streams
	ref           *runtimeRef // the shared hsa_init reference
	bridge        bool        // DeviceBridge crosses the HSA/HIP boundary on the device
	// hostToStream says whether HIP streams wait on the device for host
	// lanes (hipStreamWaitValue64 on an HSA signal's value address, which
	// HIP takes from 5.6 on); otherwise they host-wait for them.
	hostToStream bool
	closed       atomic.Bool

	faults *faultRouter // the system event handler of this device's Open
	// faultErr is set by the first GPU memory fault of this GPU; every
	// queue of the device is broken with it and nothing new is accepted.
	faultErr atomic.Pointer[error]
	// made lists every queue the device made, for the fault handler: not
	// the pool's list, whose lock Close holds while it drains.
	madeMu sync.Mutex
	made   []*queue.Queue
	live   map[*Task]taskTimelines // open tasks' streams and lanes, which a fault evicts
	// violationOnce starts the grace timer of the first queue error that
	// reported a memory violation before the system event (memoryViolation).
	violationOnce sync.Once

	// kernelsMu orders the first kernel load against Close's unload: a load
	// that finds the device closed loads nothing, and Close unloads only
	// what a finished load left. kernelsDone is the lock-free fast path.
	kernelsMu   sync.Mutex
	kernelsDone atomic.Bool
	kernelsErr  error
	kernelObjs  [kernels.NumOps][2]driver.LoadedKernel
	codeObjects struct{ hsa, hip kernels.CodeObjectVersion } // what loaded; hip is 0 unless Unified
	// The loaded code: ROCr keeps the reader's memory as the loaded code
	// object's storage (its memory:// URI, which debuggers and profilers
	// read), so the reader lives until the executable is destroyed, at
	// Close.
	reader hsa.CodeObjectReader
	exe    hsa.Executable
	module hip.Module // under Unified

	userMu      sync.Mutex
	userModules []*userModule // user kernels' code, by handle-1

	// flushQ is the queue of the flushes a host wait makes (flush), made
	// at the first, with flushMu; its packets release at system scope
	// and wait for nothing.
	flushMu sync.Mutex
	flushQ  *queue.Queue
	// kernarg is the kernarg pool the queues take their rings from.
	kernarg hsa.MemoryPool
	// syncS is the stream of synchronous copies (syncStream).
	syncOnce sync.Once
	syncS    hip.Stream
	syncErr  error

	reductions driver.ReductionCache    // reduce.go
	peers      driver.PeerMemo[*Device] // peer.go
}

var _ driver.Device = (*Device)(nil)

var (
	_ driver.KernelLoader = (*Device)(nil)
	_ driver.HostMemory   = (*Device)(nil)
)

func newDevice(rt Runtimes, cfg driver.DeviceConfig, index int, agent hsa.Agent, hipIndex int, kernarg hsa.MemoryPool) (*Device, error) {
	isa, err := agentISA(rt.HSA, agent)
	if err != nil {
		return nil, fmt.Errorf("rocmdev: reading gpu%d's ISA: %w", index, err)
	}
	d := &Device{rt: rt, cfg: cfg, index: index, agent: agent, hipIndex: hipIndex, isa: isa, place: syncstate.NewPlace(), kernarg: kernarg}
	bridge := cfg.Policy == syncstate.DeviceBridge
	if bridge {
		if ok, why := bridgeSupported(rt.HIP); !ok {
			bridge = false
			if rt.Log != nil {
				rt.Log.Warn().Int("gpu", index).Str("reason", why).
					Msg("rocsync: DeviceBridge falls back to host waits at the HSA/HIP boundary")
			}
		}
	}
	d.bridge = bridge
	d.hostToStream, _ = bridgeSupported(rt.HIP)
	// Completion signals are GPU-only, whatever the policy: a packet
	// whose signal is an interrupt signal raises an end-of-pipe interrupt
	// (see queue.Config.WakeSignals). A host that blocks does so on the
	// interrupt signal of a marker the queue submits for it. HIP needs a
	// signal's value address, which hsa_amd_signal_value_pointer gives
	// only for non-interrupt (busy-wait) signals; the bridge takes those
	// from a pool of its own, used only at crossings and waited on by the
	// GPU only.
	d.signals = queue.NewSignalPool(rt.HSA, hsa.SignalAttrAMDGPUOnly)
	d.wakeSignals = queue.NewSignalPool(rt.HSA, 0)
	d.bridgeSignals = queue.NewSignalPool(rt.HSA, hsa.SignalAttrAMDGPUOnly)
	d.streamAPI = stream.HIP(rt.HIP, hipIndex)
	d.events = stream.NewEventPool(d.streamAPI)
	d.queues = tls.QueuePool{Max: cfg.MaxQueues, Create: func(i int) (*queue.Queue, error) {
		q, err := queue.New(rt.HSA, queue.Config{Name: fmt.Sprintf("gpu%d/hsa-q%d", index, i), Agent: agent,
			Size: cfg.QueueSize, KernargPool: kernarg, Signals: d.signals, WakeSignals: d.wakeSignals, Sinks: syncstate.Sinks{cfg.Stats},
			WaitTimeout: cfg.WaitTimeout, MaxInFlight: cfg.MaxInFlight, OnThrottle: cfg.OnThrottle, Place: d.place,
			OnMemoryViolation: d.memoryViolation, AgentScope: !testhooks.SystemScopeFences.Load(), Flush: d.flush})
		if err == nil && bridge {
			q.SetBridge(d.hipToHSA)
		}
		if err == nil {
			q.SetHostBridge(d.hostToHSA)
		}
		if err == nil {
			d.trackQueue(q)
		}
		return q, err
	}}
	return d, nil
}

// flush makes every write the GPU's queues have completed visible outside
// the GPU (queue.Config.Flush): a barrier-AND packet that waits for nothing
// and releases at system scope, on a queue of its own, whose packets all
// do so and never wait for anything, so a flush never waits behind work
// that may wait for the host that flushes. A system-scope release writes
// back the GPU's whole L2 (LLVM AMDGPUUsage, "Memory Model GFX90A" and
// "GFX942"), whichever queue's packet makes it.
func (d *Device) flush() error {
	if err := d.Fault(); err != nil {
		return err
	}
	d.flushMu.Lock()
	fq := d.flushQ
	if fq == nil {
		var err error
		fq, err = queue.New(d.rt.HSA, queue.Config{Name: fmt.Sprintf("gpu%d/hsa-flush", d.index), Agent: d.agent,
			Size: 64, KernargPool: d.kernarg, Signals: d.signals, WakeSignals: d.wakeSignals, Place: d.place})
		if err != nil {
			d.flushMu.Unlock()
			return err
		}
		d.trackQueue(fq) // a GPU memory fault breaks it as it does the others
		d.flushQ = fq
	}
	d.flushMu.Unlock()
	t, err := fq.BarrierAnd([hsa.BarrierAndMaxDependencies]*queue.Signal{})
	if err != nil {
		return err
	}
	return fq.WaitHost(t)
}

// Target implements driver.Device.
func (d *Device) Target() string { return d.isa }

// SignalsCreated implements driver.Device.
func (d *Device) SignalsCreated() uint64 {
	return d.signals.Created() + d.wakeSignals.Created() + d.bridgeSignals.Created()
}

// EventsCreated implements driver.Device.
func (d *Device) EventsCreated() uint64 { return d.events.Created() }

// Malloc implements driver.Device with hipMalloc: HIP and HSA share one
// ROCr instance, so the pointer is valid in self-dispatched kernels too.
func (d *Device) Malloc(size uint64) (driver.DevicePtr, error) {
	p, err := d.rt.HIP.Malloc(d.hipIndex, size)
	if outOfMemory(err) {
		err = driver.WithKind(err, driver.ErrOutOfMemory)
	}
	return driver.DevicePtr(p), err
}

// outOfMemory reports whether an allocation failed for want of device
// memory, in HIP's words or HSA's.
func outOfMemory(err error) bool {
	if errors.Is(err, &hip.Error{Code: hip.ErrorOutOfMemory}) {
		return true
	}
	var he *hsa.Error
	return errors.As(err, &he) && he.Status == hsa.StatusErrorOutOfResources
}

// Free implements driver.Device.
func (d *Device) Free(p driver.DevicePtr) error {
	if d.Fault() != nil {
		// hipFree first synchronizes every stream of the device (clr
		// ihipFree, SyncAllStreams), and evicted ones never finish.
		d.leak("device memory")
		return nil
	}
	return d.rt.HIP.Free(d.hipIndex, hip.DevicePtr(p))
}

// CopyHtoD implements driver.Device.
func (d *Device) CopyHtoD(dst driver.DevicePtr, src unsafe.Pointer, size uint64) error {
	s, err := d.syncStream()
	if err != nil {
		return err
	}
	return d.rt.HIP.MemcpyWithStream(cmem.Ptr(uintptr(dst)), src, size, hip.MemcpyHostToDevice, s)
}

// CopyDtoH implements driver.Device.
func (d *Device) CopyDtoH(dst unsafe.Pointer, src driver.DevicePtr, size uint64) error {
	s, err := d.syncStream()
	if err != nil {
		return err
	}
	return d.rt.HIP.MemcpyWithStream(dst, cmem.Ptr(uintptr(src)), size, hip.MemcpyDeviceToHost, s)
}

// syncStream is the stream of the device's synchronous copies (host
// functions' HostAccess, read-backs), made at the first: a high-priority
// one. HIP puts streams on a few hardware queues (GPU_MAX_HW_QUEUES, 4 by
// default), shared once there are more streams, and hipMemcpy's null stream
// takes the least used (clr rocdevice.cpp, Device::acquireQueue); HIP 6.x
// copies through blit kernels on that queue. A host function's copy queued
// there behind a stream that waits for the function on the device would
// never run (seen with GPU_MAX_HW_QUEUES=1 on HIP 6.4.3). clr keeps a pool
// of hardware queues per priority, and rocsync's own streams are of normal
// priority, so this stream's queue is never one of theirs; it waits for
// nothing itself.
func (d *Device) syncStream() (hip.Stream, error) {
	d.syncOnce.Do(func() {
		d.syncS, d.syncErr = d.rt.HIP.StreamCreateWithPriority(d.hipIndex, hip.StreamNonBlocking, hip.StreamPriorityHigh)
		if d.syncErr != nil {
			d.syncErr = fmt.Errorf("rocmdev: creating the stream of synchronous copies: %w", d.syncErr)
		}
	})
	return d.syncS, d.syncErr
}

// Close releases the queues and pools, and the device's share of the HSA
// runtime; tasks must be closed first. A second Close does nothing.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.kernelsMu.Lock()
	unload := d.unloadKernels()
	d.kernelsMu.Unlock()
	d.flushMu.Lock()
	var flushErr error
	if d.flushQ != nil {
		flushErr = d.flushQ.Close()
		d.flushQ = nil
	}
	d.flushMu.Unlock()
	err := errors.Join(d.queues.Close(), flushErr, d.signals.Destroy(), d.wakeSignals.Destroy(), d.bridgeSignals.Destroy(), d.destroyExported(), d.events.Destroy(), unload, d.unloadUserModules())
	d.syncOnce.Do(func() {}) // none is made after Close
	if d.syncS != 0 {
		if d.Fault() != nil {
			d.leak("HIP stream of synchronous copies") // destroying an evicted stream never returns
		} else {
			err = errors.Join(err, d.rt.HIP.StreamDestroy(d.syncS))
		}
		d.syncS = 0
	}
	if d.faults != nil {
		d.faults.remove(d)
	}
	if d.ref != nil {
		err = errors.Join(err, d.ref.release(1))
	}
	return err
}

// loadKernels loads the code object for the GPU's ISA once and looks up
// every kernel object. A device closed first loads nothing: Close may run
// beside a task's first launch, and what a load made after Close's unload
// would stay loaded.
func (d *Device) loadKernels() error {
	if d.kernelsDone.Load() {
		return d.kernelsErr
	}
	d.kernelsMu.Lock()
	defer d.kernelsMu.Unlock()
	if d.kernelsDone.Load() {
		return d.kernelsErr
	}
	if d.closed.Load() {
		return errDeviceClosed
	}
	d.kernelsErr = d.doLoadKernels()
	d.kernelsDone.Store(true)
	return d.kernelsErr
}

// errDeviceClosed is a kernel load's answer after Close.
var errDeviceClosed = errors.New("rocmdev: device closed")

// unloadKernels destroys the executable, then its reader, and unloads the
// HIP module. The queues are drained first, so no kernel still runs.
func (d *Device) unloadKernels() error {
	var errs []error
	if d.exe != 0 {
		errs = append(errs, d.rt.HSA.ExecutableDestroy(d.exe))
		d.exe = 0
	}
	if d.reader != 0 {
		errs = append(errs, d.rt.HSA.CodeObjectReaderDestroy(d.reader))
		d.reader = 0
	}
	if d.module != 0 {
		errs = append(errs, d.rt.HIP.ModuleUnload(d.module))
		d.module = 0
	}
	return errors.Join(errs...)
}

func (d *Device) doLoadKernels() (err error) {
	rt := d.rt.HSA
	// Each runtime gets the code-object version its release loads
	// (codeobject.go); the kernels and their 40-byte kernarg layout are the
	// same in every version.
	defer func() {
		if err != nil {
			err = errors.Join(err, d.unloadKernels())
		}
	}()
	hsaVersion, err := d.loadHSAExecutable()
	if err != nil {
		return err
	}
	d.codeObjects.hsa = hsaVersion
	d.logCodeObject("hsa", hsaVersion)
	exe := d.exe
	wg := kernels.DefaultWorkgroupSize(d.isa)
	var module hip.Module
	if d.cfg.Policy == syncstate.Unified {
		// Unified launches the same kernels through HIP, on the task's
		// stream next to rocBLAS.
		if module, d.codeObjects.hip, err = d.loadHIPModule(); err != nil {
			return err
		}
		d.module = module
		d.logCodeObject("hip", d.codeObjects.hip)
	}
	for _, op := range kernels.AllOps() {
		for di, dt := range kernels.AllDTypes() {
			sym, err := rt.ExecutableSymbolByName(exe, op.Symbol(dt), d.agent)
			if err != nil {
				return fmt.Errorf("kernel %s: %w", op.Symbol(dt), err)
			}
			k := driver.LoadedKernel{Name: op.KernelName(dt), Workgroup: uint32(wg), ExplicitArgsSize: kernels.KernargSize}
			if err := d.fillKernel(&k, sym, op.Symbol(dt)); err != nil {
				return err
			}
			if k.ArgsSize < kernels.KernargSize {
				return fmt.Errorf("kernel %s: kernarg segment is %d bytes, rocsync packs %d", op.Symbol(dt), k.ArgsSize, kernels.KernargSize)
			}
			if module != 0 {
				f, err := d.rt.HIP.ModuleGetFunction(module, op.KernelName(dt))
				if err != nil {
					return err
				}
				k.Function = uint64(f)
			}
			d.kernelObjs[op][di] = k
		}
	}
	return nil
}

// The queue's kernarg slot is the largest block an op carries.
const _ = uint(queue.KernargSlot-driver.MaxArgs) + uint(driver.MaxArgs-queue.KernargSlot)

// fillKernel reads a kernel symbol's object and segment sizes. A kernarg
// segment over the queue's kernarg slot (256 bytes of explicit arguments
// and the 256-byte implicit area, queue.KernargSlot) cannot be dispatched:
// refused here, at load, rather than at every launch.
func (d *Device) fillKernel(k *driver.LoadedKernel, sym hsa.ExecutableSymbol, name string) error {
	rt := d.rt.HSA
	var err error
	if k.Object, err = rt.SymbolInfoUint64(sym, hsa.SymbolInfoKernelObject); err != nil {
		return err
	}
	if k.ArgsSize, err = rt.SymbolInfoUint32(sym, hsa.SymbolInfoKernargSegmentSize); err != nil {
		return err
	}
	if k.ArgsSize > queue.KernargSlot {
		return fmt.Errorf("kernel %s: %w: kernarg segment is %d bytes, the queue's slot %d", name, queue.ErrKernargTooLarge, k.ArgsSize, queue.KernargSlot)
	}
	if k.GroupSegmentSize, err = rt.SymbolInfoUint32(sym, hsa.SymbolInfoGroupSegmentSize); err != nil {
		return err
	}
	if k.PrivateSegmentSize, err = rt.SymbolInfoUint32(sym, hsa.SymbolInfoPrivateSegmentSize); err != nil {
		return err
	}
	return nil
}

// Builtin implements driver.Device.
func (d *Device) Builtin(op kernels.Op, dt kernels.DType) (*driver.LoadedKernel, error) {
	if err := d.loadKernels(); err != nil {
		return nil, err
	}
	if !op.Valid() || dt.Size() == 0 {
		return nil, fmt.Errorf("rocmdev: no kernel %v for %v", op, dt)
	}
	di := 0
	if dt == kernels.F64 {
		di = 1
	}
	return &d.kernelObjs[op][di], nil
}

// Task is one task's HSA queue (none under Unified), HIP stream and
// rocBLAS handle.
type Task struct {
	d     *Device
	st    tls.State
	host  *hostlane.Lane
	sinks syncstate.Sinks
	held  stream.Holding // the library stream's hold (HoldLibrary)
}

var (
	_ driver.Task        = (*Task)(nil)
	_ driver.BLASHandler = (*Task)(nil)
)

// NewTask implements driver.Device.
func (d *Device) NewTask(sinks syncstate.Sinks) (driver.Task, error) {
	if err := d.Fault(); err != nil {
		return nil, err
	}
	n := d.tasks.Add(1)
	t := &Task{d: d, sinks: sinks}
	var err error
	hs, err := d.rt.HIP.StreamCreate(d.hipIndex, hip.StreamNonBlocking)
	if err != nil {
		return nil, fmt.Errorf("creating a HIP stream: %w", err)
	}
	t.st.Stream = stream.New(d.streamAPI, uintptr(hs), stream.Config{Name: fmt.Sprintf("gpu%d/hip-s%d", d.index, n),
		Events: d.events, Sinks: sinks, Domain: syncstate.DomainLibrary,
		WaitTimeout: d.cfg.WaitTimeout, MaxInFlight: d.cfg.MaxInFlight, OnThrottle: d.cfg.OnThrottle, Place: d.place})
	if d.bridge {
		t.st.Stream.SetBridge(d.hsaToHIP)
	}
	if d.hostToStream {
		t.st.Stream.SetHostBridge(d.hostToHIP)
	}
	t.host = hostlane.New(hostlane.Config{Name: fmt.Sprintf("gpu%d/host%d", d.index, n), MaxPending: d.cfg.MaxInFlight,
		WaitTimeout: d.cfg.WaitTimeout, Sinks: sinks, OnThrottle: d.cfg.OnThrottle})
	d.trackTask(t)
	if d.cfg.Policy != syncstate.Unified {
		if t.st.Queue, err = d.queues.Acquire(); err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("creating an HSA queue: %w", err)
		}
	}
	if d.rt.BLAS != nil {
		h, err := d.rt.BLAS.CreateHandle(d.hipIndex)
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

// Timeline implements driver.Task: the HSA queue for kernels (the stream
// under Unified), the host lane for host functions, the HIP stream for
// everything else.
func (t *Task) Timeline(l driver.Lane) syncstate.Timeline {
	if l == driver.LaneKernel && t.st.Queue != nil {
		return t.st.Queue
	}
	if l == driver.LaneHost {
		return t.host
	}
	return t.st.Stream
}

// Submit implements driver.Task: one case per op type. Dispatches go to
// the HSA queue as AQL packets (under Unified, hipModuleLaunchKernel on
// the stream; HIP counts the grid in blocks, AQL in work-items); every
// other kind runs on the HIP stream. The closures passed to Stream.Submit
// do not escape (it only calls them), so submitting allocates nothing.
func (t *Task) Submit(op driver.Op) (uint64, error) {
	if p := t.d.faultErr.Load(); p != nil {
		return 0, *p
	}
	hp := t.d.rt.HIP
	switch op := op.(type) {
	case *driver.DispatchOp:
		k := op.Kernel
		if k == nil || k.Object == 0 {
			return 0, fmt.Errorf("%w: dispatch of no kernel", driver.ErrUnsupported)
		}
		g := &op.Geometry
		if t.st.Queue == nil {
			if k.Function == 0 {
				return 0, fmt.Errorf("rocmdev: kernel %s has no HIP function (loaded before Unified?)", k.Name)
			}
			// HIP takes the explicit arguments only and fills the
			// hidden ones itself (Kernel.ExplicitArgsSize).
			kernarg := op.Args[:k.ExplicitArgsSize]
			var grid, block [3]uint32
			for i := range grid {
				// HIP counts whole blocks: a partial last workgroup
				// (which AQL allows) becomes a whole one, and the kernel's
				// own bounds check covers the rest.
				block[i] = max(g.Workgroup[i], 1)
				grid[i] = (max(g.Grid[i], 1) + block[i] - 1) / block[i]
			}
			// sharedMemBytes is 0: HIP adds the kernel's static LDS (its
			// group segment size) itself.
			return t.st.Stream.Submit(func(s uintptr) error {
				return hp.ModuleLaunchKernel(hip.Function(k.Function), grid, block, 0, hip.Stream(s), kernarg)
			})
		}
		return t.st.Queue.Dispatch(&queue.Dispatch{KernelObject: k.Object, Grid: g.Grid[0], Workgroup: uint16(g.Workgroup[0]),
			Dims: uint16(g.Dims), GridYZ: [2]uint32{g.Grid[1], g.Grid[2]}, WorkgroupYZ: [2]uint16{uint16(g.Workgroup[1]), uint16(g.Workgroup[2])},
			PrivateSegmentSize: k.PrivateSegmentSize, GroupSegmentSize: k.GroupSegmentSize, Kernarg: op.Args[:k.ArgsSize]})
	case *driver.GemmOp:
		return t.gemm(op)
	case *driver.LibraryCallOp:
		call := op.Call
		if call == nil {
			return 0, fmt.Errorf("%w: library call of no function", driver.ErrUnsupported)
		}
		// The user's code may copy between host and device on the stream.
		if err := t.awaitHostDeps(); err != nil {
			return 0, err
		}
		return t.st.Stream.Submit(call)
	case *driver.CopyOp:
		return t.submitCopy(op)
	case *driver.HostFuncOp:
		if op.Func == nil {
			return 0, fmt.Errorf("%w: host function of no function", driver.ErrUnsupported)
		}
		return t.host.Submit(op.Func)
	case *driver.ReplayOp:
		return t.replay(op)
	case *driver.PeerCopyOp:
		if err := t.awaitHostDeps(); err != nil {
			return 0, err
		}
		return t.submitPeerCopy(op)
	case *driver.SignalOp:
		if op.Import {
			return t.importSignal(op.Signal)
		}
		return t.exportSignal(op.Signal)
	}
	return 0, fmt.Errorf("%w: %T", driver.ErrUnsupported, op)
}

// submitCopy puts a copy on the HIP stream; one between host and device
// first waits for the host functions the stream waits for
// (awaitHostDeps).
func (t *Task) submitCopy(op *driver.CopyOp) (uint64, error) {
	hp := t.d.rt.HIP
	switch op.Direction {
	case driver.HostToDevice:
		if err := t.awaitHostDeps(); err != nil {
			return 0, err
		}
		dst, src, n := hip.DevicePtr(op.Dst), op.Host, op.Size
		return t.st.Stream.Submit(func(s uintptr) error { return hp.MemcpyHtoDAsync(dst, src, n, hip.Stream(s)) })
	case driver.DeviceToHost:
		if err := t.awaitHostDeps(); err != nil {
			return 0, err
		}
		dst, src, n := op.Host, hip.DevicePtr(op.Src), op.Size
		return t.st.Stream.Submit(func(s uintptr) error { return hp.MemcpyDtoHAsync(dst, src, n, hip.Stream(s)) })
	case driver.DeviceToDevice:
		dst, src, n := hip.DevicePtr(op.Dst), hip.DevicePtr(op.Src), op.Size
		return t.st.Stream.Submit(func(s uintptr) error { return hp.MemcpyDtoDAsync(dst, src, n, hip.Stream(s)) })
	}
	return 0, fmt.Errorf("%w: copy of direction %d", driver.ErrUnsupported, op.Direction)
}

// awaitHostDeps waits on the host for the host functions the task's stream
// waits for on the device (directly, or through the queues and streams it
// waits for), before a copy between host and device memory or between
// GPUs, or a library call that may make one, goes on the stream: each is a
// boundary host wait, counted.
//
// HIP does such a copy through ROCr's copy queue of its direction (an SDMA
// engine, or a blit-kernel queue), one per GPU, shared by every stream and
// by synchronous hipMemcpy, with the stream's pending work as the copy's
// dependency (clr rocblit.cpp, KernelBlitManager::copyBuffer and
// DmaBlitManager::hsaCopy; ROCr amd_gpu_agent.cpp, GpuAgent::InitDma; a
// dependency is a barrier-AND packet on the blit queue, amd_blit_kernel.cpp
// BlitKernel::SubmitLinearCopyCommand, or poll packets on the SDMA ring).
// Queued there behind a stream that waits for a host function, it blocks
// that queue until the function has returned, and the function's own
// synchronous copies (HostAccess) wait behind it: both hang. Kernels and
// device-to-device copies run on the stream's own hardware queue and keep
// waiting on the device.
func (t *Task) awaitHostDeps() error {
	var buf [4]syncstate.Fence
	live := t.st.Stream.HostDeps().Live(buf[:0])
	for _, f := range live {
		t.sinks.HostWait(syncstate.ReasonBoundary)
		err := f.TL.WaitHost(f.Ticket)
		if err != nil && f.Ticket > f.TL.Completed() {
			return syncstate.WaitError(f, err)
		}
		// A failed function is complete too: the copy does not depend on
		// it through the stream, only what reads its output does (that
		// op's own dependency reports the failure).
	}
	return nil
}

var _ driver.LibraryHolder = (*Task)(nil)

// ReadyLibrary implements driver.LibraryHolder with the waits Submit
// makes for a library call: for the host functions the stream waits for
// (the call may copy between host and device), and the throttle.
func (t *Task) ReadyLibrary() error {
	if err := t.awaitHostDeps(); err != nil {
		return err
	}
	return t.st.Stream.Throttle()
}

// HoldLibrary implements driver.LibraryHolder with the checks Submit makes
// for a library call: the device's fault, the stream's.
func (t *Task) HoldLibrary() (uintptr, error) {
	if p := t.d.faultErr.Load(); p != nil {
		return 0, *p
	}
	return t.held.Hold(t.st.Stream)
}

// ReleaseLibrary implements driver.LibraryHolder.
func (t *Task) ReleaseLibrary(enqueued bool) uint64 { return t.held.Release(t.st.Stream, enqueued) }

// gemm runs rocBLAS on the task's stream.
func (t *Task) gemm(g *driver.GemmOp) (uint64, error) {
	c, err := t.rocGemm(g)
	if err != nil {
		return 0, err
	}
	// c.run does not escape: the eager path allocates nothing here.
	return t.st.Stream.Submit(c.run)
}

// blasGemm is a gemm's rocBLAS call with its arguments converted once:
// run by the eager path at once, kept by a recording for its replays.
type blasGemm struct {
	blas                   rocblas.Library
	h                      rocblas.Handle
	opA, opB               rocblas.Operation
	m, n, k, lda, ldb, ldc int32
	a, b, c                hip.DevicePtr
	alpha, beta            float64
	dtype                  kernels.DType
}

// rocGemm converts g for rocBLAS on the task's handle.
func (t *Task) rocGemm(g *driver.GemmOp) (blasGemm, error) {
	blas := t.d.rt.BLAS
	if blas == nil {
		return blasGemm{}, fmt.Errorf("%w: %w", ErrNoBLAS, t.d.rt.BLASErr)
	}
	if g.DType != kernels.F32 && g.DType != kernels.F64 {
		return blasGemm{}, fmt.Errorf("%w: gemm of %v", driver.ErrUnsupported, g.DType)
	}
	c := blasGemm{blas: blas, h: t.st.BLAS, opA: rocblas.OperationNone, opB: rocblas.OperationNone,
		m: int32(g.M), n: int32(g.N), k: int32(g.K), lda: int32(g.LDA), ldb: int32(g.LDB), ldc: int32(g.LDC),
		a: hip.DevicePtr(g.A), b: hip.DevicePtr(g.B), c: hip.DevicePtr(g.C), alpha: g.Alpha, beta: g.Beta, dtype: g.DType}
	if g.TransA {
		c.opA = rocblas.OperationTranspose
	}
	if g.TransB {
		c.opB = rocblas.OperationTranspose
	}
	return c, nil
}

// run is the rocBLAS call (the stream is the handle's).
func (c *blasGemm) run(uintptr) error {
	if c.dtype == kernels.F32 {
		return c.blas.Sgemm(c.h, c.opA, c.opB, c.m, c.n, c.k, float32(c.alpha), c.a, c.lda, c.b, c.ldb, float32(c.beta), c.c, c.ldc)
	}
	return c.blas.Dgemm(c.h, c.opA, c.opB, c.m, c.n, c.k, c.alpha, c.a, c.lda, c.b, c.ldb, c.beta, c.c, c.ldc)
}

// BLASHandle implements driver.BLASHandler: the task's rocBLAS handle (0
// without rocBLAS), bound to its stream, for library calls of the user's.
func (t *Task) BLASHandle() uintptr { return uintptr(t.st.BLAS) }

// Runtimes returns the libraries the device runs on (the emulated ones on
// the emulator).
func (d *Device) Runtimes() Runtimes { return d.rt }

// Libraries returns the HIP runtime and the rocBLAS library the device
// runs on (blas is nil without rocBLAS), for library calls of the user's.
func (d *Device) Libraries() (h hip.Runtime, blas rocblas.Library) { return d.rt.HIP, d.rt.BLAS }

// Close implements driver.Task: it drains and releases.
func (t *Task) Close() error {
	var errs []error
	if t.host != nil {
		// First: its functions may wait for the stream and queue.
		errs = append(errs, t.host.Close())
		t.host = nil
	}
	if t.st.BLAS != 0 {
		if t.d.Fault() != nil {
			// rocblas_destroy_handle hipFrees the workspace, which waits
			// for the evicted streams.
			t.d.leak("rocBLAS handle")
		} else {
			errs = append(errs, t.d.rt.BLAS.DestroyHandle(t.st.BLAS))
		}
		t.st.BLAS = 0
	}
	if t.st.Stream != nil {
		errs = append(errs, t.st.Stream.Close())
		if t.st.Stream.Evicted() != nil {
			t.d.leak("HIP stream " + t.st.Stream.Name())
		}
		t.st.Stream = nil
	}
	t.d.untrackTask(t)
	if q := t.st.Queue; q != nil {
		errs = append(errs, q.WaitHost(q.LastTicket()))
		if q.Completed() < q.LastTicket() {
			// The drain ran out of time (or the queue broke): the next
			// task would queue behind work that may never end.
			t.d.queues.Retire(q)
		} else {
			t.d.queues.Release(q)
		}
		t.st.Queue = nil
	}
	return errors.Join(errs...)
}

// hipStreamMemoryLookup is the first HIP release (ROCm 5.6.0, clr commit
// b40823ccc "Enable ROCr interop") whose hipStreamWaitValue64 and
// hipStreamWriteValue64 accept memory HIP did not allocate, by asking ROCr
// about it. Earlier releases return hipErrorInvalidValue for an HSA
// signal's value address (seen with HIP 5.2.3).
const hipStreamMemoryLookup = 50_600_000

// bridgeSupported says whether HIP takes HSA signals' value addresses in
// stream memory operations, which the bridge needs, and why not.
func bridgeSupported(h hip.Runtime) (bool, string) {
	v, err := h.RuntimeVersion()
	if err != nil {
		return false, fmt.Sprintf("hipRuntimeGetVersion failed (%v), so whether HIP accepts HSA signal memory in stream memory operations is unknown", err)
	}
	if v < hipStreamMemoryLookup {
		return false, fmt.Sprintf("HIP %d.%d.%d refuses HSA signal memory in hipStreamWaitValue64/hipStreamWriteValue64 (accepted from HIP 5.6)",
			v/10_000_000, v/100_000%100, v%100_000)
	}
	return true, ""
}

// hipToHSA bridges a HIP fence to an HSA queue: the producer stream stores
// 0 into a pooled signal once its earlier work (the fence included) is
// done, and the consumer's barrier-AND packet waits for that signal.
// hipStreamWriteValue64 needs the signal's value address, which
// hsa_amd_signal_value_pointer gives only for non-interrupt signals: it
// comes from the GPU-only bridge pool.
func (d *Device) hipToHSA(f syncstate.Fence) (*queue.Signal, error) {
	p, ok := f.TL.(*stream.Stream)
	if !ok {
		return nil, fmt.Errorf("rocmdev: cannot bridge from %s", f.TL.Name())
	}
	if f.Ticket <= p.Completed() {
		return nil, nil
	}
	sig, ptr, err := d.bridgeSignal()
	if err != nil {
		return nil, err
	}
	hp := d.rt.HIP
	t, err := p.Submit(func(s uintptr) error { return hp.StreamWriteValue64(hip.Stream(s), ptr, 0, 0) })
	if err != nil {
		sig.Release()
		if f.Ticket <= p.Completed() {
			// The stream broke after the check above, after the fence
			// had completed: there is nothing to wait for.
			return nil, p.Failed(f.Ticket)
		}
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
	p.OnFailureHook(t, (*completeSignal)(sig))
	p.AfterCompleteHook(t, (*releaseSignal)(sig))
	return sig, nil
}

// completeSignal and releaseSignal are a bridge signal's stream hooks:
// conversions of the signal itself, so a crossing allocates no closure.
type (
	completeSignal queue.Signal
	releaseSignal  queue.Signal
)

func (s *completeSignal) Run() { (*queue.Signal)(s).Complete() }
func (s *releaseSignal) Run()  { (*queue.Signal)(s).Release() }

// hsaToHIP bridges an HSA fence to a HIP stream. The producer's completion
// signals are pooled and reset on reuse, so a marker
// packet on the producer queue completes a GPU-only signal once the queue
// has got that far (packets complete in order), and the stream waits with
// hipStreamWaitValue64 until that signal reads 0. The signal stays
// retained (so the pool cannot reset it to 1) until the stream has passed
// the wait.
func (d *Device) hsaToHIP(s *stream.Stream, f syncstate.Fence) (uint64, error) {
	p, ok := f.TL.(*queue.Queue)
	if !ok {
		return 0, fmt.Errorf("rocmdev: cannot bridge from %s", f.TL.Name())
	}
	if f.Ticket <= p.Completed() {
		return 0, nil
	}
	sig, ptr, err := d.bridgeSignal()
	if err != nil {
		return 0, err
	}
	sig.Retain() // one reference for the marker packet, one for the stream
	if _, err := p.Marker(sig); err != nil {
		sig.Release()
		// The queue broke after the check above, at a later packet: the
		// fence had completed by then, and a broken queue takes no
		// marker. Failing here failed an op that did not depend on the
		// fault (the fault fuzzer's seed 133 under DeviceBridge).
		if before, ferr := p.VisibleBeforeBreak(f.Ticket); before {
			return 0, ferr
		}
		return 0, err
	}
	return d.streamWaitZero(s, f, sig, ptr)
}

// bridgeSignal returns a GPU-only signal from the bridge pool and the
// address of its value, which hipStreamWaitValue64 and
// hipStreamWriteValue64 take.
func (d *Device) bridgeSignal() (*queue.Signal, unsafe.Pointer, error) {
	sig, err := d.bridgeSignals.Get()
	if err != nil {
		return nil, nil, err
	}
	ptr, err := d.rt.HSA.SignalValuePointer(sig.H)
	if err != nil {
		sig.Release()
		return nil, nil, err
	}
	return sig, ptr, nil
}

// streamWaitZero makes s wait on the device for fence f until the value
// at ptr (sig's) reads 0, returns the wait's ticket, and hands the
// stream's reference to sig back once that wait has completed (at once
// when it could not be enqueued).
func (d *Device) streamWaitZero(s *stream.Stream, f syncstate.Fence, sig *queue.Signal, ptr unsafe.Pointer) (uint64, error) {
	hp := d.rt.HIP
	t, err := s.SubmitWait(f, func(hs uintptr) error {
		return hp.StreamWaitValue64(hip.Stream(hs), ptr, 0, hip.StreamWaitValueEq, ^uint64(0))
	})
	if err != nil {
		sig.Release()
		return 0, err
	}
	s.AfterCompleteHook(t, (*releaseSignal)(sig))
	return t, nil
}

// storeZeroOnComplete has the lane's goroutine set sig to 0 once the
// function at ticket has run, holding a reference to sig until it has
// stored. When the ticket is already complete it returns false and gives
// back both that reference and the caller's.
func (d *Device) storeZeroOnComplete(lane *hostlane.Lane, ticket uint64, sig *queue.Signal) bool {
	sig.Retain() // the lane's reference
	rt := d.rt.HSA
	if !lane.OnComplete(ticket, func() { rt.SignalStoreScrelease(sig.H, 0); sig.Release() }) {
		sig.Release()
		sig.Release()
		return false
	}
	return true
}

// hostToHSA lets an HSA queue wait on the device for a host lane's fence:
// a pooled signal at 1 that the lane's goroutine sets to 0 once the
// function at the fence has run (or failed: the queue then learns of the
// failure from its upstream record), which a barrier-AND packet waits for.
// The signal is retained for the lane until it has stored.
func (d *Device) hostToHSA(f syncstate.Fence) (*queue.Signal, error) {
	lane, ok := f.TL.(*hostlane.Lane)
	if !ok {
		return nil, fmt.Errorf("rocmdev: %s is not a host lane", f.TL.Name())
	}
	sig, err := d.signals.Get()
	if err != nil {
		return nil, err
	}
	if !d.storeZeroOnComplete(lane, f.Ticket, sig) {
		return nil, nil // already complete
	}
	return sig, nil
}

// hostToHIP lets a HIP stream wait on the device for a host lane's fence:
// hipStreamWaitValue64 until a GPU-only signal (which has a value address)
// reads 0, stored by the lane's goroutine after the function. The lane is
// told first, so that the stream never waits for a store that was due
// before it asked.
func (d *Device) hostToHIP(s *stream.Stream, f syncstate.Fence) (uint64, error) {
	lane, ok := f.TL.(*hostlane.Lane)
	if !ok {
		return 0, fmt.Errorf("rocmdev: %s is not a host lane", f.TL.Name())
	}
	sig, ptr, err := d.bridgeSignal()
	if err != nil {
		return 0, err
	}
	if !d.storeZeroOnComplete(lane, f.Ticket, sig) {
		return 0, nil
	}
	return d.streamWaitZero(s, f, sig, ptr)
}

// HIPIndex is the device's HIP device number (what RCCL calls the device;
// HSA's and HIP's orders may differ).
func (d *Device) HIPIndex() int { return d.hipIndex }

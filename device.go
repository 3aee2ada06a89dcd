package rocsync

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/emu"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/tls"
)

// drivers is one set of runtimes: the real libraries or the emulator.
type drivers struct {
	hsa     hsa.Runtime
	hip     hip.Runtime
	blas    rocblas.Library // nil when rocBLAS is missing
	blasErr error           // why it is missing
	machine *emu.Machine    // set for the emulator
	name    string
}

// Device is one GPU opened through one backend. It is safe for concurrent
// use; tasks are the unit of ordering.
type Device struct {
	drv     drivers
	index   int
	agent   hsa.Agent
	isa     string
	kernarg hsa.MemoryPool
	log     zerolog.Logger
	opts    Options

	engine  syncstate.Engine
	stats   syncstate.Stats
	signals *queue.SignalPool
	events  *stream.EventPool
	queues  tls.QueuePool

	kernelsOnce sync.Once
	kernelsErr  error
	kernelObjs  [numKernelOps][2]kernelObject

	mu          sync.Mutex
	tasks       []*Task
	defaultTask *Task
	frees       pendingFrees
	closed      atomic.Bool
	closeMu     sync.RWMutex // held for reading by every op, for writing by Close
}

type kernelObject struct {
	handle      uint64       // HSA kernel object
	function    hip.Function // the same kernel through HIP, under Unified
	kernargSize uint32
	groupSize   uint32
	privateSize uint32
	workgroup   uint16
}

const numKernelOps = 16

// Open opens one GPU. With Backend Auto it uses the real ROCm stack when it
// works and the emulator otherwise, and logs one line saying which and why.
func Open(o Options) (*Device, error) {
	devs, err := open(o, false)
	if err != nil {
		return nil, err
	}
	return devs[0], nil
}

// OpenAll opens every GPU of the chosen backend; the devices share the
// runtimes but nothing else. Ops that mix arrays of two devices fail with
// ErrDeviceMismatch.
func OpenAll(o Options) ([]*Device, error) { return open(o, true) }

func logger(o Options) zerolog.Logger {
	if o.Logger != nil {
		return *o.Logger
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.InfoLevel).With().Timestamp().Logger()
}

func open(o Options, all bool) ([]*Device, error) {
	if o.QueueSize == 0 {
		o.QueueSize = 1024
	}
	if o.MaxQueues == 0 {
		o.MaxQueues = 8
	}
	log := logger(o)
	var drv drivers
	switch o.Backend {
	case Emulator:
		drv = emulatorDrivers(o)
		log.Info().Str("backend", "emulator").Str("reason", "requested").Msg("rocsync: using the emulated AMD device")
	case ROCm:
		d, err := rocmDrivers()
		if err != nil {
			return nil, &Error{Op: "Open", Kind: ErrUnavailable, Detail: "the ROCm backend was requested", Err: err}
		}
		drv = d
		log.Info().Str("backend", "rocm").Str("reason", "requested").Msg("rocsync: using the real ROCm stack")
	case Auto:
		d, err := rocmDrivers()
		if err != nil {
			drv = emulatorDrivers(o)
			log.Info().Str("backend", "emulator").Str("reason", err.Error()).Msg("rocsync: ROCm unavailable, using the emulated AMD device")
		} else {
			drv = d
			log.Info().Str("backend", "rocm").Str("reason", "ROCm stack found and initialised").Msg("rocsync: using the real ROCm stack")
		}
	default:
		return nil, newErr("Open", ErrInvalid, "unknown backend %d", uint8(o.Backend))
	}
	if drv.blas == nil && drv.blasErr != nil {
		log.Warn().Err(drv.blasErr).Msg("rocsync: rocBLAS unavailable; MatMul will fail, everything else works")
	}
	agents, err := gpuAgents(drv.hsa)
	if err != nil {
		return nil, &Error{Op: "Open", Kind: ErrUnavailable, Detail: "listing agents", Err: err}
	}
	kernarg, err := kernargPool(drv.hsa)
	if err != nil {
		return nil, &Error{Op: "Open", Kind: ErrUnavailable, Detail: "finding the kernarg pool", Err: err}
	}
	first, last := o.Device, o.Device
	if all {
		first, last = 0, len(agents)-1
	}
	if first < 0 || last >= len(agents) {
		return nil, newErr("Open", ErrInvalid, "device %d requested, %d present", o.Device, len(agents))
	}
	var devs []*Device
	for i := first; i <= last; i++ {
		d, err := newDevice(drv, o, log, i, agents[i], kernarg)
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

func emulatorDrivers(o Options) drivers {
	e := o.Emulator
	m := emu.New(emu.Options{Devices: e.Devices, ISA: e.ISA, MemoryPerDevice: e.MemoryPerDevice,
		Hazards: e.HazardChecker, MaxDelay: e.MaxDelay, Seed: e.Seed})
	_ = m.HSA().Init()
	_ = m.HIP().Init()
	return drivers{hsa: m.HSA(), hip: m.HIP(), blas: m.BLAS(), machine: m, name: "emulator"}
}

// rocmDrivers loads and initialises the real libraries.
func rocmDrivers() (drivers, error) {
	h, err := hsa.Open()
	if err != nil {
		return drivers{}, err
	}
	if err := h.Init(); err != nil {
		return drivers{}, err
	}
	hp, err := hip.Open()
	if err != nil {
		_ = h.ShutDown()
		return drivers{}, err
	}
	if n, err := hp.DeviceCount(); err != nil || n == 0 {
		_ = h.ShutDown()
		if err == nil {
			err = hip.ErrNoDevice
		}
		return drivers{}, err
	}
	d := drivers{hsa: h, hip: hp, name: "rocm"}
	if b, err := openRocBLAS(hp.Major()); err != nil {
		d.blasErr = err
	} else {
		d.blas = b
	}
	return d, nil
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
	return 0, errors.New("no kernarg memory pool")
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

func newDevice(drv drivers, o Options, log zerolog.Logger, index int, agent hsa.Agent, kernarg hsa.MemoryPool) (*Device, error) {
	isa, err := agentISA(drv.hsa, agent)
	if err != nil {
		return nil, &Error{Op: "Open", Kind: ErrUnavailable, Detail: "reading the GPU's ISA", Err: err}
	}
	d := &Device{drv: drv, index: index, agent: agent, isa: isa, kernarg: kernarg, log: log, opts: o}
	d.engine = syncstate.Engine{Policy: o.Policy, DisableWaits: o.disableWaits}
	d.signals = queue.NewSignalPool(drv.hsa, 0)
	d.events = stream.NewEventPool(drv.hip, index)
	d.queues = tls.QueuePool{Max: o.MaxQueues, Create: func(i int) (*queue.Queue, error) {
		return queue.New(drv.hsa, queue.Config{Name: fmt.Sprintf("gpu%d/hsa-q%d", index, i), Agent: agent,
			Size: o.QueueSize, KernargPool: kernarg, Signals: d.signals, Sinks: syncstate.Sinks{&d.stats}})
	}}
	return d, nil
}

// Backend names what the device runs on: "emulator" or "rocm".
func (d *Device) Backend() string { return d.drv.name }

// ISA is the GPU's target name, such as "amdgcn-amd-amdhsa--gfx90a".
func (d *Device) ISA() string { return d.isa }

// Index is the GPU's index.
func (d *Device) Index() int { return d.index }

// Policy is the device's policy.
func (d *Device) Policy() Policy { return d.engine.Policy }

// Stats returns the device's counters: every task's work and every host
// wait, including read-backs and frees.
func (d *Device) Stats() Stats { return d.stats.Snapshot() }

// Stats is a snapshot of counters.
type Stats = syncstate.Snapshot

// Reason says why the host waited.
type Reason = syncstate.Reason

// The host-wait reasons.
const (
	ReasonBoundary   = syncstate.ReasonBoundary
	ReasonCrossQueue = syncstate.ReasonCrossQueue
	ReasonReadBack   = syncstate.ReasonReadBack
	ReasonSync       = syncstate.ReasonSync
	ReasonFree       = syncstate.ReasonFree
	ReasonThrottle   = syncstate.ReasonThrottle
	ReasonWaitAlways = syncstate.ReasonWaitAlways
)

// Hazards returns what the emulator's hazard checker found (nil on real
// hardware or with the checker off).
func (d *Device) Hazards() []error {
	if d.drv.machine == nil {
		return nil
	}
	var out []error
	for _, h := range d.drv.machine.Hazards() {
		out = append(out, h)
	}
	return out
}

// Emulated reports whether the device is the emulator.
func (d *Device) Emulated() bool { return d.drv.machine != nil }

// SignalsCreated and EventsCreated count the HSA signals and HIP events the
// device has ever created: both stay flat in steady state, because they
// are pooled.
func (d *Device) SignalsCreated() uint64 { return d.signals.Created() }

// EventsCreated: see SignalsCreated.
func (d *Device) EventsCreated() uint64 { return d.events.Created() }

func (d *Device) enter(op string) error {
	d.closeMu.RLock()
	if d.closed.Load() {
		d.closeMu.RUnlock()
		return newErr(op, ErrClosed, "device is closed")
	}
	return nil
}

func (d *Device) leave() { d.closeMu.RUnlock() }

// loadKernels loads the code object for the GPU's ISA once, and looks up
// every kernel object.
func (d *Device) loadKernels() error {
	d.kernelsOnce.Do(func() { d.kernelsErr = d.doLoadKernels() })
	return d.kernelsErr
}

func (d *Device) doLoadKernels() error {
	rt := d.drv.hsa
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
	if d.engine.Policy == Unified {
		// Unified launches the same code object through HIP, on the
		// task's stream next to rocBLAS.
		if module, err = d.drv.hip.ModuleLoadData(d.index, code); err != nil {
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
				if k.function, err = d.drv.hip.ModuleGetFunction(module, op.KernelName(dt)); err != nil {
					return err
				}
			}
			d.kernelObjs[op][di] = k
		}
	}
	return nil
}

// NewTask makes a task: an HSA queue from the device's pool, a HIP stream
// and a rocBLAS handle bound to it.
func (d *Device) NewTask() (*Task, error) {
	if err := d.enter("NewTask"); err != nil {
		return nil, err
	}
	defer d.leave()
	return d.newTask()
}

func (d *Device) newTask() (*Task, error) {
	t := &Task{dev: d}
	t.sinks = syncstate.Sinks{&t.st.Stats, &d.stats}
	d.mu.Lock()
	n := len(d.tasks)
	d.mu.Unlock()
	var err error
	t.st.Stream, err = stream.New(d.drv.hip, stream.Config{Name: fmt.Sprintf("gpu%d/hip-s%d", d.index, n),
		Device: d.index, Events: d.events, Sinks: t.sinks, Domain: syncstate.DomainLibrary})
	if err != nil {
		return nil, &Error{Op: "NewTask", Kind: ErrUnavailable, Detail: "creating a HIP stream", Err: err}
	}
	if d.engine.Policy != Unified {
		if t.st.Queue, err = d.queues.Acquire(); err != nil {
			_ = t.st.Stream.Close()
			return nil, &Error{Op: "NewTask", Kind: ErrUnavailable, Detail: "creating an HSA queue", Err: err}
		}
	}
	if d.drv.blas != nil {
		h, err := d.drv.blas.CreateHandle(d.index)
		if err == nil {
			err = d.drv.blas.SetStream(h, t.st.Stream.HIPStream())
		}
		if err != nil {
			t.release()
			return nil, &Error{Op: "NewTask", Kind: ErrUnavailable, Detail: "creating a rocBLAS handle", Err: err}
		}
		t.st.BLAS = h
	}
	d.mu.Lock()
	d.tasks = append(d.tasks, t)
	d.mu.Unlock()
	return t, nil
}

// DefaultTask returns the device's shared default task, for simple
// programs that use one goroutine.
func (d *Device) DefaultTask() *Task {
	d.mu.Lock()
	t := d.defaultTask
	d.mu.Unlock()
	if t != nil {
		return t
	}
	t, err := d.NewTask()
	if err != nil {
		return &Task{dev: d, err: err}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.defaultTask == nil {
		d.defaultTask = t
	}
	return d.defaultTask
}

// Synchronize waits on the host for all work of every task, then releases
// freed memory whose work is done.
func (d *Device) Synchronize() error {
	if err := d.enter("Synchronize"); err != nil {
		return err
	}
	defer d.leave()
	return d.synchronize()
}

func (d *Device) synchronize() error {
	d.mu.Lock()
	tasks := append([]*Task(nil), d.tasks...)
	d.mu.Unlock()
	var errs []error
	for _, t := range tasks {
		errs = append(errs, t.drain())
	}
	errs = append(errs, d.frees.poll(d, true))
	return errors.Join(errs...)
}

// Close waits for all work, frees every pending array and releases the
// device's queues, streams and pools. Arrays still alive are released too;
// using them afterwards returns ErrClosed.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closed.Swap(true) {
		return nil
	}
	errs := []error{d.synchronize()}
	d.mu.Lock()
	tasks := d.tasks
	d.tasks = nil
	d.mu.Unlock()
	for _, t := range tasks {
		errs = append(errs, t.release())
	}
	errs = append(errs, d.queues.Close(), d.signals.Destroy(), d.events.Destroy())
	return errors.Join(errs...)
}

package rocsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/userkernel"
)

// Device is one GPU opened through one backend. It is safe for concurrent
// use; tasks are the unit of ordering.
type Device struct {
	drv     driver.Device
	backend string
	// system is the emulated machine the device runs on (nil on real
	// hardware), asked for its instruments; hosts is its HostTracker.
	system any
	hosts  driver.HostTracker
	index  int
	log    zerolog.Logger

	engine syncstate.Engine
	stats  *syncstate.Stats // the driver's counts and the device's own
	// taskStats are the tasks' counts, each task in its shard (Task.shard),
	// so that tasks on different cores count on different cache lines;
	// Stats sums them with stats.
	taskStats syncstate.ShardedStats
	// test are the device's test switches (Options).
	test testhooks.Device

	mu          sync.Mutex
	tasks       []*Task
	defaultMu   sync.Mutex // held while the default task is made
	defaultTask *Task
	frees       pendingFrees
	staging     stagingPool // pinned memory for asynchronous copies
	cache       *memCache
	closed      atomic.Bool
	closeGuard  closeGuard // held for reading by every op, for writing by Close (guard.go)

	// User kernels: the registry (made at the first LoadKernel) and the
	// builder it compiles with.
	kernelsOnce   sync.Once
	kernels       *userkernel.Registry
	kernelLoader  *kernelLoader
	kernelBuilder *userkernel.Builder
	// cacheWarned: the builder's disk cache failed and the log said so,
	// once per device (warnCacheErrors).
	cacheWarned atomic.Bool

	launchBlocking bool
	reduce         reduceWorkspace // reduce.go
	syncDebug      SyncDebugMode
	maxPerDevice   uint64        // Options.MaxInFlightPerDevice
	sinceCheck     atomic.Uint64 // ops submitted since the last check of it

	trace      *traceProc   // nil unless tracing (Options.Trace, ROCSYNC_TRACE)
	obs        *observer    // the trace and the debug log, hearing the op path: nil when both are off
	traceTasks atomic.Int32 // numbers the tasks' host tracks

	waitTimeout time.Duration // Options.WaitTimeout resolved (0: none), for the emulated collectives

	openID uint64 // which Open made it, for messages that name it

	// openCall is the Open or OpenAll call that made the device: devices
	// of one call share their runtimes, and only they copy between each
	// other (peer.go).
	openCall uint64
	peer     peerCopies // peer.go
}

// throttleDevice enforces Options.MaxInFlightPerDevice: when the ops in
// flight over all tasks reach it, it waits on the host for the older half
// of the busiest timeline. Called every maxPerDevice/2 ops, by op.
func (d *Device) throttleDevice(op string, sinks syncstate.Sinks, host int) error {
	for {
		var busiest *Task
		var busiestTL syncstate.Timeline
		var most, total uint64
		d.mu.Lock()
		for _, t := range d.tasks {
			if !t.lifeMu.TryLock() {
				continue // closing: it drains itself
			}
			if !t.released {
				k, l := t.drv.Timeline(driver.LaneKernel), t.drv.Timeline(driver.LaneLibrary)
				for i, tl := range [3]syncstate.Timeline{k, l, t.hostLane()} {
					if i == 1 && l == k {
						continue
					}
					n := tl.LastTicket() - min(tl.Completed(), tl.LastTicket())
					total += n
					if n > most {
						most, busiest, busiestTL = n, t, tl
					}
				}
			}
			t.lifeMu.Unlock()
		}
		d.mu.Unlock()
		if total < d.maxPerDevice || busiest == nil {
			return nil
		}
		busiest.lifeMu.Lock()
		var err error
		if !busiest.released {
			target := busiestTL.LastTicket() - most/2
			if d.syncDebug != SyncDebugOff {
				err = d.implicitWait(op, fmt.Sprintf("%s#%d (device cap %d)", busiestTL.Name(), target, d.maxPerDevice), ReasonThrottle)
			}
			if err == nil {
				sinks.HostWait(ReasonThrottle)
				tw := d.obs.waitBegin(op, syncstate.Fence{TL: busiestTL, Ticket: target}, ReasonThrottle, host)
				err = busiestTL.WaitHost(target)
				d.obs.waitEnd(tw, err)
				if err != nil && busiestTL.Failed(target) != nil {
					// Failed work is its waiters' to report; it holds
					// nothing back any more.
					busiest.lifeMu.Unlock()
					return nil
				}
			}
		}
		busiest.lifeMu.Unlock()
		if err != nil {
			return err
		}
	}
}

// implicitHostWait is sync-debug mode's report of a host wait that is not
// a read-back or an explicit Synchronize.
func (d *Device) implicitHostWait(op string, consumer syncstate.Timeline, f syncstate.Fence, r Reason) error {
	return d.implicitWait(op, f.String()+" -> "+consumer.Name(), r)
}

func (d *Device) implicitWait(op, crossing string, r Reason) error {
	if d.syncDebug == SyncDebugFail {
		return &Error{Op: op, Kind: ErrHostWait, Detail: fmt.Sprintf("%s host wait for %s", r, crossing), Err: syncstate.ErrWaitRefused}
	}
	d.log.Warn().Str("op", op).Str("crossing", crossing).Stringer("reason", r).Msg("rocsync: implicit host wait")
	return nil
}

// Open opens one GPU. With Backend Auto it uses the real ROCm stack when it
// works and the emulator otherwise, and logs one line saying which and why.
func Open(o Options) (*Device, error) {
	devs, err := open(o, false)
	if err != nil {
		return nil, err
	}
	return devs[0], nil
}

// OpenAll opens every GPU of the chosen backend. Ops that mix arrays of two
// devices fail with ErrDeviceMismatch; data moves between them with
// Task.CopyPeer, ordered across devices.
func OpenAll(o Options) ([]*Device, error) { return open(o, true) }

// family is one opened backend: its devices and what to call it.
type family struct {
	name     string
	devs     []driver.Device
	system   any // driver.Family.System
	stats    []*syncstate.Stats
	throttle []*atomic.Pointer[Device]
}

func open(o Options, all bool) ([]*Device, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	log, err := logger(o)
	if err != nil {
		return nil, err
	}
	if o.Backend <= CUDA {
		if err := requireDrivers(o.Backend); err != nil {
			return nil, err
		}
	}
	var fam family
	switch o.Backend {
	case Emulator:
		fam, err = openFamily("emulator", o, &log)
		log.Info().Str("backend", "emulator").Msg("rocsync: using the emulated AMD device, as requested")
	case ROCm:
		fam, err = openFamily("rocm", o, &log)
		if err != nil && !errors.Is(err, driver.ErrInvalidConfig) {
			return nil, &Error{Op: "Open", Kind: ErrUnavailable, Detail: "the ROCm backend was requested", Err: err}
		}
		if err != nil {
			break
		}
		log.Info().Str("backend", "rocm").Msg("rocsync: using the real ROCm stack, as requested")
	case CUDA:
		fam, err = openFamily("cuda", o, &log)
		if err != nil {
			return nil, &Error{Op: "Open", Kind: ErrUnavailable, Detail: "the CUDA backend was requested", Err: err}
		}
		log.Info().Str("backend", "cuda").Msg("rocsync: using the CUDA driver and cuBLAS, as requested")
	case Auto:
		// AMD first (rocsync's own platform), then NVIDIA, then the
		// emulator; the choice is logged at info level.
		fam, err = openFamily("rocm", o, &log)
		if err == nil {
			log.Info().Str("backend", "rocm").Msg("rocsync: using the real ROCm stack")
			break
		}
		if errors.Is(err, driver.ErrInvalidConfig) {
			break // the options are wrong, whatever the backend
		}
		rocmErr := err
		fam, err = openFamily("cuda", o, &log)
		if err == nil {
			logCUDAChosen(&log, rocmErr)
			break
		}
		cudaErr := err
		fam, err = openFamily("emulator", o, &log)
		logFallback(&log, rocmErr, cudaErr)
	default:
		return nil, newErr("Open", ErrInvalid, "unknown backend %d", uint8(o.Backend))
	}
	if errors.Is(err, driver.ErrInvalidConfig) {
		return nil, &Error{Op: "Open", Kind: ErrInvalid, Err: err}
	}
	if err != nil {
		return nil, &Error{Op: "Open", Kind: ErrUnavailable, Err: err}
	}
	first, last := o.Device, o.Device
	if all {
		first, last = 0, len(fam.devs)-1
	}
	if first < 0 || last >= len(fam.devs) {
		closeAll(fam.devs)
		return nil, newErr("Open", ErrInvalid, "device %d requested, %d present", o.Device, len(fam.devs))
	}
	var out []*Device
	call := openCalls.Add(1)
	debug := log.GetLevel() <= zerolog.DebugLevel && zerolog.GlobalLevel() <= zerolog.DebugLevel
	for i, dd := range fam.devs {
		if i < first || i > last {
			_ = dd.Close()
			continue
		}
		hosts, _ := fam.system.(driver.HostTracker)
		d := &Device{drv: dd, backend: fam.name, system: fam.system, hosts: hosts, index: i, log: log, openID: openIDs.Add(1), openCall: call, peer: peerCopies{staged: o.test.StagePeerCopies}, test: o.test,
			engine: syncstate.Engine{Policy: o.Policy, Test: testhooks.Engine{DisableWaits: o.test.DisableWaits, DisableCrossDeviceWaits: o.test.DisableCrossDeviceWaits}}, stats: fam.stats[i],
			cache: newMemCache(o.MemoryCache), launchBlocking: o.launchBlocking(), syncDebug: o.SyncDebug,
			reduce:       reduceWorkspace{check: o.CheckReductionWorkspace},
			maxPerDevice: uint64(o.MaxInFlightPerDevice), kernelBuilder: o.KernelBuilder, waitTimeout: o.waitTimeout()}
		if o.SyncDebug != SyncDebugOff {
			d.engine.OnHostWait = d.implicitHostWait
		}
		if tr := traceFor(o); tr != nil {
			d.trace = tr.attach(traceName(o, all, i, fam.name))
			d.trace.wg.Add(1)
			go d.trace.poll(d)
		}
		var log *zerolog.Logger
		if debug {
			log = &d.log
		}
		// The debug log and the trace hear the op path, and the sync
		// core's decisions, through one observer.
		if d.obs = newObserver(d.trace, log); d.obs != nil {
			d.engine.Observer = d.obs
		}
		if i < len(fam.throttle) {
			fam.throttle[i].Store(d)
		}
		out = append(out, d)
	}
	return out, nil
}

func closeAll(devs []driver.Device) {
	for _, d := range devs {
		_ = d.Close()
	}
}

// configs hands each device its driver configuration and keeps the stats
// the device's counters will live in.
type configs struct {
	o        Options
	stats    []*syncstate.Stats
	throttle []*atomic.Pointer[Device] // sync-debug's throttle hooks find their device here
}

func (c *configs) configFor(i int) driver.DeviceConfig {
	for len(c.stats) <= i {
		c.stats = append(c.stats, new(syncstate.Stats))
	}
	cfg := driver.DeviceConfig{Policy: c.o.Policy, QueueSize: c.o.QueueSize, MaxQueues: c.o.MaxQueues, Stats: c.stats[i],
		WaitTimeout: c.o.waitTimeout(), MaxInFlight: c.o.maxInFlight()}
	if c.o.SyncDebug != SyncDebugOff || traceFor(c.o) != nil {
		// The Device is made after its driver: the hook finds it later.
		for len(c.throttle) <= i {
			c.throttle = append(c.throttle, new(atomic.Pointer[Device]))
		}
		slot := c.throttle[i]
		cfg.OnThrottle = func(f syncstate.Fence) error {
			d := slot.Load()
			if d == nil {
				return nil
			}
			if d.syncDebug != SyncDebugOff {
				if err := d.implicitWait("submit", f.String()+" (oldest in flight on its own timeline)", ReasonThrottle); err != nil {
					return err
				}
			}
			d.obs.throttled(f)
			return nil
		}
	}
	return cfg
}

// openFamily opens every device of the driver registered under name.
func openFamily(name string, o Options, log *zerolog.Logger) (family, error) {
	c := &configs{o: o}
	f, err := driver.Open(name, driver.OpenConfig{Config: c.configFor, Log: log, Emulator: o.Emulator})
	if err != nil {
		return family{}, err
	}
	return family{name: name, devs: f.Devices, system: f.System, stats: c.stats, throttle: c.throttle}, nil
}

// requireDrivers fails Open when a driver that backend b tries is not
// registered: the program did not import package backends.
func requireDrivers(b Backend) error {
	need := []Backend{b}
	if b == Auto {
		need = []Backend{ROCm, CUDA, Emulator}
	}
	have := driver.Drivers()
	for _, n := range need {
		if !slices.Contains(have, n.String()) {
			return newErr("Open", ErrUnavailable, `no %q driver is registered: import _ "github.com/rocsync/rocsync/backends"`, n.String())
		}
	}
	return nil
}

// Backend names what the device runs on: "emulator", "rocm" or "cuda".
func (d *Device) Backend() string {
	if d == nil {
		return ""
	}
	return d.backend
}

// Target is the GPU's code target, such as "amdgcn-amd-amdhsa--gfx90a".
func (d *Device) Target() string {
	if d == nil {
		return ""
	}
	return d.drv.Target()
}

// Index is the GPU's index.
func (d *Device) Index() int {
	if d == nil {
		return 0
	}
	return d.index
}

// Policy is the device's policy.
func (d *Device) Policy() Policy {
	if d == nil {
		return 0
	}
	return d.engine.Policy
}

// Stats returns the device's counters: every task's work and every host
// wait, including read-backs and frees.
func (d *Device) Stats() Stats {
	if d == nil {
		return Stats{}
	}
	return statsOf(d.stats.Snapshot().Add(d.taskStats.Snapshot()))
}

// Hazards returns what the emulator's hazard checker found (nil on real
// hardware or with the checker off).
func (d *Device) Hazards() []error {
	if d == nil {
		return nil
	}
	if hr, ok := d.system.(driver.HazardReporter); ok {
		return hr.Hazards()
	}
	return nil
}

// Emulated reports whether the device is the emulator.
func (d *Device) Emulated() bool { return d != nil && d.system != nil }

// Raw calls f with the device's driver value (a driver.Device of the
// backend's driver), for helpers that reach a backend's own libraries,
// such as backends.ROCmLibraries, as database/sql's Conn.Raw does. The
// device stays open while f runs; f must not keep the value. On a closed
// device Raw returns ErrClosed and does not call f.
func (d *Device) Raw(f func(driverDevice any) error) error {
	if err := d.enter("Raw"); err != nil {
		return err
	}
	defer d.leave()
	return f(d.drv)
}

// SignalsCreated counts the HSA signals the device has ever created; pooled,
// the count stays flat in steady state.
func (d *Device) SignalsCreated() uint64 {
	if d == nil {
		return 0
	}
	return d.drv.SignalsCreated()
}

// EventsCreated counts the HIP (or CUDA) events ever created, likewise.
func (d *Device) EventsCreated() uint64 {
	if d == nil {
		return 0
	}
	return d.drv.EventsCreated()
}

func (d *Device) enter(op string) error {
	if d == nil {
		return newErr(op, ErrInvalid, "nil device")
	}
	return d.enterShard(op, 0)
}

// enterShard is enter for a task's op, in the task's shard of the close
// guard (Task.shard).
func (d *Device) enterShard(op string, shard int) error {
	if !d.closeGuard.tryRLock(shard) {
		d.closeGuard.rlockSlow(shard)
	}
	if d.closed.Load() {
		d.closeGuard.runlock(shard)
		return newErr(op, ErrClosed, "device is closed")
	}
	return nil
}

func (d *Device) leave() { d.closeGuard.runlock(0) }

// leaveShard ends enterShard.
func (d *Device) leaveShard(shard int) { d.closeGuard.runlock(shard) }

func (d *Device) countHostWait(r Reason) { syncstate.Sinks{d.stats}.HostWait(r) }

// NewTask makes a task: on ROCm an HSA queue from the device's pool, a HIP
// stream and a rocBLAS handle bound to it.
func (d *Device) NewTask() (*Task, error) {
	if err := d.enter("NewTask"); err != nil {
		return nil, err
	}
	defer d.leave()
	n := int(d.traceTasks.Add(1))
	// Shard 0 of the close guard is the device's own calls'; tasks take
	// the others in turn.
	t := &Task{dev: d, traceHost: n, shard: 1 + (n-1)%(guardShards-1)}
	t.sinks = syncstate.Sinks{&t.stats, d.taskStats.Shard(t.shard)}
	dt, err := d.drv.NewTask(t.sinks)
	if err != nil {
		return nil, &Error{Op: "NewTask", Kind: ErrUnavailable, Err: err}
	}
	t.drv = dt
	d.trace.timeTask(dt)
	d.mu.Lock()
	d.tasks = append(d.tasks, t)
	d.mu.Unlock()
	return t, nil
}

// DefaultTask returns the device's shared default task, for simple
// programs that use one goroutine.
func (d *Device) DefaultTask() *Task {
	if d == nil {
		return &Task{err: newErr("DefaultTask", ErrInvalid, "nil device")}
	}
	d.mu.Lock()
	t := d.defaultTask
	d.mu.Unlock()
	if t != nil {
		return t
	}
	// One maker at a time, so concurrent first calls share one task.
	d.defaultMu.Lock()
	defer d.defaultMu.Unlock()
	d.mu.Lock()
	t = d.defaultTask
	d.mu.Unlock()
	if t != nil {
		return t
	}
	t, err := d.NewTask()
	if err != nil {
		return &Task{dev: d, err: err}
	}
	t.traceHost = hostTrack
	d.mu.Lock()
	d.defaultTask = t
	d.mu.Unlock()
	return t
}

// Synchronize waits on the host for all work of every task, then releases
// freed memory whose work is done.
func (d *Device) Synchronize() error { return d.SynchronizeContext(context.Background()) }

// SynchronizeContext is Synchronize that also returns when ctx is done. It
// cancels the wait, not the GPU work.
func (d *Device) SynchronizeContext(ctx context.Context) error {
	if err := d.enter("Synchronize"); err != nil {
		return err
	}
	defer d.leave()
	return asError("Synchronize", d.synchronize(ctx))
}

func (d *Device) synchronize(ctx context.Context) error {
	d.mu.Lock()
	tasks := append([]*Task(nil), d.tasks...)
	d.mu.Unlock()
	var errs []error
	for _, t := range tasks {
		// A task closing meanwhile has drained itself (lifeMu orders the
		// two), and its timelines are gone.
		t.lifeMu.Lock()
		if !t.released {
			errs = append(errs, t.drain(ctx))
		}
		t.lifeMu.Unlock()
	}
	errs = append(errs, d.peer.waitReaders(ctx, d), d.frees.poll(d, true, true))
	return errors.Join(errs...)
}

// Close waits for all work, frees every pending array and releases the
// device's queues, streams and pools. Using the device, its tasks or its
// arrays afterwards returns ErrClosed. Closing it again returns nil, as
// Task.Close does: a deferred Close after an explicit one is harmless, and
// the first Close reported whatever there was to report.
func (d *Device) Close() error { return d.CloseContext(context.Background()) }

// CloseContext is Close whose drain also ends when ctx is done. A drain
// that runs out of time (ctx, or Options.WaitTimeout) leaves the device
// open, returning an ErrTimeout error: resources the GPU may still use
// are not released under it. Work that failed does not stop Close.
func (d *Device) CloseContext(ctx context.Context) error {
	if d == nil {
		return newErr("Close", ErrInvalid, "nil device")
	}
	if err := fromHostFunc("Close"); err != nil {
		return err
	}
	// Copies out of this device being submitted on other devices' tasks
	// finish first, before the lock (peer.go says why); new ones fail.
	d.peer.beginClose()
	d.closeGuard.lock()
	defer d.closeGuard.unlock()
	if d.closed.Load() {
		return nil
	}
	drained := d.synchronize(ctx)
	if timedOut(drained) {
		d.peer.stayOpen()
		return &Error{Op: "Close", Kind: ErrTimeout, Detail: "work still in flight; the device stays open", Err: drained}
	}
	d.closed.Store(true)
	errs := []error{drained}
	d.mu.Lock()
	tasks := d.tasks
	d.tasks = nil
	d.mu.Unlock()
	for _, t := range tasks {
		t.lifeMu.Lock()
		if !t.released {
			d.trace.drained(t)
			t.released = true
			t.forgetLane()
			errs = append(errs, t.drv.Close())
		}
		t.lifeMu.Unlock()
	}
	// Memory freed while failed work still held it was quarantined (see
	// pendingFrees); with the queues and streams destroyed, and their
	// failed work settled, it can go back now.
	errs = append(errs, d.frees.poll(d, false, true))
	errs = append(errs, d.reduce.release(d), d.cache.trim(d.drv), d.staging.free(d), d.peer.free(d), d.drv.Close())
	err := errors.Join(errs...)
	// The trace is written last, to the user's writer or file: its
	// failure is an I/O error of the trace, not of the device (closed by
	// now), nor bad input.
	if terr := d.trace.detach(); terr != nil {
		kind := ErrUnavailable
		if err != nil {
			kind = kindOf(err)
		}
		return &Error{Op: "Close", Kind: kind, Detail: "closed " + d.String() + ", but writing its trace failed", Err: errors.Join(err, terr)}
	}
	if err != nil {
		return &Error{Op: "Close", Kind: kindOf(err), Detail: "closing " + d.String(), Err: err}
	}
	return nil
}

// openIDs numbers the devices Open makes, so that two opens of one GPU can
// be told apart in messages (gpu0 and gpu0#2).
var openIDs atomic.Uint64

// openCalls numbers the Open and OpenAll calls.
var openCalls atomic.Uint64

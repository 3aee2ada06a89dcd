package emu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// HIP is the emulated HIP runtime. It implements hip.Runtime.
type HIP struct {
	m *Machine

	mu      sync.Mutex
	streams map[hip.Stream]*hstream
	events  map[hip.Event]*hevent
	modules map[hip.Module]map[string]*kernelImpl
	funcs   map[hip.Function]*kernelImpl
	pinned  map[unsafe.Pointer]bool // hipHostMalloc memory
	next    uintptr
	graphs  graphState // stream capture and hipGraph (hipgraph.go)

	maxDynamicLDS atomic.Uint32 // the largest sharedMemBytes launched
}

// MaxDynamicSharedMem is the largest dynamic LDS size (sharedMemBytes) any
// hipModuleLaunchKernel has asked for.
func (h *HIP) MaxDynamicSharedMem() uint32 { return h.maxDynamicLDS.Load() }

var _ hip.Runtime = (*HIP)(nil)

var hipNames = map[hip.ErrorCode]string{
	hip.Success: "hipSuccess", hip.ErrorInvalidValue: "hipErrorInvalidValue", hip.ErrorOutOfMemory: "hipErrorOutOfMemory",
	hip.ErrorNotInitialized: "hipErrorNotInitialized", hip.ErrorNoDevice: "hipErrorNoDevice", hip.ErrorInvalidDevice: "hipErrorInvalidDevice",
	hip.ErrorInvalidImage: "hipErrorInvalidImage", hip.ErrorInvalidHandle: "hipErrorInvalidHandle", hip.ErrorNotFound: "hipErrorNotFound",
	hip.ErrorNotReady: "hipErrorNotReady", hip.ErrorIllegalAddress: "hipErrorIllegalAddress", hip.ErrorLaunchFailure: "hipErrorLaunchFailure",
	hip.ErrorLaunchOutOfResources: "hipErrorLaunchOutOfResources",
	hip.ErrorNotSupported:         "hipErrorNotSupported", hip.ErrorSharedObjectInitFailed: "hipErrorSharedObjectInitFailed",
}

// causedErr is a runtime error whose cause the emulator knows and a real
// runtime would not report: its message is the runtime's (which quotes the
// cause), and errors.Is and errors.As reach both.
type causedErr struct{ err, cause error }

func (e *causedErr) Error() string   { return e.err.Error() }
func (e *causedErr) Unwrap() []error { return []error{e.err, e.cause} }

func hipErr(fn string, c hip.ErrorCode, detail string) error {
	n := hipNames[c]
	t := n
	if detail != "" {
		t = n + ": " + detail
	}
	return &hip.Error{Func: fn, Code: c, Name: n, Text: t}
}

func (h *HIP) init() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams == nil {
		h.streams = map[hip.Stream]*hstream{}
		h.events = map[hip.Event]*hevent{}
		h.modules = map[hip.Module]map[string]*kernelImpl{}
		h.funcs = map[hip.Function]*kernelImpl{}
	}
}

func (h *HIP) handle() uintptr {
	h.next++
	return h.next
}

func (h *HIP) Init() error { h.init(); return nil }

func (h *HIP) DeviceCount() (int, error) {
	if len(h.m.hipDevices) == 0 {
		return 0, hipErr("hipGetDeviceCount", hip.ErrorNoDevice, "")
	}
	return len(h.m.hipDevices), nil
}

// dev maps HIP device d to the GPU it is (HIP's order and filter, see
// Options.HIPVisibleDevices).
func (h *HIP) dev(fn string, d int) (int, error) {
	if d < 0 || d >= len(h.m.hipDevices) {
		return 0, hipErr(fn, hip.ErrorInvalidDevice, fmt.Sprintf("device %d of %d", d, len(h.m.hipDevices)))
	}
	h.init()
	return h.m.hipDevices[d], nil
}

// DeviceAttribute is hipDeviceGetAttribute for the attributes rocsync
// reads: the GPU's PCI location, and stream memory-operation support.
func (h *HIP) DeviceAttribute(d int, attr int32) (int32, error) {
	g, err := h.dev("hipDeviceGetAttribute", d)
	if err != nil {
		return 0, err
	}
	loc := h.m.devices[g].pci
	switch attr {
	case hip.DeviceAttributePciBusId:
		return int32(loc.bus), nil
	case hip.DeviceAttributePciDeviceId:
		return int32(loc.device), nil
	case hip.DeviceAttributePciDomainID:
		if h.m.release() <= 502 {
			// Measured on HIP 5.2.3 (over hsa/kfdsim): hipErrorInvalidValue,
			// while hipDeviceGetPCIBusId reports the domain.
			return 0, hipErr("hipDeviceGetAttribute", hip.ErrorInvalidValue, "HIP 5.2 does not report hipDeviceAttributePciDomainID")
		}
		return int32(loc.domain), nil
	case hip.DeviceAttributeCanUseStreamWaitValue:
		return 1, nil
	case hip.DeviceAttributeWarpSize:
		return int32(kernels.Wavefront(h.m.opts.ISA)), nil
	}
	return 0, hipErr("hipDeviceGetAttribute", hip.ErrorInvalidValue, fmt.Sprintf("attribute %d not emulated", attr))
}

// HIPVersionPCIFunction is the first HIP (ROCm 6.2.0; clr
// hipamd/src/hip_device_runtime.cpp) whose hipDeviceGetPCIBusId prints the
// PCI function (deviceTopology_.pcie.function, the agent's BDFID & 7, set in
// rocclr/device/rocm/rocdevice.cpp); earlier ones print ".0".
const HIPVersionPCIFunction = 60_200_000

// DevicePCIBusID is hipDeviceGetPCIBusId: the GPU's PCI location.
func (h *HIP) DevicePCIBusID(d int) (string, error) {
	g, err := h.dev("hipDeviceGetPCIBusId", d)
	if err != nil {
		return "", err
	}
	loc := h.m.devices[g].pci
	if h.m.hipVersion() < HIPVersionPCIFunction {
		// HIP before 6.2 prints function 0 whatever the GPU's is (clr
		// hipamd/src/hip_device_runtime.cpp, rocm-6.1.2).
		return fmt.Sprintf("%04x:%02x:%02x.0", loc.domain, loc.bus, loc.device), nil
	}
	return fmt.Sprintf("%04x:%02x:%02x.%01x", loc.domain, loc.bus, loc.device, loc.function), nil
}

func (h *HIP) DeviceSynchronize(hd int) error {
	d, err := h.dev("hipDeviceSynchronize", hd)
	if err != nil {
		return err
	}
	h.mu.Lock()
	var ss []*hstream
	for _, s := range h.streams {
		if s.dev == d {
			ss = append(ss, s)
		}
	}
	h.mu.Unlock()
	for _, s := range ss {
		s.synchronize()
	}
	return nil
}

func (h *HIP) DeviceName(hd int) (string, error) {
	d, err := h.dev("hipDeviceGetName", hd)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("rocsync emulated GPU %d (%s)", d, h.m.opts.ISA), nil
}

// cmd is one operation queued on a stream.
type cmd struct {
	kind  cmdKind
	host  vclock // the host's clock when it enqueued the command
	ev    *hevent
	rec   *hrecord             // the record a cmdRecord completes, or a cmdWaitEvent waits for
	fn    func(a *actor) error // the work of kernels and copies
	what  string
	sig   *signal
	value uint64
	flags uint32
	mask  uint64
	g     gemmArgs   // for cmdGemm
	cp    copyArgs   // for cmdCopy
	l     launchArgs // for cmdLaunch
	// direct: a call HIP does not capture, which runs on the stream even
	// while it captures (hipModuleLaunchKernel before HIP 5.3).
	direct bool
	// graph: a hipGraphLaunch, whose nodes the fault injector is asked
	// about as they run.
	graph bool
	// eng is the copy queue an asynchronous copy between host and device
	// memory goes through, and place its place there (copyEngine).
	eng   *copyEngine
	place uint64
}

// copyArgs is an asynchronous copy: the command carries its operands, so
// that enqueuing one allocates nothing.
type copyArgs struct{ dst, src, size uint64 }

// launchArgs is a hipModuleLaunchKernel: the kernel, its geometry and a
// copy of its argument block (pooled when it fits kernargBuf).
type launchArgs struct {
	k           *kernelImpl
	grid, block [3]uint32
	sharedMem   uint32
	buf         *kernargBuf // holds the arguments when they fit
	heap        []byte      // holds them when they do not
	n           int
}

// kernargBuf holds a launch's kernarg segment: explicit arguments and the
// hidden arguments HIP fills after them (queue.KernargSlot's 512 bytes).
type kernargBuf [512]byte

// takeKernarg returns a free argument buffer of the stream's (a stack
// that grows to the launches ever in flight at once, and is never
// dropped, unlike a sync.Pool's).
func (s *hstream) takeKernarg() *kernargBuf {
	s.kaMu.Lock()
	defer s.kaMu.Unlock()
	if n := len(s.kaFree); n > 0 {
		b := s.kaFree[n-1]
		s.kaFree = s.kaFree[:n-1]
		return b
	}
	return new(kernargBuf)
}

func (s *hstream) giveKernarg(b *kernargBuf) {
	s.kaMu.Lock()
	s.kaFree = append(s.kaFree, b)
	s.kaMu.Unlock()
}

func (l *launchArgs) kernarg() []byte {
	if l.buf != nil {
		return l.buf[:l.n]
	}
	return l.heap
}

type cmdKind uint8

const (
	cmdWork cmdKind = iota
	cmdRecord
	cmdWaitEvent
	cmdWaitValue
	cmdWriteValue
	cmdGemm
	cmdCopy
	cmdLaunch
)

// hstream executes its commands in order on its own goroutine.
type hstream struct {
	m      *Machine
	h      hip.Stream
	dev    int
	agent  int
	name   string
	delay  *delayer
	cmds   chan cmd
	mu     sync.Mutex
	cond   *sync.Cond
	queued uint64
	ran    uint64
	vc     vclock
	seq    uint32
	err    error // sticky: a failed command breaks the stream
	closed bool
	// evicted: KFD evicted the stream's hardware queue (a VM fault on its
	// GPU); nothing more runs or completes on it (SetVMFaultEviction).
	evicted bool
	kaMu    sync.Mutex
	kaFree  []*kernargBuf // launch argument buffers not in use
	// capture is the capture the stream takes part in (nil: none): its
	// work is recorded into that graph instead of run.
	capture *hcapture
}

func (h *HIP) StreamCreate(hd int, flags uint32) (hip.Stream, error) {
	d, err := h.dev("hipStreamCreateWithFlags", hd)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	id := hip.Stream(h.handle())
	s := &hstream{m: h.m, h: id, dev: d, agent: h.m.newAgent(), name: fmt.Sprintf("hip-stream gpu%d/s%d", d, id),
		cmds: make(chan cmd, 4096)}
	s.cond = sync.NewCond(&s.mu)
	s.delay = h.m.newDelayer(s.agent)
	// KFD creates the queues of an evicted process unmapped: they never
	// run (kfd_device_queue_manager.c, create_queue_cpsch with
	// qpd->evicted).
	s.evicted = h.m.devices[d].evicted.Load()
	h.streams[id] = s
	h.mu.Unlock()
	go s.run()
	return id, nil
}

// StreamCreateWithPriority is hipStreamCreateWithPriority: the emulator
// has no hardware queues to share, so the priority changes nothing.
func (h *HIP) StreamCreateWithPriority(hd int, flags uint32, priority int) (hip.Stream, error) {
	return h.StreamCreate(hd, flags)
}

func (h *HIP) stream(fn string, id hip.Stream) (*hstream, error) {
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.streams[id]
	if s == nil {
		return nil, hipErr(fn, hip.ErrorInvalidHandle, "unknown stream")
	}
	return s, nil
}

func (h *HIP) StreamDestroy(id hip.Stream) error {
	s, err := h.stream("hipStreamDestroy", id)
	if err != nil {
		return err
	}
	h.mu.Lock()
	delete(h.streams, id)
	h.mu.Unlock()
	h.endCaptureOnDestroy(s)
	// hipStreamDestroy lets pending work finish.
	s.synchronize()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.cmds)
	return nil
}

func (s *hstream) enqueue(c cmd) error {
	c.host = s.m.hostSnapshot()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return hipErr("enqueue", hip.ErrorInvalidHandle, "stream destroyed")
	}
	if cp := s.capture; cp != nil && (c.kind == cmdWork || c.kind == cmdGemm || c.kind == cmdCopy || c.kind == cmdLaunch) && !c.direct {
		s.mu.Unlock()
		cp.add(c)
		return nil
	}
	if c.eng != nil {
		c.place = c.eng.take()
	}
	s.queued++
	s.mu.Unlock()
	s.cmds <- c
	return nil
}

func (s *hstream) run() {
	for c := range s.cmds {
		if s.stalled() {
			if c.eng != nil {
				// The copy never runs; ROCr's queue is the evicted
				// process's too, so nothing waits behind it.
				c.eng.give(c.place)
			}
			continue // never runs, never completes
		}
		s.exec(c)
		if c.eng != nil {
			c.eng.give(c.place)
		}
		s.mu.Lock()
		if s.evicted && s.err == nil {
			// Evicted while it ran: preempted, it never completes.
			s.mu.Unlock()
			continue
		}
		s.ran++
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// stalled says whether the stream's commands never run again: it was
// evicted and had not failed itself. The stream whose own command faulted
// keeps reporting that error, as a faulting HSA queue reports its own
// queue error (HIP aborts on it, see the README's GPU faults section).
func (s *hstream) stalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evicted && s.err == nil
}

// actor is the clock of the next command: everything earlier on the
// stream, plus what the host had seen when it enqueued the command.
func (s *hstream) actor(c *cmd) *actor {
	if !s.m.opts.Hazards {
		return nil
	}
	s.seq++
	s.mu.Lock()
	a := &actor{agent: s.agent, seq: s.seq, vc: s.vc.clone(), what: c.what, where: s.name,
		// HIP copies on a copy engine (SDMA) or blit kernels after a
		// system-scope barrier (clr rocblit.cpp, DmaBlitManager::readBuffer
		// and hsaCopy: releaseGpuMemoryFence before, addSystemScope
		// after): either way outside the L2 that holds what an HSA queue
		// released at agent scope.
		copyEngine: c.kind == cmdCopy || c.what == "hipMemcpyPeerAsync"}
	s.mu.Unlock()
	a.vc.join(c.host)
	a.vc.set(s.agent, s.seq)
	return a
}

func (s *hstream) exec(c cmd) {
	s.mu.Lock()
	failed := s.err
	s.mu.Unlock()
	if failed != nil {
		if c.kind == cmdRecord {
			// The record is reached, but carries the stream's error, so
			// whoever waits for the event learns of the fault instead of
			// waiting forever. It also carries the stream's clock: every
			// command before it has ended (the failed one included), so
			// whoever learns of the error is ordered after their accesses,
			// as with a successful record.
			s.mu.Lock()
			vc := s.vc.clone()
			s.mu.Unlock()
			c.ev.completeErr(c.rec, failed, vc)
		}
		return
	}
	a := s.actor(&c)
	switch c.kind {
	case cmdWork, cmdGemm, cmdCopy, cmdLaunch:
		s.m.waitGate()
		s.delay.sleep()
		var err error
		if !c.graph && s.m.injectFault(c.what) {
			err = errors.New(injectedFault + " in " + c.what)
		} else {
			err = s.work(&c, a)
		}
		if err != nil {
			code := hip.ErrorLaunchFailure
			if errors.Is(err, ErrNoAccess) {
				code = hip.ErrorIllegalAddress
			}
			s.mu.Lock()
			s.err = &causedErr{hipErr(c.what, code, err.Error()), err}
			// The failed command has ended: what it touched before it
			// faulted happens before whatever observes the stream's error.
			if a != nil {
				s.vc.join(a.vc)
			}
			s.mu.Unlock()
			return
		}
	case cmdRecord:
		c.ev.complete(c.rec, a)
	case cmdWaitEvent:
		vc, err := c.ev.wait(c.rec)
		if err != nil {
			// A stream waiting for faulted work inherits the fault (and
			// the clock of the work that ended before it).
			s.mu.Lock()
			if a != nil {
				s.vc.join(a.vc)
				s.vc.join(vc)
			}
			s.err = err
			s.mu.Unlock()
			return
		}
		if a != nil {
			a.vc.join(vc)
		}
	case cmdWaitValue:
		for !waitValueMet(uint64(c.sig.v.Load()), c.value, c.flags, c.mask) {
			if s.stalled() {
				return
			}
			c.sig.wait(hsa.ConditionNe, c.sig.v.Load(), 5*time.Millisecond)
		}
		if a != nil {
			a.vc.join(c.sig.clock())
		}
	case cmdWriteValue:
		var vc vclock
		if a != nil {
			vc = a.vc
		}
		c.sig.storeFrom(int64(c.value), vc)
	}
	if a != nil {
		s.mu.Lock()
		s.vc.join(a.vc)
		s.mu.Unlock()
	}
}

// work runs a kernel, copy or gemm. A panic in it (an emulator bug) fails
// the command like a device fault instead of taking the process down.
func (s *hstream) work(c *cmd, a *actor) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("emulator fault: %v", r)
		}
	}()
	switch c.kind {
	case cmdGemm:
		return s.m.runGemm(s.dev, &c.g, a)
	case cmdCopy:
		return s.runCopy(&c.cp, a)
	case cmdLaunch:
		err := s.runLaunch(&c.l, a)
		if c.l.buf != nil {
			s.giveKernarg(c.l.buf)
			c.l.buf = nil
		}
		return err
	}
	return c.fn(a)
}

func waitValueMet(v, value uint64, flags uint32, mask uint64) bool {
	switch flags {
	case hip.StreamWaitValueGte:
		return v&mask >= value
	case hip.StreamWaitValueEq:
		return v&mask == value
	case hip.StreamWaitValueAnd:
		return (v&mask)&value != 0
	case hip.StreamWaitValueNor:
		return ^((v & mask) | (value & mask)) != 0
	}
	return false
}

// synchronize waits for every command enqueued so far and returns the
// stream's sticky error.
func (s *hstream) synchronize() error {
	s.mu.Lock()
	target := s.queued
	for s.ran < target {
		s.cond.Wait()
	}
	err := s.err
	vc := s.vc.clone()
	s.mu.Unlock()
	s.m.hostAcquire(vc)
	return err
}

func (h *HIP) StreamSynchronize(id hip.Stream) error {
	s, err := h.stream("hipStreamSynchronize", id)
	if err != nil {
		return err
	}
	if err := h.captureOngoing("hipStreamSynchronize", s); err != nil {
		return err
	}
	return s.synchronize()
}

// The not-ready answers are made once: callers poll with them, and the
// real binding does not allocate for them either.
var (
	errStreamNotReady = hipErr("hipStreamQuery", hip.ErrorNotReady, "")
	errEventNotReady  = hipErr("hipEventQuery", hip.ErrorNotReady, "")
)

// yieldToDevice gives the processor to other goroutines after a
// not-ready answer: the emulated device runs on goroutines of this process,
// so a host polling it (rocsync's waits spin on queries, and never yield:
// on a real runtime a query is a foreign call) would otherwise hold a
// processor the device needs. The tests count the yields through it.
var yieldToDevice = runtime.Gosched

func (h *HIP) StreamQuery(id hip.Stream) error {
	s, err := h.stream("hipStreamQuery", id)
	if err != nil {
		return err
	}
	if err := h.captureOngoing("hipStreamQuery", s); err != nil {
		return err
	}
	s.mu.Lock()
	done := s.ran == s.queued
	err = s.err
	vc := s.vc.clone()
	s.mu.Unlock()
	if !done {
		yieldToDevice()
		return errStreamNotReady
	}
	s.m.hostAcquire(vc)
	return err
}

// hevent is a HIP event. Each record is an hrecord; the event is complete
// when its newest record has executed. A stream wait captures the record
// the event had when it was called, and inherits that record's outcome and
// clock, whatever later records of the event do (they may be on other
// streams, and complete first).
type hevent struct {
	mu   sync.Mutex
	cond *sync.Cond
	dev  int
	last *hrecord // the newest record; nil: never recorded (complete)
	// timing: created without hipEventDisableTiming, so that
	// hipEventElapsedTime accepts it.
	timing bool
	// captured: the capture its newest record was made in (a record
	// during capture is a graph dependency, not a stream command).
	captured *hcapture
}

// hrecord is one record of an event; its fields are guarded by the
// event's lock.
type hrecord struct {
	done bool
	vc   vclock
	err  error     // set when the record executed on a broken stream
	at   time.Time // when the stream reached it (timing events)
}

func (e *hevent) complete(r *hrecord, a *actor) {
	e.mu.Lock()
	r.done = true
	if e.timing {
		r.at = time.Now()
	}
	if a != nil {
		r.vc = a.vc.clone()
	}
	e.cond.Broadcast()
	e.mu.Unlock()
}

// completeErr marks record r reached on a stream broken by err.
func (e *hevent) completeErr(r *hrecord, err error, vc vclock) {
	e.mu.Lock()
	r.done, r.err, r.vc = true, err, vc
	e.cond.Broadcast()
	e.mu.Unlock()
}

// wait blocks until record r (nil: none) has executed and returns its
// clock and, if it was recorded on a broken stream, that stream's error.
func (e *hevent) wait(r *hrecord) (vclock, error) {
	if r == nil {
		return nil, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for !r.done {
		e.cond.Wait()
	}
	return r.vc.clone(), r.err
}

func (h *HIP) EventCreate(hd int, flags uint32) (hip.Event, error) {
	d, err := h.dev("hipEventCreateWithFlags", hd)
	if err != nil {
		return 0, err
	}
	e := &hevent{dev: d, timing: flags&hip.EventDisableTiming == 0}
	e.cond = sync.NewCond(&e.mu)
	h.mu.Lock()
	id := hip.Event(h.handle())
	h.events[id] = e
	h.mu.Unlock()
	return id, nil
}

func (h *HIP) event(fn string, id hip.Event) (*hevent, error) {
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.events[id]
	if e == nil {
		return nil, hipErr(fn, hip.ErrorInvalidHandle, "unknown event")
	}
	return e, nil
}

func (h *HIP) EventDestroy(id hip.Event) error {
	if _, err := h.event("hipEventDestroy", id); err != nil {
		return err
	}
	h.mu.Lock()
	delete(h.events, id)
	h.mu.Unlock()
	return nil
}

func (h *HIP) EventRecord(id hip.Event, sid hip.Stream) error {
	e, err := h.event("hipEventRecord", id)
	if err != nil {
		return err
	}
	s, err := h.stream("hipEventRecord", sid)
	if err != nil {
		return err
	}
	if h.captureEventRecord(e, s) {
		return nil
	}
	r := &hrecord{}
	e.mu.Lock()
	e.last = r
	e.captured = nil
	e.mu.Unlock()
	return s.enqueue(cmd{kind: cmdRecord, ev: e, rec: r, what: "hipEventRecord"})
}

func (h *HIP) EventQuery(id hip.Event) error {
	e, err := h.event("hipEventQuery", id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	r := e.last
	done := r == nil || r.done
	var vc vclock
	var ferr error
	if r != nil {
		vc, ferr = r.vc.clone(), r.err
	}
	e.mu.Unlock()
	if !done {
		yieldToDevice()
		return errEventNotReady
	}
	// Reached with or without the stream's error, the record proves the
	// commands before it ended.
	h.m.hostAcquire(vc)
	return ferr
}

func (h *HIP) EventSynchronize(id hip.Event) error {
	e, err := h.event("hipEventSynchronize", id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	r := e.last
	e.mu.Unlock()
	vc, ferr := e.wait(r)
	h.m.hostAcquire(vc)
	return ferr
}

// EventElapsedTime is hipEventElapsedTime, with HIP's rules: both events
// made with timing (hipEventDisableTiming refused as an invalid handle),
// on one device, recorded (an event never recorded is an invalid handle)
// and reached (hipErrorNotReady before).
func (h *HIP) EventElapsedTime(start, stop hip.Event) (float32, error) {
	const fn = "hipEventElapsedTime"
	a, err := h.event(fn, start)
	if err != nil {
		return 0, err
	}
	b, err := h.event(fn, stop)
	if err != nil {
		return 0, err
	}
	if !a.timing || !b.timing {
		return 0, hipErr(fn, hip.ErrorInvalidHandle, "event created with hipEventDisableTiming")
	}
	if a.dev != b.dev {
		return 0, hipErr(fn, hip.ErrorInvalidHandle, "events of two devices")
	}
	var at [2]time.Time
	for i, e := range [2]*hevent{a, b} {
		e.mu.Lock()
		r := e.last
		done := r != nil && r.done
		if done {
			at[i] = r.at
		}
		e.mu.Unlock()
		if r == nil {
			return 0, hipErr(fn, hip.ErrorInvalidHandle, "event never recorded")
		}
		if !done {
			return 0, hipErr(fn, hip.ErrorNotReady, "")
		}
	}
	return float32(float64(at[1].Sub(at[0])) / float64(time.Millisecond)), nil
}

// StreamWaitEvent captures the event's newest record at call time, as HIP
// does: later re-records do not change what the stream waits for.
func (h *HIP) StreamWaitEvent(sid hip.Stream, id hip.Event) error {
	e, err := h.event("hipStreamWaitEvent", id)
	if err != nil {
		return err
	}
	s, err := h.stream("hipStreamWaitEvent", sid)
	if err != nil {
		return err
	}
	if done, err := h.captureStreamWait(e, s); done || err != nil {
		return err
	}
	e.mu.Lock()
	r := e.last
	e.mu.Unlock()
	return s.enqueue(cmd{kind: cmdWaitEvent, ev: e, rec: r, what: "hipStreamWaitEvent"})
}

func (h *HIP) Malloc(hd int, size uint64) (hip.DevicePtr, error) {
	d, err := h.dev("hipMalloc", hd)
	if err != nil {
		return 0, err
	}
	if err := h.unsafeDuringCapture("hipMalloc"); err != nil {
		return 0, err
	}
	dv := h.m.devices[d]
	dv.mu.Lock()
	if dv.used+size > h.m.opts.MemoryPerDevice {
		dv.mu.Unlock()
		return 0, hipErr("hipMalloc", hip.ErrorOutOfMemory, fmt.Sprintf("%d bytes requested, %d of %d in use", size, dv.used, h.m.opts.MemoryPerDevice))
	}
	base := dv.next
	rounded := (max(size, 1) + 255) &^ 255
	dv.next += rounded
	dv.used += rounded
	dv.mu.Unlock()
	r := &alloc{base: base, size: size, data: make([]byte, size), device: d}
	r.access.Store(1 << uint(d))
	h.m.addAlloc(r)
	return hip.DevicePtr(base), nil
}

// Free releases the memory. With the checker on, every access to it must
// be ordered before the free by what the host has observed.
func (h *HIP) Free(hd int, p hip.DevicePtr) error {
	d, err := h.dev("hipFree", hd)
	if err != nil {
		return err
	}
	if err := h.unsafeDuringCapture("hipFree"); err != nil {
		return err
	}
	if p == 0 {
		return nil
	}
	if s := h.m.signalAtAddr(uintptr(p)); s != nil && s.hipMemory && !s.destroyed {
		s.destroyed = true
		return nil
	}
	r, err := h.m.find(uint64(p), 1)
	if err != nil || r.base != uint64(p) || r.device != d || r.freed {
		return hipErr("hipFree", hip.ErrorInvalidValue, fmt.Sprintf("%#x is not a live allocation of device %d", uint64(p), d))
	}
	if h.m.devices[d].evicted.Load() {
		// hipFree synchronizes every stream of the allocation's device
		// first (clr hipamd/src/hip_memory.cpp, ihipFree: SyncAllStreams),
		// which never returns once one of them is evicted with work
		// pending. (Modelled only then, so that the hazard checker still
		// sees frees that race with the streams.)
		h.mu.Lock()
		var ss []*hstream
		for _, s := range h.streams {
			if s.dev == d {
				ss = append(ss, s)
			}
		}
		h.mu.Unlock()
		for _, s := range ss {
			_ = s.synchronize()
		}
	}
	if h.m.opts.Hazards {
		h.m.report(r.shadow.freeCheck(r.base, r.base+r.size, h.m.hostActor("hipFree")))
	}
	dv := h.m.devices[d]
	dv.mu.Lock()
	dv.used -= (max(r.size, 1) + 255) &^ 255
	dv.mu.Unlock()
	h.m.memMu.Lock()
	r.freed, r.data = true, nil
	h.m.memMu.Unlock()
	return nil
}

func (h *HIP) hostSpan(fn string, d int, p hip.DevicePtr, size uint64, write bool) ([]byte, error) {
	if _, err := h.dev(fn, d); err != nil {
		return nil, err
	}
	if err := h.unsafeDuringCapture("hipMemcpy"); err != nil {
		return nil, err
	}
	var a *actor
	if h.m.opts.Hazards {
		a = h.m.hostActor(fn)
	}
	b, err := h.m.span(uint64(p), size, write, a)
	if err != nil {
		return nil, hipErr(fn, hip.ErrorInvalidValue, err.Error())
	}
	return b, nil
}

func (h *HIP) MemcpyHtoD(d int, dst hip.DevicePtr, src unsafe.Pointer, size uint64) error {
	b, err := h.hostSpan("hipMemcpy(HtoD)", d, dst, size, true)
	if err != nil || size == 0 {
		return err
	}
	if err := h.behindCopies("hipMemcpy(HtoD)", d, copyHtoD); err != nil {
		return err
	}
	copy(b, unsafe.Slice((*byte)(src), size))
	return nil
}

func (h *HIP) MemcpyDtoH(d int, dst unsafe.Pointer, src hip.DevicePtr, size uint64) error {
	b, err := h.hostSpan("hipMemcpy(DtoH)", d, src, size, false)
	if err != nil || size == 0 {
		return err
	}
	if err := h.behindCopies("hipMemcpy(DtoH)", d, copyDtoH); err != nil {
		return err
	}
	copy(unsafe.Slice((*byte)(dst), size), b)
	return nil
}

// MemcpyWithStream is hipMemcpyWithStream: a synchronous copy made on the
// stream, after its earlier work.
func (h *HIP) MemcpyWithStream(dst, src unsafe.Pointer, size uint64, kind uint32, sid hip.Stream) error {
	const fn = "hipMemcpyWithStream"
	s, err := h.stream(fn, sid)
	if err != nil {
		return err
	}
	hd := -1
	for i, m := range h.m.hipDevices {
		if m == s.dev {
			hd = i
		}
	}
	if err := s.synchronize(); err != nil {
		return err
	}
	switch kind {
	case hip.MemcpyHostToDevice:
		return h.MemcpyHtoD(hd, hip.DevicePtr(uintptr(dst)), src, size)
	case hip.MemcpyDeviceToHost:
		return h.MemcpyDtoH(hd, dst, hip.DevicePtr(uintptr(src)), size)
	}
	return hipErr(fn, hip.ErrorInvalidValue, "kind")
}

// behindCopies is a synchronous copy's wait for the asynchronous copies of
// its direction on HIP device d queued before it (copyEngine).
func (h *HIP) behindCopies(fn string, d int, dir int) error {
	idx, err := h.dev(fn, d)
	if err != nil {
		return err
	}
	if err := h.m.devices[idx].copies[dir].waitBehind(fn, h.m.copyEngineWait()); err != nil {
		return hipErr(fn, hip.ErrorLaunchFailure, err.Error())
	}
	return nil
}

func (h *HIP) MemcpyDtoDAsync(dst, src hip.DevicePtr, size uint64, sid hip.Stream) error {
	s, err := h.stream("hipMemcpyAsync", sid)
	if err != nil {
		return err
	}
	return s.enqueue(cmd{kind: cmdCopy, what: "hipMemcpyAsync(DtoD)", cp: copyArgs{dst: uint64(dst), src: uint64(src), size: size}})
}

// runCopy runs an asynchronous copy.
func (s *hstream) runCopy(c *copyArgs, a *actor) error {
	in, err := s.m.gpuSpan(s.dev, c.src, c.size, false, a)
	if err != nil {
		return err
	}
	out, err := s.m.gpuSpan(s.dev, c.dst, c.size, true, a)
	if err != nil {
		return err
	}
	copy(out, in)
	return nil
}

func (h *HIP) MemsetAsync(dst hip.DevicePtr, value byte, size uint64, sid hip.Stream) error {
	s, err := h.stream("hipMemsetAsync", sid)
	if err != nil {
		return err
	}
	return s.enqueue(cmd{kind: cmdWork, what: "hipMemsetAsync", fn: func(a *actor) error {
		out, err := h.m.gpuSpan(s.dev, uint64(dst), size, true, a)
		if err != nil {
			return err
		}
		for i := range out {
			out[i] = value
		}
		return nil
	}})
}

// ModuleLoadData reads the same code objects the HSA path loads.
func (h *HIP) ModuleLoadData(d int, image []byte) (hip.Module, error) {
	if _, err := h.dev("hipModuleLoadData", d); err != nil {
		return 0, err
	}
	if userkernel.IsDeclaredImage(image) {
		// Signatures without code (see HSA.loadDeclared).
		ks, err := userkernel.ReadDeclaredImage(image)
		if err != nil {
			return 0, hipErr("hipModuleLoadData", hip.ErrorInvalidImage, err.Error())
		}
		fns := map[string]*kernelImpl{}
		for _, k := range ks {
			fns[k.Name] = h.m.declaredKernelImpl(k)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		id := hip.Module(h.handle())
		h.modules[id] = fns
		return id, nil
	}
	if err := h.m.checkHIPCodeObject(image); err != nil {
		return 0, err
	}
	meta, err := kernels.ReadMetadata(image)
	if err != nil {
		return 0, hipErr("hipModuleLoadData", hip.ErrorInvalidImage, err.Error())
	}
	if !h.m.isaCompatible(codeObjectProcessor(meta.Target)) {
		return 0, hipErr("hipModuleLoadData", hip.ErrorInvalidImage, fmt.Sprintf("code object for %s, device is %s", meta.Target, h.m.opts.ISA))
	}
	fns := map[string]*kernelImpl{}
	var user *userkernel.Image
	for _, k := range meta.Kernels {
		impl := h.m.newKernelImpl(k)
		if !impl.implemented {
			if user == nil {
				user = h.m.userImage(image)
			}
			if user != nil {
				impl.user, _ = user.Kernel(k.Name)
			}
		}
		fns[k.Name] = impl
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	id := hip.Module(h.handle())
	h.modules[id] = fns
	return id, nil
}

// LiveModules counts modules loaded and not unloaded.
func (h *HIP) LiveModules() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.modules)
}

func (h *HIP) ModuleUnload(m hip.Module) error {
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.modules[m] == nil {
		return hipErr("hipModuleUnload", hip.ErrorInvalidHandle, "")
	}
	delete(h.modules, m)
	return nil
}

func (h *HIP) ModuleGetFunction(m hip.Module, name string) (hip.Function, error) {
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	fns := h.modules[m]
	if fns == nil {
		return 0, hipErr("hipModuleGetFunction", hip.ErrorInvalidHandle, "")
	}
	k := fns[name]
	if k == nil {
		return 0, hipErr("hipModuleGetFunction", hip.ErrorNotFound, name)
	}
	id := hip.Function(h.handle())
	h.funcs[id] = k
	return id, nil
}

// ModuleLaunchKernel copies the argument buffer when the launch is
// enqueued, as the runtime does, so the caller may reuse it at once.
func (h *HIP) ModuleLaunchKernel(f hip.Function, grid, block [3]uint32, sharedMem uint32, sid hip.Stream, args []byte) error {
	h.init()
	h.mu.Lock()
	k := h.funcs[f]
	h.mu.Unlock()
	if k == nil {
		return hipErr("hipModuleLaunchKernel", hip.ErrorInvalidHandle, "unknown function")
	}
	if block[0] == 0 || grid[0] == 0 {
		return hipErr("hipModuleLaunchKernel", hip.ErrorInvalidValue, "zero-sized grid or block")
	}
	// The caller passes the explicit arguments; HIP fills the hidden ones
	// (runLaunch). clr's ihipLaunchKernelCommand (hipamd/src/hip_module.cpp,
	// current ROCm/rocm-systems) refuses arguments for a kernel with no
	// explicit parameters (hipErrorLaunchOutOfResources) and none for one
	// with parameters (hipErrorInvalidValue). The check is not in clr's
	// rocm-6.2 branch and its first release was not pinned, so it is
	// applied on every modelled release: rocsync must satisfy the newest.
	// clr then reads each parameter at its offset in the buffer, so a
	// buffer shorter than the parameters span is refused here too.
	explicit, params := k.kernargSize, -1
	if k.user != nil {
		explicit, params = k.user.ExplicitArgsSize, len(k.user.Params)
	}
	switch {
	case params == 0 && len(args) != 0:
		return hipErr("hipModuleLaunchKernel", hip.ErrorLaunchOutOfResources, fmt.Sprintf("%d argument bytes for a kernel without parameters", len(args)))
	case params > 0 && len(args) == 0:
		return hipErr("hipModuleLaunchKernel", hip.ErrorInvalidValue, "no arguments for a kernel with parameters")
	case uint32(len(args)) < explicit:
		return hipErr("hipModuleLaunchKernel", hip.ErrorInvalidValue, fmt.Sprintf("%d argument bytes, the kernel's parameters span %d", len(args), explicit))
	}
	// sharedMemBytes is the dynamic LDS only; the kernel's static LDS comes
	// on top. HIP refuses a dynamic size over the limit at the call, and
	// the launch fails at submission when the sum exceeds it (clr:
	// "No local memory available").
	if sharedMem > LDSPerWorkgroup {
		return hipErr("hipModuleLaunchKernel", hip.ErrorInvalidValue, fmt.Sprintf("sharedMemBytes %d over the %d-byte LDS", sharedMem, LDSPerWorkgroup))
	}
	for {
		old := h.maxDynamicLDS.Load()
		if sharedMem <= old || h.maxDynamicLDS.CompareAndSwap(old, sharedMem) {
			break
		}
	}
	s, err := h.stream("hipModuleLaunchKernel", sid)
	if err != nil {
		return err
	}
	// The kernarg segment: the explicit arguments, zeros, and the hidden
	// arguments the metadata lists.
	n := max(int(k.kernargSize), len(args))
	l := launchArgs{k: k, grid: grid, block: block, sharedMem: sharedMem, n: n}
	var seg []byte
	if n <= len(kernargBuf{}) {
		l.buf = s.takeKernarg()
		seg = l.buf[:n]
	} else {
		l.heap = make([]byte, n)
		seg = l.heap
	}
	clear(seg[copy(seg, args):])
	fillHidden(seg, k.hidden, grid, block, sharedMem)
	// HIP before 5.3 has no capture for hipModuleLaunchKernel: the kernel
	// runs on the stream even while it captures, and the graph lacks it.
	direct := h.m.hipVersion() < hip.HIPVersionModuleLaunchCaptured
	return s.enqueue(cmd{kind: cmdLaunch, what: k.symbol, l: l, direct: direct})
}

// runLaunch runs a kernel launched on the stream.
func (s *hstream) runLaunch(l *launchArgs, a *actor) error {
	k, grid, block, sharedMem, kernarg := l.k, l.grid, l.block, l.sharedMem, l.kernarg()
	items := uint64(grid[0]) * uint64(block[0])
	lds := uint64(k.groupSize) + uint64(sharedMem)
	if lds > LDSPerWorkgroup {
		return fmt.Errorf("no local memory available: %d static + %d dynamic LDS bytes over %d", k.groupSize, sharedMem, LDSPerWorkgroup)
	}
	gridItems := [3]uint32{uint32(min(uint64(grid[0])*uint64(block[0]), 1<<32-1)), grid[1] * max(block[1], 1), grid[2] * max(block[2], 1)}
	if err := k.checkGeometry(gridItems, [3]uint16{uint16(min(block[0], 1<<16-1)), uint16(min(block[1], 1<<16-1)), uint16(min(block[2], 1<<16-1))}); err != nil {
		return s.m.kernelFault(err)
	}
	if k.user != nil {
		g := userkernel.Geometry{Dims: 3}
		for i := range g.Grid {
			g.Grid[i], g.Workgroup[i] = grid[i]*block[i], block[i]
		}
		if grid[2] <= 1 && block[2] <= 1 {
			g.Dims = 2
			if grid[1] <= 1 && block[1] <= 1 {
				g.Dims = 1
			}
		}
		return s.m.runUserKernel(s.dev, k, kernarg, g, a)
	}
	if !k.implemented {
		return fmt.Errorf("kernel %s: no code the emulator can run", k.symbol)
	}
	return s.m.runKernel(s.dev, k, kernarg, items, a)
}

// signalArg resolves the address a stream memory operation acts on. HIP
// looks it up among its own allocations; before ROCm 5.6 (clr commit
// b40823ccc "Enable ROCr interop") it had no fallback, so an HSA signal's
// value address (memory ROCr allocated) was hipErrorInvalidValue. Since
// then HIP also asks ROCr. Memory from hipExtMallocWithFlags(...,
// hipMallocSignalMemory) is HIP's own and works on every release.
func (h *HIP) signalArg(fn string, ptr unsafe.Pointer) (*signal, error) {
	s := h.m.signalAt(ptr)
	if s == nil {
		if r, err := h.m.find(uint64(uintptr(ptr)), 8); err == nil && r.device >= 0 {
			return nil, hipErr(fn, hip.ErrorNotSupported, "emulator: stream memory operations on hipMalloc memory are not emulated")
		}
		return nil, hipErr(fn, hip.ErrorInvalidValue, "pointer is not memory the emulated device knows")
	}
	if !s.hipMemory && h.m.opts.HIPVersion < HIPVersionStreamMemoryLookup {
		return nil, hipErr(fn, hip.ErrorInvalidValue, fmt.Sprintf("HIP %d finds no allocation of its own at %p (ROCr memory is looked up from HIP 5.6)", h.m.opts.HIPVersion, ptr))
	}
	return s, nil
}

// ExtMalloc is hipExtMallocWithFlags. With hipMallocSignalMemory HIP makes
// an HSA signal (GPU-only, so it has a value address) and returns that
// address: 8 bytes that stream memory operations accept on every release.
// Other flags allocate device memory as hipMalloc does.
func (h *HIP) ExtMalloc(hd int, size uint64, flags uint32) (hip.DevicePtr, error) {
	if flags&hip.MallocSignalMemory == 0 {
		return h.Malloc(hd, size)
	}
	if _, err := h.dev("hipExtMallocWithFlags", hd); err != nil {
		return 0, err
	}
	if size != 8 {
		return 0, hipErr("hipExtMallocWithFlags", hip.ErrorInvalidValue, "signal memory is 8 bytes")
	}
	sig := h.m.signal(h.m.newSignal(0, false))
	sig.hipMemory = true
	return hip.DevicePtr(uintptr(unsafe.Pointer(&sig.v))), nil
}

func (h *HIP) StreamWaitValue64(sid hip.Stream, ptr unsafe.Pointer, value uint64, flags uint32, mask uint64) error {
	s, err := h.stream("hipStreamWaitValue64", sid)
	if err != nil {
		return err
	}
	sig, err := h.signalArg("hipStreamWaitValue64", ptr)
	if err != nil {
		return err
	}
	if flags > hip.StreamWaitValueNor {
		return hipErr("hipStreamWaitValue64", hip.ErrorInvalidValue, "flags")
	}
	return s.enqueue(cmd{kind: cmdWaitValue, sig: sig, value: value, flags: flags, mask: mask, what: "hipStreamWaitValue64"})
}

func (h *HIP) StreamWriteValue64(sid hip.Stream, ptr unsafe.Pointer, value uint64, flags uint32) error {
	s, err := h.stream("hipStreamWriteValue64", sid)
	if err != nil {
		return err
	}
	sig, err := h.signalArg("hipStreamWriteValue64", ptr)
	if err != nil {
		return err
	}
	return s.enqueue(cmd{kind: cmdWriteValue, sig: sig, value: value, what: "hipStreamWriteValue64"})
}

// HostMalloc is hipHostMalloc: pinned host memory that every GPU may
// access (HIP maps it to all of them).
func (h *HIP) HostMalloc(size uint64) (unsafe.Pointer, error) {
	h.init()
	if err := h.unsafeDuringCapture("hipHostMalloc"); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, hipErr("hipHostMalloc", hip.ErrorInvalidValue, "size 0")
	}
	p := h.m.hostAlloc(size)
	for d := 0; d < h.m.opts.Devices; d++ {
		h.m.allowAccess(uint64(uintptr(p)), d)
	}
	h.m.checkHost(uint64(uintptr(p)))
	h.mu.Lock()
	if h.pinned == nil {
		h.pinned = map[unsafe.Pointer]bool{}
	}
	h.pinned[p] = true
	h.mu.Unlock()
	return p, nil
}

// HostFree is hipHostFree; freeing memory HostMalloc did not return is
// hipErrorInvalidValue.
func (h *HIP) HostFree(p unsafe.Pointer) error {
	h.mu.Lock()
	ok := h.pinned[p]
	delete(h.pinned, p)
	h.mu.Unlock()
	if !ok || !h.m.removeHost(uint64(uintptr(p))) {
		return hipErr("hipHostFree", hip.ErrorInvalidValue, "not from hipHostMalloc")
	}
	return nil
}

// MemcpyHtoDAsync is hipMemcpyAsync host to device: the stream reads the
// host memory when it gets there, so it must be memory the GPU can reach
// (hipHostMalloc); pageable Go memory is refused, as the copy would read
// it after the call returned.
func (h *HIP) MemcpyHtoDAsync(dst hip.DevicePtr, src unsafe.Pointer, size uint64, sid hip.Stream) error {
	return h.copyAsync("hipMemcpyAsync(HtoD)", copyHtoD, uint64(dst), uint64(uintptr(src)), size, sid)
}

// MemcpyDtoHAsync is hipMemcpyAsync device to host, into pinned memory.
func (h *HIP) MemcpyDtoHAsync(dst unsafe.Pointer, src hip.DevicePtr, size uint64, sid hip.Stream) error {
	return h.copyAsync("hipMemcpyAsync(DtoH)", copyDtoH, uint64(uintptr(dst)), uint64(src), size, sid)
}

func (h *HIP) copyAsync(what string, dir int, dst, src, size uint64, sid hip.Stream) error {
	s, err := h.stream("hipMemcpyAsync", sid)
	if err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	for _, p := range [2]uint64{dst, src} {
		if _, err := h.m.find(p, size); err != nil {
			return hipErr("hipMemcpyAsync", hip.ErrorInvalidValue, err.Error())
		}
	}
	return s.enqueue(cmd{kind: cmdCopy, what: what, cp: copyArgs{dst: dst, src: src, size: size}, eng: &s.m.devices[s.dev].copies[dir]})
}

// fillHidden writes the hidden arguments a kernel's metadata lists into its
// kernarg segment, as clr does for a launch (VirtualGPU::
// submitKernelInternal, rocclr/device/rocm/rocvirtual.cpp): per dimension
// the block count (global/local), the group size and the remainder
// (global%local), the number of dimensions (3: hipModuleLaunchKernel's
// NDRange is three-dimensional), global offsets 0 and the dynamic LDS
// size; each written in the size the metadata gives. Services the emulator
// does not provide (printf, hostcall, heap, queue pointer, ...) stay 0.
func fillHidden(seg []byte, hidden []kernels.ArgMeta, grid, block [3]uint32, sharedMem uint32) {
	le := binary.LittleEndian
	for _, a := range hidden {
		kind := strings.TrimPrefix(a.ValueKind, "hidden_")
		d := 0
		if n := len(kind); n > 2 && kind[n-2] == '_' && kind[n-1] >= 'x' && kind[n-1] <= 'z' {
			d = int(kind[n-1] - 'x')
			kind = kind[:n-2]
		}
		local := uint64(max(block[d], 1))
		global := uint64(max(grid[d], 1)) * local
		var v uint64
		switch kind {
		case "block_count":
			v = global / local
		case "group_size":
			v = local
		case "remainder":
			v = global % local
		case "grid_dims":
			v = 3
		case "dynamic_lds_size":
			v = uint64(sharedMem)
		default:
			continue
		}
		if uint64(a.Offset)+uint64(a.Size) > uint64(len(seg)) {
			continue
		}
		switch a.Size {
		case 2:
			le.PutUint16(seg[a.Offset:], uint16(v))
		case 4:
			le.PutUint32(seg[a.Offset:], uint32(v))
		case 8:
			le.PutUint64(seg[a.Offset:], v)
		}
	}
}

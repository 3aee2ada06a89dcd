// Package emu is rocsync's emulated AMD device: a CPU model of HSA queues
// and signals, HIP streams and events, and rocBLAS, behind the same hsa,
// hip and rocblas interfaces as the real libraries.
//
// It is faithful where ordering is concerned: each HSA queue has a
// packet-processor goroutine that parses the 64-byte AQL packets written
// into its ring (honouring the barrier bit, kernel dispatch, barrier-AND
// and completion signals), each HIP stream executes its commands in order on
// a goroutine of its own, and work really runs asynchronously from the host.
//
// It is strict: with Options.Hazards set, every device-memory access is
// checked with vector clocks against every other access it is not ordered
// with (by queue order, signals, events or host waits), and unordered
// conflicts are reported as *HazardError. With Options.MaxDelay set, seeded
// random delays stretch execution so that a missing wait shows up as a
// wrong result too.
package emu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/userkernel"
)

// Options configure an emulated machine.
type Options struct {
	// Devices is the number of GPUs (default 1).
	Devices int
	// ISA is the gfx target the GPUs report (default "gfx90a").
	ISA string
	// MemoryPerDevice bounds hipMalloc per device in bytes (default 4 GiB).
	MemoryPerDevice uint64
	// Hazards turns the hazard checker on.
	Hazards bool
	// MaxDelay, when non-zero, delays each op by a random time up to it.
	MaxDelay time.Duration
	// Seed seeds the random delays.
	Seed uint64
	// CopyEngineWait bounds how long a synchronous hipMemcpy waits behind
	// the asynchronous copies of its direction queued before it (see
	// copyEngine) before it fails as a deadlock; 0 means 20 s.
	CopyEngineWait time.Duration
	// HIPVersion is the HIP release modelled, in hipRuntimeGetVersion's
	// encoding (major*10_000_000 + minor*100_000 + patch; HIP 5.2.3 is
	// 50_221_153). 0 means DefaultHIPVersion. HIP and ROCr are taken to be
	// of the same ROCm release: it decides which code-object versions
	// hipModuleLoadData and the HSA loader accept, and which memory the
	// stream memory operations accept.
	HIPVersion int
	// Partitions, when above 1, makes every physical GPU that many KFD
	// nodes (an MI300X in CPX, DPX, QPX or TPX mode): GPU agents
	// i*Partitions to i*Partitions+Partitions-1 sit at one PCI domain, bus
	// and device, told apart by the function bits only (KFD's
	// kfd_topology.c sets location_id |= node_id for each partition).
	// Devices counts partitions. 0 or 1: one node per GPU.
	Partitions int
	// HIPVisibleDevices lists, in HIP's order, the GPUs HIP presents (as
	// HIP_VISIBLE_DEVICES does): HIP device i is GPU HIPVisibleDevices[i].
	// nil presents every GPU in HSA's order.
	HIPVisibleDevices []int
	// KernelGroupSegmentSize, when non-zero, replaces every kernel's static
	// LDS size (group_segment_fixed_size) as both runtimes read it from the
	// code object, modelling kernels that use __local memory (rocsync's own
	// use none).
	KernelGroupSegmentSize uint32
	// OnHazard, if set, is called for every hazard as it is found (from an
	// emulator goroutine). Hazards are also kept for Hazards().
	OnHazard func(*HazardError)
	// FaultInjector, if set, is asked before every kernel dispatch, HIP
	// kernel launch and rocBLAS gemm whether that op faults (see
	// Machine.SetFaultInjector).
	FaultInjector func(op string) bool
	// References runs kernels that are not rocsync's own: the emulator
	// cannot execute GPU code, so a user kernel loaded from a code object
	// runs as the Go function registered under its name. A kernel with
	// none faults its queue or stream when dispatched.
	References *userkernel.References
	// PeerAccess says which GPUs can map which others' memory
	// (hipDeviceCanAccessPeer(accessor, owner)); nil: every pair, as
	// GPUs linked by XGMI or NVLink. Peer access must still be enabled
	// (hipDeviceEnablePeerAccess) before accessor's streams touch
	// owner's memory.
	PeerAccess func(accessor, owner int) bool
}

// FaultInjector decides whether an op faults. op names it: the kernel
// symbol for an HSA dispatch or a HIP launch (e.g. "rocsync_mul_f32"),
// "rocblas_sgemm"/"rocblas_dgemm" for a gemm, the HIP call for other
// stream work ("hipMemcpyDtoDAsync"); a hipGraphLaunch is not asked
// about, each of its nodes is, as it runs. It is called from emulator
// goroutines, possibly concurrently, just before the op would run.
//
// A faulting HSA dispatch behaves like a memory fault on hardware: its
// queue breaks (the error callback fires with HSA_STATUS_ERROR_MEMORY_FAULT),
// its completion signal is never decremented, and no later packet of that
// queue runs. A faulting HIP op makes its stream's error sticky
// (hipErrorLaunchFailure): later commands do not run, later event records
// complete carrying the error, and streams that wait on such an event
// inherit it.
type FaultInjector = func(op string) bool

// ErrInjectedFault is the cause named by injected faults.
const injectedFault = "emu: injected fault"

// SetFaultInjector replaces the machine's fault injector (nil: none) while
// it runs, so a test can fault ops submitted after some setup.
func (m *Machine) SetFaultInjector(f FaultInjector) {
	if f == nil {
		m.faults.Store(nil)
		return
	}
	m.faults.Store(&f)
}

// injectFault reports whether op is to fault.
func (m *Machine) injectFault(op string) bool {
	if f := m.faults.Load(); f != nil {
		return (*f)(strings.TrimSuffix(op, ".kd"))
	}
	return false
}

// Machine is one emulated system: a CPU agent and Options.Devices GPUs.
type Machine struct {
	opts Options
	// epoch is the start of the emulated system clock (profiling ticks).
	epoch time.Time

	// memMu serializes changes to the memory table and guards freed;
	// lookups read allocTab, which every change replaces, without it:
	// every range every kernel touches is looked up.
	memMu    sync.RWMutex
	allocTab atomic.Pointer[[]*alloc] // sorted by base

	// sigMu serializes creating signals; lookups read sigTab without
	// it. The table only grows, and each growth publishes a new slice, so
	// a lookup (every signal load, store and completion, on the host and
	// on the emulated queues) costs an atomic load instead of a read lock
	// whose shared counter both sides would bounce between cores.
	sigMu  sync.Mutex
	sigTab atomic.Pointer[[]*signal] // handle = index+1

	// sysMu guards sysRel and sysAcq: sysRel[g] joins the clocks of the
	// packets on GPU g's queues that completed with a system-scope
	// release; sysAcq[g] holds, per agent, the packets of GPU g's queues
	// that launched with a system-scope acquire (see systemAcquire).
	sysMu  sync.Mutex
	sysRel []vclock
	sysAcq []map[int][]acquireRec

	clockMu  sync.Mutex
	agents   int    // agent ids handed out; 0 is the host
	host     vclock // what the host has observed
	hostSeq  uint32
	hazardMu sync.Mutex
	hazards  []*HazardError

	devices    []*device
	hipDevices []int // HIP device i is GPU hipDevices[i]
	// peerOn[a] has bit o set once GPU a enabled peer access to GPU o's
	// memory (under memMu).
	peerOn []uint64

	execMu  sync.RWMutex
	kernels []*kernelImpl // kernel object handle = index+1

	hsa  *HSA
	hip  *HIP
	blas *BLAS

	gate sync.RWMutex // held by Hold; every op takes it for reading

	faults atomic.Pointer[FaultInjector]
	// noEviction turns KFD's eviction on a VM fault off (SetVMFaultEviction).
	noEviction atomic.Bool

	doorbells atomic.Uint64 // doorbell stores on every queue (DoorbellStores)

	kfMu         sync.Mutex
	kernelFaults []error // launches refused, for KernelFaults
}

// Hold stops every queue and stream before its next op until release is
// called, so tests can keep work pending deterministically.
func (m *Machine) Hold() (release func()) {
	m.gate.Lock()
	var once sync.Once
	return func() { once.Do(m.gate.Unlock) }
}

// waitGate blocks while the machine is held: taking the read lock is the
// wait, so the critical section is empty on purpose.
func (m *Machine) waitGate() {
	m.gate.RLock()
	m.gate.RUnlock() //lint:ignore SA2001 the lock itself is the gate
}

// Live reports whether addr is the base of a live device allocation.
func (m *Machine) Live(addr uint64) bool {
	a, err := m.find(addr, 1)
	if err != nil {
		return false
	}
	m.memMu.RLock()
	defer m.memMu.RUnlock()
	return a.base == addr && !a.freed
}

type device struct {
	index   int
	evicted atomic.Bool // a VM fault evicted its queues (SetVMFaultEviction)
	pci     pciLocation
	next    uint64 // bump allocator for device addresses
	used    uint64
	mu      sync.Mutex
	// copies are ROCr's copy queues of the GPU: host to device, device to
	// host.
	copies [2]copyEngine
}

// DefaultHIPVersion is the HIP release the emulator models by default: a
// current ROCm 6.x (6.2).
const DefaultHIPVersion = 60_200_000

// HIPVersionStreamMemoryLookup is the first HIP (ROCm 5.6.0, clr commit
// b40823ccc "Enable ROCr interop") whose stream memory operations accept
// memory HIP did not allocate, found by asking ROCr.
const HIPVersionStreamMemoryLookup = 50_600_000

// LDSPerWorkgroup is the LDS a workgroup may use on the emulated GPUs
// (64 KiB, as on every gfx9 to gfx12 GPU): static plus dynamic.
const LDSPerWorkgroup = 64 << 10

// pciLocation is where a GPU sits on PCIe.
type pciLocation struct {
	domain, bus, device, function uint32
}

// bdfid is HSA_AMD_AGENT_INFO_BDFID's encoding.
func (l pciLocation) bdfid() uint32 { return l.bus<<8 | l.device<<3 | l.function }

// deviceBase spaces the devices' address ranges so that a pointer names its
// device, as on hardware.
const deviceBase = 0x7f00_0000_0000
const deviceSpan = 0x0010_0000_0000

// New makes a machine.
func New(o Options) *Machine {
	if o.Devices <= 0 {
		o.Devices = 1
	}
	if o.ISA == "" {
		o.ISA = "gfx90a"
	}
	if o.HIPVersion == 0 {
		o.HIPVersion = DefaultHIPVersion
	}
	if o.MemoryPerDevice == 0 {
		o.MemoryPerDevice = 4 << 30
	}
	m := &Machine{opts: o, agents: 1, host: vclock{0}, epoch: time.Now()}
	parts := max(o.Partitions, 1)
	for i := 0; i < o.Devices; i++ {
		// Spread over buses as on a multi-socket server; the partitions
		// of one GPU differ in the function only.
		g := i / parts
		loc := pciLocation{domain: uint32(g / 4), bus: 0x03 + 0x20*uint32(g%4), function: uint32(i % parts)}
		m.devices = append(m.devices, &device{index: i, pci: loc, next: deviceBase + uint64(i)*deviceSpan})
	}
	m.hipDevices = hipOrder(o.HIPVisibleDevices, o.Devices)
	m.peerOn = make([]uint64, o.Devices)
	m.SetFaultInjector(o.FaultInjector)
	m.hsa = &HSA{m: m}
	m.hip = &HIP{m: m}
	m.blas = &BLAS{m: m}
	return m
}

// hipOrder is the GPUs HIP presents, in its order. Like HIP with
// HIP_VISIBLE_DEVICES, it stops at the first entry that names no GPU (or
// one already listed).
func hipOrder(visible []int, n int) []int {
	if visible == nil {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		return order
	}
	var order []int
	seen := map[int]bool{}
	for _, g := range visible {
		if g < 0 || g >= n || seen[g] {
			break
		}
		seen[g] = true
		order = append(order, g)
	}
	return order
}

// Options returns the machine's options.
func (m *Machine) Options() Options { return m.opts }

// DoorbellStores counts the doorbell stores on every HSA queue so far: a
// replayed recording rings once for all its packets.
func (m *Machine) DoorbellStores() uint64 { return m.doorbells.Load() }

// HSA returns the machine's HSA runtime.
func (m *Machine) HSA() *HSA { return m.hsa }

// HIP returns the machine's HIP runtime.
func (m *Machine) HIP() *HIP { return m.hip }

// BLAS returns the machine's rocBLAS.
func (m *Machine) BLAS() *BLAS { return m.blas }

// Hazards returns every hazard found so far.
func (m *Machine) Hazards() []*HazardError {
	m.hazardMu.Lock()
	defer m.hazardMu.Unlock()
	return append([]*HazardError(nil), m.hazards...)
}

func (m *Machine) report(hs []*HazardError) {
	if len(hs) == 0 {
		return
	}
	m.hazardMu.Lock()
	m.hazards = append(m.hazards, hs...)
	m.hazardMu.Unlock()
	if m.opts.OnHazard != nil {
		for _, h := range hs {
			m.opts.OnHazard(h)
		}
	}
}

// newAgent hands out a clock index for a queue or stream.
func (m *Machine) newAgent() int {
	m.clockMu.Lock()
	defer m.clockMu.Unlock()
	a := m.agents
	m.agents++
	return a
}

// hostActor starts a host access: the host's clock, ticked.
func (m *Machine) hostActor(what string) *actor {
	m.clockMu.Lock()
	defer m.clockMu.Unlock()
	m.hostSeq++
	m.host.set(0, m.hostSeq)
	return &actor{agent: 0, seq: m.hostSeq, vc: m.host.clone(), what: what, where: "host"}
}

// hostSnapshot is the host's clock, for work the host submits now.
func (m *Machine) hostSnapshot() vclock {
	if !m.opts.Hazards {
		return nil
	}
	m.clockMu.Lock()
	defer m.clockMu.Unlock()
	m.hostSeq++
	m.host.set(0, m.hostSeq)
	return m.host.clone()
}

// hostAcquire: the host observed something that happened with clock vc.
func (m *Machine) hostAcquire(vc vclock) {
	if !m.opts.Hazards || len(vc) == 0 {
		return
	}
	m.clockMu.Lock()
	m.host.join(vc)
	m.clockMu.Unlock()
}

// systemRelease records a packet on GPU dev completing with a
// system-scope release: every write on that GPU that happened before it
// (vc) is visible to the whole system from now on. The write-back is of
// the GPU's whole L2, so it covers every queue's writes, not only its own
// queue's (LLVM AMDGPUUsage, "Memory Model GFX90A"/"GFX942": a release at
// system scope is buffer_wbl2, which writes back the L2).
func (m *Machine) systemRelease(dev int, vc vclock) {
	m.sysMu.Lock()
	for len(m.sysRel) <= dev {
		m.sysRel = append(m.sysRel, nil)
	}
	m.sysRel[dev].join(vc)
	m.sysMu.Unlock()
}

// systemVisible reports whether a system-scope release on GPU l2-1 has
// followed the access of agent at seq.
func (m *Machine) systemVisible(l2, agent int, seq uint32) bool {
	if l2 == 0 {
		return true
	}
	m.sysMu.Lock()
	defer m.sysMu.Unlock()
	return l2-1 < len(m.sysRel) && m.sysRel[l2-1].get(agent) >= seq
}

// acquireRec is a packet that launched with a system-scope acquire: its
// sequence number on its agent and the clock of what happened before its
// launch.
type acquireRec struct {
	seq uint32
	vc  vclock
}

// acquireRecsKept bounds the acquires kept per agent: a packet that needs
// an older one than the newest acquireRecsKept of an agent follows that
// agent by that many acquires, which rocsync's queues never rely on (each
// queue acquires for its own packets).
const acquireRecsKept = 256

// systemAcquire records packet a of GPU dev launching with a system-scope
// acquire: it invalidates the GPU's L2 (LLVM AMDGPUUsage, "Memory Model
// GFX90A": acquire at system scope is buffer_wbinvl1_vol with buffer_invl2;
// "GFX942": buffer_inv at system scope), so from then on the GPU's packets
// that follow it read what was written outside the GPU before it (vc), not
// older copies the L2 kept. An agent-scope acquire invalidates only the
// L1 and the scalar cache, which the L2 backs.
func (m *Machine) systemAcquire(dev int, a *actor) {
	m.sysMu.Lock()
	defer m.sysMu.Unlock()
	for len(m.sysAcq) <= dev {
		m.sysAcq = append(m.sysAcq, nil)
	}
	if m.sysAcq[dev] == nil {
		m.sysAcq[dev] = make(map[int][]acquireRec)
	}
	recs := m.sysAcq[dev][a.agent]
	if len(recs) == acquireRecsKept {
		recs = append(recs[:0], recs[1:]...)
	}
	m.sysAcq[dev][a.agent] = append(recs, acquireRec{seq: a.seq, vc: a.vc.clone()})
}

// systemAcquired reports whether a system-scope acquire on GPU l2-1 lies
// between the write of agent at seq and the access with clock vc: a packet
// of that GPU that launched after the write and before the access.
func (m *Machine) systemAcquired(l2 int, vc vclock, agent int, seq uint32) bool {
	if l2 == 0 {
		return true
	}
	m.sysMu.Lock()
	defer m.sysMu.Unlock()
	if l2-1 >= len(m.sysAcq) {
		return false
	}
	for g, recs := range m.sysAcq[l2-1] {
		// The newest acquire of agent g that happened before the access
		// has seen the most; records are in increasing seq.
		k := sort.Search(len(recs), func(i int) bool { return recs[i].seq > vc.get(g) })
		if k > 0 && recs[k-1].vc.get(agent) >= seq {
			return true
		}
	}
	return false
}

// delayer injects seeded random delays.
type delayer struct {
	max time.Duration
	rng *rand.Rand
}

func (m *Machine) newDelayer(agent int) *delayer {
	if m.opts.MaxDelay <= 0 {
		return nil
	}
	return &delayer{max: m.opts.MaxDelay, rng: rand.New(rand.NewPCG(m.opts.Seed, uint64(agent)))}
}

func (d *delayer) sleep() {
	if d == nil {
		return
	}
	if n := d.rng.Int64N(int64(d.max)); n > 0 {
		time.Sleep(time.Duration(n))
	}
}

// alloc is one region of emulated memory: device memory (hipMalloc) or
// host memory the device can read (kernarg pool).
type alloc struct {
	base, size uint64
	data       []byte
	device     int           // -1 for host memory
	access     atomic.Uint64 // bit d: GPU d may access it
	// checked host memory (hipHostMalloc) goes through the hazard
	// checker like device memory: copies between GPUs and pinned
	// staging are staged through it. The host's own reads and writes of
	// it are plain Go memory accesses the checker sees only where they
	// are reported (HostAccess). Set after the region is published, so
	// atomic: lookups take no lock.
	checked atomic.Bool
	freed   bool
	shadow  shadow
}

// ErrNoAccess is the fault of a GPU touching memory that is not mapped to
// it: host memory from a CPU pool before hsa_amd_agents_allow_access for
// that GPU, or another GPU's memory.
var ErrNoAccess = errors.New("emu: memory not accessible to this GPU")

// gpuSpan is span for an access by GPU dev, which must have the right to
// the memory: ROCr maps pool memory only to the agents it is allowed to,
// and a GPU's VM faults on anything else.
func (m *Machine) gpuSpan(dev int, addr, n uint64, write bool, a *actor) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	r, err := m.find(addr, n)
	if err != nil {
		return nil, err
	}
	ok := r.access.Load()&(1<<uint(dev)) != 0
	if !ok && r.device >= 0 {
		m.memMu.RLock()
		ok = m.peerOn[dev]&(1<<uint(r.device)) != 0
		m.memMu.RUnlock()
	}
	if !ok {
		owner := "host memory"
		if r.device >= 0 {
			owner = fmt.Sprintf("gpu%d's memory", r.device)
		}
		f := &accessFault{dev: dev, addr: addr,
			msg: fmt.Sprintf("%v: gpu%d accessed [%#x, %#x), %s", ErrNoAccess, dev, addr, addr+n, owner)}
		m.vmFault(f)
		return nil, f
	}
	l2 := dev + 1
	if a != nil && a.copyEngine {
		l2 = 0
	}
	return m.spanIn(r, addr, n, write, a, l2)
}

// allowAccess grants GPU dev access to the region holding addr.
func (m *Machine) allowAccess(addr uint64, dev int) bool {
	r, err := m.find(addr, 1)
	if err != nil {
		return false
	}
	r.access.Or(1 << uint(dev))
	return true
}

// checkHost makes the checker track GPU accesses to the host region at
// addr.
func (m *Machine) checkHost(addr uint64) {
	if r, err := m.find(addr, 1); err == nil {
		r.checked.Store(true)
	}
}

// addAlloc inserts a region into the address table.
func (m *Machine) addAlloc(a *alloc) {
	m.memMu.Lock()
	defer m.memMu.Unlock()
	old := m.allocTable()
	i := sort.Search(len(old), func(i int) bool { return old[i].base > a.base })
	// A new table: lookups may still be reading the old one.
	tab := make([]*alloc, 0, len(old)+1)
	tab = append(append(append(tab, old[:i]...), a), old[i:]...)
	m.allocTab.Store(&tab)
}

// allocTable is the current memory table, sorted by base.
func (m *Machine) allocTable() []*alloc {
	if p := m.allocTab.Load(); p != nil {
		return *p
	}
	return nil
}

// find returns the region containing [addr, addr+n).
func (m *Machine) find(addr, n uint64) (*alloc, error) {
	tab := m.allocTable()
	i := sort.Search(len(tab), func(i int) bool { return tab[i].base > addr }) - 1
	if i < 0 || addr+n > tab[i].base+tab[i].size || addr < tab[i].base {
		return nil, fmt.Errorf("emu: address range [%#x, %#x) is not mapped", addr, addr+n)
	}
	return tab[i], nil
}

// removeHost drops a host region from the table (hsa_amd_memory_pool_free).
func (m *Machine) removeHost(base uint64) bool {
	m.memMu.Lock()
	defer m.memMu.Unlock()
	old := m.allocTable()
	for i, a := range old {
		if a.base == base && a.device < 0 {
			tab := make([]*alloc, 0, len(old)-1)
			tab = append(append(tab, old[:i]...), old[i+1:]...)
			m.allocTab.Store(&tab)
			return true
		}
	}
	return false
}

// hostAlloc makes host-addressable memory aligned to 64 bytes, registered
// so the device can resolve its address.
func (m *Machine) hostAlloc(size uint64) unsafe.Pointer {
	buf := make([]byte, size+64)
	off := (64 - uintptr(unsafe.Pointer(&buf[0]))%64) % 64
	data := buf[off : off+uintptr(size)]
	p := unsafe.Pointer(&data[0])
	m.addAlloc(&alloc{base: uint64(uintptr(p)), size: size, data: data, device: -1})
	return p
}

// span resolves device bytes for an access by actor a, checking hazards.
// A nil actor skips the check (checker off).
func (m *Machine) span(addr, n uint64, write bool, a *actor) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	r, err := m.find(addr, n)
	if err != nil {
		return nil, err
	}
	return m.spanIn(r, addr, n, write, a, 0)
}

// spanIn is span of [addr, addr+n) within the region r that holds it, for
// an access through the L2 of GPU l2-1 (0: none, the host's).
func (m *Machine) spanIn(r *alloc, addr, n uint64, write bool, a *actor, l2 int) ([]byte, error) {
	if r.freed {
		if a != nil {
			m.report([]*HazardError{{Kind: HazardUseAfterFree, Lo: addr, Hi: addr + n, Op: a.what, Queue: a.where,
				Prior: "hipFree", PriorQ: "host"}})
		}
		return nil, fmt.Errorf("emu: [%#x, %#x) was freed", addr, addr+n)
	}
	if a != nil && m.opts.Hazards && (r.device >= 0 || r.checked.Load()) {
		m.report(r.shadow.access(addr, addr+n, write, a, l2, m))
	}
	off := addr - r.base
	return r.data[off : off+n], nil
}

// Quiesce waits until every queue and stream has run all its work, without
// the host learning anything from it: the hazard checker's clocks are left
// alone. Tests use it to let unordered work finish before conflicting work
// starts, so that only the checker (not Go's race detector) sees the race.
func (m *Machine) Quiesce() {
	for {
		busy := false
		m.hsa.mu.Lock()
		for _, q := range m.hsa.queues {
			if q.broken.Load() {
				continue
			}
			if int64(q.read.Load()) <= q.rung.Load() {
				busy = true
			}
		}
		m.hsa.mu.Unlock()
		m.hip.mu.Lock()
		for _, s := range m.hip.streams {
			s.mu.Lock()
			if s.ran < s.queued && !s.evicted {
				busy = true
			}
			s.mu.Unlock()
		}
		m.hip.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

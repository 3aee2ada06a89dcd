package emu

import (
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// HSA is the emulated HSA runtime. It implements hsa.Runtime.
type HSA struct {
	m *Machine

	mu       sync.Mutex
	inits    int
	readers  []*codeReader
	exes     []*executable
	queues   map[*hsa.Queue]*queue
	nextQID  uint64
	kernargs map[unsafe.Pointer]bool

	storageFaults []string
	busyWaits     atomic.Uint64
	interrupts    atomic.Uint64
	// fences counts processed packets' fence scopes: [0] acquire, [1]
	// release, by kind and scope (see hsa.FenceCounts).
	fences [2][hsa.FenceKinds][4]atomic.Uint64
	events sysEvents
}

// Interrupts counts the end-of-pipe interrupts AQL packets raised: one per
// packet whose completion signal is an interrupt signal.
func (h *HSA) Interrupts() uint64 { return h.interrupts.Load() }

// FenceScopes counts the AQL packets the packet processors have
// processed, by kind and fence scope.
func (h *HSA) FenceScopes() hsa.FenceCounts {
	var c hsa.FenceCounts
	for k := range hsa.FenceKinds {
		for sc := range 4 {
			c.Acquire[k][sc] = h.fences[0][k][sc].Load()
			c.Release[k][sc] = h.fences[1][k][sc].Load()
		}
	}
	return c
}

// countFences adds a processed packet's header to FenceScopes.
func (h *HSA) countFences(header uint16) {
	if k := hsa.FenceKindOf(hsa.HeaderType(header)); k >= 0 {
		h.fences[0][k][hsa.HeaderAcquireScope(header)].Add(1)
		h.fences[1][k][hsa.HeaderReleaseScope(header)].Add(1)
	}
}

// BusyHostWaits counts host waits on non-interrupt signals, which ROCr
// serves by polling instead of blocking.
func (h *HSA) BusyHostWaits() uint64 { return h.busyWaits.Load() }

var _ hsa.Runtime = (*HSA)(nil)

// Agent handles: the CPU is 1, GPU d is 2+d.
const cpuAgent hsa.Agent = 1

func gpuAgent(d int) hsa.Agent { return hsa.Agent(2 + d) }

// Memory pools: the CPU's kernarg (fine-grained) pool, and one
// coarse-grained pool per GPU.
const kernargPool hsa.MemoryPool = 1

func gpuPool(d int) hsa.MemoryPool { return hsa.MemoryPool(100 + d) }

// QueueMaxSize is what the emulated GPUs report for AgentInfoQueueMaxSize.
const QueueMaxSize = 1 << 17

// QueuesMax is what the emulated GPUs report for AgentInfoQueuesMax.
const QueuesMax = 128

func (h *HSA) err(fn string, s hsa.Status) error {
	return &hsa.Error{Func: fn, Status: s, Text: h.StatusString(s)}
}

func (h *HSA) initialized() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inits > 0
}

func (h *HSA) Init() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inits++
	if h.queues == nil {
		h.queues = map[*hsa.Queue]*queue{}
		h.kernargs = map[unsafe.Pointer]bool{}
	}
	return nil
}

// InitCount is hsa_init's reference count: hsa_init calls not yet matched
// by hsa_shut_down.
func (h *HSA) InitCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inits
}

func (h *HSA) ShutDown() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inits == 0 {
		return h.err("hsa_shut_down", hsa.StatusErrorNotInitialized)
	}
	h.inits--
	if h.inits == 0 {
		h.events.clear()
	}
	return nil
}

var statusText = map[hsa.Status]string{
	hsa.StatusSuccess:                      "HSA_STATUS_SUCCESS: The function has been executed successfully.",
	hsa.StatusErrorInvalidArgument:         "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument.",
	hsa.StatusErrorInvalidAllocation:       "HSA_STATUS_ERROR_INVALID_ALLOCATION: The requested allocation is not valid.",
	hsa.StatusErrorInvalidAgent:            "HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid.",
	hsa.StatusErrorInvalidSignal:           "HSA_STATUS_ERROR_INVALID_SIGNAL: The signal is invalid.",
	hsa.StatusErrorInvalidQueue:            "HSA_STATUS_ERROR_INVALID_QUEUE: The queue is invalid.",
	hsa.StatusErrorOutOfResources:          "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.",
	hsa.StatusErrorInvalidPacket:           "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: The packet format is invalid.",
	hsa.StatusErrorNotInitialized:          "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero.",
	hsa.StatusErrorInvalidCodeObject:       "HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid.",
	hsa.StatusErrorInvalidExecutable:       "HSA_STATUS_ERROR_INVALID_EXECUTABLE: The executable is invalid.",
	hsa.StatusErrorFrozenExecutable:        "HSA_STATUS_ERROR_FROZEN_EXECUTABLE: The executable is frozen.",
	hsa.StatusErrorInvalidSymbolName:       "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name.",
	hsa.StatusErrorInvalidCodeObjRdr:       "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: The code object reader is invalid.",
	hsa.StatusErrorMemoryFault:             "HSA_STATUS_ERROR_MEMORY_FAULT: Agent attempted to access an inaccessible address.",
	hsa.StatusErrorMemoryApertureViolation: "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The memory access violated the aperture.",
	hsa.StatusErrorException:               "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception.",
}

func (h *HSA) StatusString(s hsa.Status) string {
	if t, ok := statusText[s]; ok {
		return t
	}
	return fmt.Sprintf("unknown HSA status 0x%x", uint32(s))
}

func (h *HSA) Agents() ([]hsa.Agent, error) {
	if !h.initialized() {
		return nil, h.err("hsa_iterate_agents", hsa.StatusErrorNotInitialized)
	}
	out := []hsa.Agent{cpuAgent}
	for d := range h.m.devices {
		out = append(out, gpuAgent(d))
	}
	return out, nil
}

func (h *HSA) gpu(a hsa.Agent) (int, bool) {
	d := int(a) - 2
	return d, d >= 0 && d < len(h.m.devices)
}

func (h *HSA) AgentInfoString(a hsa.Agent, attr hsa.AgentInfo) (string, error) {
	d, isGPU := h.gpu(a)
	if a != cpuAgent && !isGPU {
		return "", h.err("hsa_agent_get_info", hsa.StatusErrorInvalidAgent)
	}
	switch attr {
	case hsa.AgentInfoName:
		if isGPU {
			return h.m.opts.ISA, nil
		}
		return "Emulated CPU", nil
	case hsa.AgentInfoVendorName:
		return "AMD", nil
	case hsa.AgentInfoProductName:
		if isGPU {
			return fmt.Sprintf("rocsync emulated GPU %d", d), nil
		}
		return "rocsync emulated CPU", nil
	}
	return "", h.err("hsa_agent_get_info", hsa.StatusErrorInvalidArgument)
}

func (h *HSA) AgentInfoUint32(a hsa.Agent, attr hsa.AgentInfo) (uint32, error) {
	_, isGPU := h.gpu(a)
	if a != cpuAgent && !isGPU {
		return 0, h.err("hsa_agent_get_info", hsa.StatusErrorInvalidAgent)
	}
	switch attr {
	case hsa.AgentInfoDevice:
		if isGPU {
			return uint32(hsa.DeviceTypeGPU), nil
		}
		return uint32(hsa.DeviceTypeCPU), nil
	case hsa.AgentInfoQueueMaxSize:
		if isGPU {
			return QueueMaxSize, nil
		}
		return 0, nil
	case hsa.AgentInfoQueueMinSize:
		return 64, nil
	case hsa.AgentInfoQueuesMax:
		return QueuesMax, nil
	case hsa.AgentInfoWavefrontSize:
		return uint32(kernels.Wavefront(h.m.opts.ISA)), nil
	case hsa.AgentInfoComputeUnits:
		return 4, nil
	case hsa.AgentInfoBDFID, hsa.AgentInfoDomain:
		d, ok := h.gpu(a)
		if !ok {
			return 0, nil // the CPU agent reports 0
		}
		loc := h.m.devices[d].pci
		if attr == hsa.AgentInfoDomain {
			return loc.domain, nil
		}
		return loc.bdfid(), nil
	}
	return 0, h.err("hsa_agent_get_info", hsa.StatusErrorInvalidArgument)
}

func (h *HSA) AgentISAs(a hsa.Agent) ([]hsa.ISA, error) {
	if _, ok := h.gpu(a); !ok {
		return nil, nil
	}
	return []hsa.ISA{1}, nil
}

func (h *HSA) ISAName(isa hsa.ISA) (string, error) {
	if isa != 1 {
		return "", h.err("hsa_isa_get_info_alt", hsa.StatusErrorInvalidISA)
	}
	return "amdgcn-amd-amdhsa--" + h.m.opts.ISA, nil
}

func (h *HSA) MemoryPools(a hsa.Agent) ([]hsa.MemoryPool, error) {
	if a == cpuAgent {
		return []hsa.MemoryPool{kernargPool}, nil
	}
	if d, ok := h.gpu(a); ok {
		return []hsa.MemoryPool{gpuPool(d)}, nil
	}
	return nil, h.err("hsa_amd_agent_iterate_memory_pools", hsa.StatusErrorInvalidAgent)
}

func (h *HSA) MemoryPoolInfoUint32(p hsa.MemoryPool, attr hsa.PoolInfo) (uint32, error) {
	switch attr {
	case hsa.PoolInfoSegment:
		return hsa.SegmentGlobal, nil
	case hsa.PoolInfoGlobalFlags:
		if p == kernargPool {
			return hsa.GlobalFlagKernargInit | hsa.GlobalFlagFineGrained, nil
		}
		return hsa.GlobalFlagCoarseGrained, nil
	}
	return 0, h.err("hsa_amd_memory_pool_get_info", hsa.StatusErrorInvalidArgument)
}

func (h *HSA) MemoryPoolInfoUint64(p hsa.MemoryPool, attr hsa.PoolInfo) (uint64, error) {
	switch attr {
	case hsa.PoolInfoSize:
		return h.m.opts.MemoryPerDevice, nil
	case hsa.PoolInfoRuntimeAllocGranule, hsa.PoolInfoRuntimeAllocAlign:
		return 4096, nil
	}
	return 0, h.err("hsa_amd_memory_pool_get_info", hsa.StatusErrorInvalidArgument)
}

func (h *HSA) MemoryPoolInfoBool(p hsa.MemoryPool, attr hsa.PoolInfo) (bool, error) {
	switch attr {
	case hsa.PoolInfoRuntimeAllocAllowed:
		return true, nil
	case hsa.PoolInfoAccessibleByAll:
		return p == kernargPool, nil
	}
	return false, h.err("hsa_amd_memory_pool_get_info", hsa.StatusErrorInvalidArgument)
}

// MemoryPoolAllocate serves the kernarg pool with host memory the emulated
// device can read. Device memory comes from hipMalloc: the emulator keeps
// device addresses opaque to the host, and an HSA pool allocation would
// have to return a host pointer.
func (h *HSA) MemoryPoolAllocate(p hsa.MemoryPool, size uint64) (unsafe.Pointer, error) {
	if !h.initialized() {
		return nil, h.err("hsa_amd_memory_pool_allocate", hsa.StatusErrorNotInitialized)
	}
	if p != kernargPool {
		return nil, &hsa.Error{Func: "hsa_amd_memory_pool_allocate", Status: hsa.StatusErrorInvalidAllocation,
			Text: "emu: only the kernarg pool is host-addressable here; allocate device memory with hipMalloc"}
	}
	if size == 0 {
		return nil, h.err("hsa_amd_memory_pool_allocate", hsa.StatusErrorInvalidArgument)
	}
	ptr := h.m.hostAlloc(size)
	h.mu.Lock()
	h.kernargs[ptr] = true
	h.mu.Unlock()
	return ptr, nil
}

func (h *HSA) MemoryPoolFree(ptr unsafe.Pointer) error {
	h.mu.Lock()
	ok := h.kernargs[ptr]
	delete(h.kernargs, ptr)
	h.mu.Unlock()
	if !ok || !h.m.removeHost(uint64(uintptr(ptr))) {
		return h.err("hsa_amd_memory_pool_free", hsa.StatusErrorInvalidArgument)
	}
	return nil
}

// AgentsAllowAccess maps the allocation holding ptr to the GPU agents
// listed, as ROCr does (QueryPointerInfo, then MapMemoryToGPUNodes); until
// then memory from a CPU pool is not accessible to any GPU.
func (h *HSA) AgentsAllowAccess(agents []hsa.Agent, ptr unsafe.Pointer) error {
	const fn = "hsa_amd_agents_allow_access"
	if !h.initialized() {
		return h.err(fn, hsa.StatusErrorNotInitialized)
	}
	if len(agents) == 0 || ptr == nil {
		return h.err(fn, hsa.StatusErrorInvalidArgument)
	}
	for _, a := range agents {
		if _, ok := h.gpu(a); !ok && a != cpuAgent {
			return h.err(fn, hsa.StatusErrorInvalidAgent)
		}
	}
	if _, err := h.m.find(uint64(uintptr(ptr)), 1); err != nil {
		return h.err(fn, hsa.StatusErrorInvalidArgument)
	}
	for _, a := range agents {
		if d, ok := h.gpu(a); ok {
			h.m.allowAccess(uint64(uintptr(ptr)), d)
		}
	}
	return nil
}

func (h *HSA) QueueCreate(a hsa.Agent, size uint32, typ hsa.QueueType, onError hsa.QueueErrorFunc) (*hsa.Queue, error) {
	if !h.initialized() {
		return nil, h.err("hsa_queue_create", hsa.StatusErrorNotInitialized)
	}
	d, ok := h.gpu(a)
	if !ok {
		return nil, h.err("hsa_queue_create", hsa.StatusErrorInvalidAgent)
	}
	if size < 64 || size > QueueMaxSize || size&(size-1) != 0 {
		return nil, h.err("hsa_queue_create", hsa.StatusErrorInvalidArgument)
	}
	h.mu.Lock()
	if len(h.queues) >= QueuesMax {
		h.mu.Unlock()
		return nil, h.err("hsa_queue_create", hsa.StatusErrorOutOfResources)
	}
	h.nextQID++
	id := h.nextQID
	h.mu.Unlock()
	q := h.m.newQueue(d, id, size, onError)
	h.mu.Lock()
	h.queues[q.hq] = q
	if h.m.devices[d].evicted.Load() {
		// An evicted process's new queues are never mapped (see
		// SetVMFaultEviction).
		q.broken.Store(true)
	}
	h.mu.Unlock()
	return q.hq, nil
}

func (h *HSA) QueueDestroy(hq *hsa.Queue) error {
	h.mu.Lock()
	q := h.queues[hq]
	delete(h.queues, hq)
	h.mu.Unlock()
	if q == nil {
		return h.err("hsa_queue_destroy", hsa.StatusErrorInvalidQueue)
	}
	q.stop()
	return nil
}

// QueueErrorCause implements hsa.QueueErrorCauser: why the queue first
// failed, which ROCr's callback cannot say.
func (h *HSA) QueueErrorCause(hq *hsa.Queue) error {
	if c := (*queue)(hq.Handle).cause.Load(); c != nil {
		return *c
	}
	return nil
}

var _ hsa.QueueErrorCauser = (*HSA)(nil)

func (h *HSA) QueueLoadReadIndexScacquire(hq *hsa.Queue) uint64 {
	return (*queue)(hq.Handle).read.Load()
}

func (h *HSA) QueueLoadWriteIndexRelaxed(hq *hsa.Queue) uint64 {
	return (*queue)(hq.Handle).write.Load()
}

func (h *HSA) QueueAddWriteIndexScacqScrel(hq *hsa.Queue, n uint64) uint64 {
	return (*queue)(hq.Handle).write.Add(n) - n
}

func (h *HSA) QueueCASWriteIndexScacqScrel(hq *hsa.Queue, expected, value uint64) uint64 {
	q := (*queue)(hq.Handle)
	if q.write.CompareAndSwap(expected, value) {
		return expected
	}
	return q.write.Load()
}

// A signal is an interrupt signal unless it is GPU-only or IPC, or no CPU
// consumes it: the rule hsa_amd_signal_value_pointer enforces.
func interruptSignal(consumers []hsa.Agent, attributes uint64) bool {
	if attributes&(hsa.SignalAttrAMDGPUOnly|hsa.SignalAttrIPC) != 0 {
		return false
	}
	if len(consumers) == 0 {
		return true
	}
	for _, c := range consumers {
		if c == cpuAgent {
			return true
		}
	}
	return false
}

func (h *HSA) SignalCreate(initial int64, consumers []hsa.Agent) (hsa.Signal, error) {
	return h.AMDSignalCreate(initial, consumers, 0)
}

func (h *HSA) AMDSignalCreate(initial int64, consumers []hsa.Agent, attributes uint64) (hsa.Signal, error) {
	if !h.initialized() {
		return 0, h.err("hsa_amd_signal_create", hsa.StatusErrorNotInitialized)
	}
	intr := interruptSignal(consumers, attributes)
	if attributes&(hsa.SignalAttrAMDGPUOnly|hsa.SignalAttrIPC) == 0 && len(consumers) > 0 {
		// ROCr refuses a consumer listed twice (hsa_amd_signal_create).
		seen := map[hsa.Agent]bool{}
		for _, c := range consumers {
			if seen[c] {
				return 0, h.err("hsa_amd_signal_create", hsa.StatusErrorInvalidArgument)
			}
			seen[c] = true
		}
	}
	return h.m.newSignal(initial, intr), nil
}

func (h *HSA) sig(fn string, s hsa.Signal) (*signal, error) {
	x := h.m.signal(s)
	if x == nil || x.destroyed {
		return nil, h.err(fn, hsa.StatusErrorInvalidSignal)
	}
	return x, nil
}

func (h *HSA) SignalDestroy(s hsa.Signal) error {
	x, err := h.sig("hsa_signal_destroy", s)
	if err != nil {
		return err
	}
	x.destroyed = true
	return nil
}

// The store, load and wait functions return nothing in C; on an invalid
// handle the real runtime faults, the emulator panics with the same cause.
func (h *HSA) mustSig(fn string, s hsa.Signal) *signal {
	x, err := h.sig(fn, s)
	if err != nil {
		panic(err)
	}
	return x
}

func (h *HSA) SignalStoreScrelease(s hsa.Signal, v int64) { h.store(s, v) }
func (h *HSA) SignalStoreRelaxed(s hsa.Signal, v int64)   { h.store(s, v) }

func (h *HSA) store(s hsa.Signal, v int64) {
	x := h.mustSig("hsa_signal_store", s)
	if x.doorbell != nil {
		x.doorbell.ringDoorbell(v)
		return
	}
	x.storeFrom(v, h.m.hostSnapshot())
}

func (h *HSA) SignalLoadScacquire(s hsa.Signal) int64 {
	x := h.mustSig("hsa_signal_load_scacquire", s)
	v := x.v.Load()
	if h.m.opts.Hazards {
		h.m.hostAcquire(x.clock())
	}
	return v
}

// SignalWaitScacquire treats timeoutHint as nanoseconds: the emulated
// system timestamp runs at 1 GHz.
func (h *HSA) SignalWaitScacquire(s hsa.Signal, cond hsa.SignalCondition, compare int64, timeoutHint uint64, state hsa.WaitState) int64 {
	x := h.mustSig("hsa_signal_wait_scacquire", s)
	if !x.interrupt {
		// ROCr polls a busy-wait signal (BusyWaitSignal::WaitRelaxed),
		// holding a CPU core, whatever the wait state asks.
		h.busyWaits.Add(1)
	}
	var timeout time.Duration
	if timeoutHint != hsa.TimeoutInfinite && timeoutHint < uint64(1<<62) {
		timeout = time.Duration(timeoutHint)
	}
	v := x.wait(cond, compare, timeout)
	if h.m.opts.Hazards {
		h.m.hostAcquire(x.clock())
	}
	return v
}

func (h *HSA) SignalValuePointer(s hsa.Signal) (unsafe.Pointer, error) {
	x, err := h.sig("hsa_amd_signal_value_pointer", s)
	if err != nil {
		return nil, err
	}
	if x.interrupt {
		return nil, &hsa.Error{Func: "hsa_amd_signal_value_pointer", Status: hsa.StatusErrorInvalidArgument,
			Text: h.StatusString(hsa.StatusErrorInvalidArgument) + " (interrupt signals have no value pointer; create the signal GPU-only or with no CPU consumer)"}
	}
	return unsafe.Pointer(&x.v), nil
}

// executable is a loaded set of code objects.
type executable struct {
	storage []*codeReader // where its code objects came from
	frozen  bool
	symbols map[string]uint64 // symbol name -> kernel object handle
}

// kernelImpl is what a kernel object handle runs.
type kernelImpl struct {
	symbol      string
	op          kernels.Op
	dt          kernels.DType
	kernargSize uint32
	groupSize   uint32 // static LDS per workgroup
	privateSize uint32
	implemented bool
	// user is the signature of a kernel that is not rocsync's (nil for
	// rocsync's), read from its code object's metadata; it runs through
	// Options.References.
	user *userkernel.Signature

	// A reduction kernel (rocsync_sum_*) runs kernels.ReduceBytes instead
	// of an elementwise op.
	reduction   kernels.Reduction
	isReduction bool
	// reqdWorkgroup is the metadata's .reqd_workgroup_size (zero: any).
	reqdWorkgroup [3]uint32
	// hidden are the hidden arguments the metadata lists, which HIP fills
	// for a launch.
	hidden []kernels.ArgMeta
}

// newKernelImpl reads one kernel's metadata.
func (m *Machine) newKernelImpl(k kernels.KernelMeta) *kernelImpl {
	impl := &kernelImpl{symbol: k.Symbol, kernargSize: k.KernargSegmentSize,
		groupSize: k.GroupSegmentFixedSize, privateSize: k.PrivateSegmentFixedSize}
	if m.opts.KernelGroupSegmentSize != 0 {
		impl.groupSize = m.opts.KernelGroupSegmentSize
	}
	impl.reqdWorkgroup = k.ReqdWorkgroupSize
	for _, a := range k.Args {
		if strings.HasPrefix(a.ValueKind, "hidden_") {
			impl.hidden = append(impl.hidden, a)
		}
	}
	impl.op, impl.dt, impl.implemented = kernels.ParseSymbol(k.Symbol)
	if !impl.implemented {
		impl.reduction, impl.dt, impl.isReduction = kernels.ParseReductionSymbol(k.Symbol)
		impl.implemented = impl.isReduction
	}
	return impl
}

// userImage reads the signatures of the kernels in a code object that are
// not rocsync's, for the references; nil if it cannot (their dispatch
// then faults, as an unknown kernel does).
func (m *Machine) userImage(code []byte) *userkernel.Image {
	src, err := userkernel.CodeObjects(code)
	if err != nil {
		return nil
	}
	img, err := userkernel.NewBuilder(userkernel.Options{NoDiskCache: true}).Build(src, userkernel.Device{ISA: "amdgcn-amd-amdhsa--" + m.opts.ISA})
	if err != nil {
		return nil
	}
	return img
}

// CodeObjectReaderCreateFromMemory keeps the caller's bytes, as ROCr does:
// it does not copy them, and the loader records their address in each code
// object it loads (the memory:// URI that debuggers and profilers read the
// code object through), so they must stay intact until every executable
// loaded from them is destroyed. The checksum lets ExecutableDestroy check.
func (h *HSA) CodeObjectReaderCreateFromMemory(code []byte) (hsa.CodeObjectReader, error) {
	if len(code) == 0 {
		return 0, h.err("hsa_code_object_reader_create_from_memory", hsa.StatusErrorInvalidArgument)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readers = append(h.readers, &codeReader{code: code, sum: crc32.ChecksumIEEE(code)})
	return hsa.CodeObjectReader(len(h.readers)), nil
}

// codeReader is a code object reader: the caller's memory.
type codeReader struct {
	code      []byte
	sum       uint32
	destroyed bool
}

func (h *HSA) CodeObjectReaderDestroy(r hsa.CodeObjectReader) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r == 0 || int(r) > len(h.readers) || h.readers[r-1].destroyed {
		return h.err("hsa_code_object_reader_destroy", hsa.StatusErrorInvalidCodeObjRdr)
	}
	rd := h.readers[r-1]
	rd.destroyed = true
	// The caller may now release the memory; a loaded code object still
	// points into it.
	for i, x := range h.exes {
		if x == nil {
			continue
		}
		for _, s := range x.storage {
			if s == rd {
				h.storageFaults = append(h.storageFaults, fmt.Sprintf(
					"code object reader %d destroyed while executable %d still holds its code object's address", r, i+1))
			}
		}
	}
	return nil
}

// CodeObjectStorageFaults lists every time a code object's memory was
// released, or changed, while an executable loaded from it was alive.
func (h *HSA) CodeObjectStorageFaults() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.storageFaults...)
}

// LiveExecutables counts executables not yet destroyed.
func (h *HSA) LiveExecutables() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, x := range h.exes {
		if x != nil {
			n++
		}
	}
	return n
}

func (h *HSA) ExecutableCreateAlt(profile, rounding uint32) (hsa.Executable, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exes = append(h.exes, &executable{symbols: map[string]uint64{}})
	return hsa.Executable(len(h.exes)), nil
}

func (h *HSA) exe(fn string, e hsa.Executable) (*executable, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e == 0 || int(e) > len(h.exes) || h.exes[e-1] == nil {
		return nil, h.err(fn, hsa.StatusErrorInvalidExecutable)
	}
	return h.exes[e-1], nil
}

// ExecutableLoadAgentCodeObject parses the real code object: the ELF, its
// AMDGPU metadata note and its .kd symbols. Its target must match the
// agent's gfx exactly, as ROCr requires.
func (h *HSA) ExecutableLoadAgentCodeObject(e hsa.Executable, a hsa.Agent, r hsa.CodeObjectReader) error {
	const fn = "hsa_executable_load_agent_code_object"
	x, err := h.exe(fn, e)
	if err != nil {
		return err
	}
	if _, ok := h.gpu(a); !ok {
		return h.err(fn, hsa.StatusErrorInvalidAgent)
	}
	h.mu.Lock()
	var rd *codeReader
	if r != 0 && int(r) <= len(h.readers) && !h.readers[r-1].destroyed {
		rd = h.readers[r-1]
	}
	h.mu.Unlock()
	if rd == nil {
		return h.err(fn, hsa.StatusErrorInvalidCodeObjRdr)
	}
	code := rd.code
	if x.frozen {
		return h.err(fn, hsa.StatusErrorFrozenExecutable)
	}
	if userkernel.IsDeclaredImage(code) {
		return h.loadDeclared(x, rd)
	}
	// ROCr reads the version from EI_ABIVERSION and refuses one its
	// loader does not know before it looks at anything else.
	version, err := kernels.ReadCodeObjectVersion(code)
	if err == nil && !h.m.rocrAccepts(version) {
		err = fmt.Errorf("LoaderError: unsupported code object version: %d (ROCm %d.%d)",
			version, h.m.release()/100, h.m.release()%100)
	}
	if err != nil {
		return &hsa.Error{Func: fn, Status: hsa.StatusErrorInvalidCodeObject, Text: err.Error()}
	}
	meta, err := kernels.ReadMetadata(code)
	if err != nil {
		return &hsa.Error{Func: fn, Status: hsa.StatusErrorInvalidCodeObject, Text: err.Error()}
	}
	target := codeObjectProcessor(meta.Target)
	if !h.m.isaCompatible(target) {
		return &hsa.Error{Func: fn, Status: hsa.StatusErrorInvalidISA,
			Text: fmt.Sprintf("%s (code object for %s, agent is %s)", h.StatusString(hsa.StatusErrorInvalidISA), target, h.m.opts.ISA)}
	}
	h.mu.Lock()
	x.storage = append(x.storage, rd)
	h.mu.Unlock()
	var user *userkernel.Image
	for _, k := range meta.Kernels {
		impl := h.m.newKernelImpl(k)
		if !impl.implemented {
			if user == nil {
				user = h.m.userImage(code)
			}
			if user != nil {
				impl.user, _ = user.Kernel(k.Symbol)
			}
		}
		x.symbols[k.Symbol] = h.m.addKernel(impl)
	}
	return nil
}

// addKernel registers a loaded kernel and returns its handle.
func (m *Machine) addKernel(impl *kernelImpl) uint64 {
	m.execMu.Lock()
	defer m.execMu.Unlock()
	m.kernels = append(m.kernels, impl)
	return uint64(len(m.kernels))
}

// loadDeclared loads a declared image (userkernel.IsDeclaredImage): the
// signatures of user kernels, without code, which userkernel builds for
// the emulator where no compiler is found. ROCr refuses it (it is no ELF
// object); the emulator runs its kernels through Options.References.
func (h *HSA) loadDeclared(x *executable, rd *codeReader) error {
	ks, err := userkernel.ReadDeclaredImage(rd.code)
	if err != nil {
		return &hsa.Error{Func: "hsa_executable_load_agent_code_object", Status: hsa.StatusErrorInvalidCodeObject, Text: err.Error()}
	}
	h.mu.Lock()
	x.storage = append(x.storage, rd)
	h.mu.Unlock()
	for _, k := range ks {
		impl := h.m.declaredKernelImpl(k)
		x.symbols[k.Symbol] = h.m.addKernel(impl)
	}
	return nil
}

// declaredKernelImpl is the kernel of a declared image's signature.
func (m *Machine) declaredKernelImpl(k *userkernel.Signature) *kernelImpl {
	return &kernelImpl{symbol: k.Symbol, kernargSize: k.ArgsSize, groupSize: m.opts.KernelGroupSegmentSize, user: k}
}

func (h *HSA) ExecutableFreeze(e hsa.Executable) error {
	x, err := h.exe("hsa_executable_freeze", e)
	if err != nil {
		return err
	}
	x.frozen = true
	return nil
}

// ExecutableDestroy checks that the memory of every code object the
// executable loaded is still alive and unchanged: until now a debugger or
// profiler could have read it.
func (h *HSA) ExecutableDestroy(e hsa.Executable) error {
	x, err := h.exe("hsa_executable_destroy", e)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, rd := range x.storage {
		if !rd.destroyed && crc32.ChecksumIEEE(rd.code) != rd.sum {
			h.storageFaults = append(h.storageFaults, fmt.Sprintf("executable %d: its code object's memory changed while loaded", e))
		}
	}
	h.exes[e-1] = nil
	return nil
}

func (h *HSA) ExecutableSymbolByName(e hsa.Executable, name string, a hsa.Agent) (hsa.ExecutableSymbol, error) {
	const fn = "hsa_executable_get_symbol_by_name"
	x, err := h.exe(fn, e)
	if err != nil {
		return 0, err
	}
	if !x.frozen {
		return 0, h.err(fn, hsa.StatusErrorInvalidExecutable)
	}
	k, ok := x.symbols[name]
	if !ok {
		return 0, h.err(fn, hsa.StatusErrorInvalidSymbolName)
	}
	return hsa.ExecutableSymbol(k), nil
}

func (h *HSA) kernel(handle uint64) *kernelImpl {
	h.m.execMu.RLock()
	defer h.m.execMu.RUnlock()
	if handle == 0 || handle > uint64(len(h.m.kernels)) {
		return nil
	}
	return h.m.kernels[handle-1]
}

func (h *HSA) SymbolInfoUint32(s hsa.ExecutableSymbol, attr uint32) (uint32, error) {
	k := h.kernel(uint64(s))
	if k == nil {
		return 0, h.err("hsa_executable_symbol_get_info", hsa.StatusErrorInvalidArgument)
	}
	switch attr {
	case hsa.SymbolInfoKernargSegmentSize:
		return k.kernargSize, nil
	case hsa.SymbolInfoKernargSegmentAlign:
		return 16, nil
	case hsa.SymbolInfoGroupSegmentSize:
		return k.groupSize, nil
	case hsa.SymbolInfoPrivateSegmentSize:
		return k.privateSize, nil
	}
	return 0, h.err("hsa_executable_symbol_get_info", hsa.StatusErrorInvalidArgument)
}

// SymbolInfoUint64 gives the kernel object: the emulator uses the symbol
// handle itself, which the packet processor maps back to the kernel.
func (h *HSA) SymbolInfoUint64(s hsa.ExecutableSymbol, attr uint32) (uint64, error) {
	if h.kernel(uint64(s)) == nil || attr != hsa.SymbolInfoKernelObject {
		return 0, h.err("hsa_executable_symbol_get_info", hsa.StatusErrorInvalidArgument)
	}
	return uint64(s), nil
}

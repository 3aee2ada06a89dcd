// Package hsa defines the Go-level interface to the HSA runtime
// (libhsa-runtime64) functions that rocsync uses, the enum values and the
// AQL packet encoding they share.
//
// Two implementations stand behind Runtime: the purego binding to the real
// library and the emulated device in internal/rocmdev/emu. Everything above this
// package (queue/, the root API) is written against the interface only, so
// it runs the same code on both.
package hsa

import (
	"fmt"
	"unsafe"
)

// Handles. Each HSA handle type is a struct{uint64_t handle} in C, which the
// SysV ABI passes exactly like a uint64.
type (
	Agent            uint64
	Signal           uint64
	MemoryPool       uint64
	ISA              uint64
	Executable       uint64
	ExecutableSymbol uint64
	CodeObjectReader uint64
)

// Status is hsa_status_t.
type Status uint32

// Status values (hsa.h, hsa_ext_amd.h).
const (
	StatusSuccess                 Status = 0x0
	StatusInfoBreak               Status = 0x1
	StatusError                   Status = 0x1000
	StatusErrorInvalidArgument    Status = 0x1001
	StatusErrorInvalidQueueCreate Status = 0x1002
	StatusErrorInvalidAllocation  Status = 0x1003
	StatusErrorInvalidAgent       Status = 0x1004
	StatusErrorInvalidRegion      Status = 0x1005
	StatusErrorInvalidSignal      Status = 0x1006
	StatusErrorInvalidQueue       Status = 0x1007
	StatusErrorOutOfResources     Status = 0x1008
	StatusErrorInvalidPacket      Status = 0x1009
	StatusErrorResourceFree       Status = 0x100A
	StatusErrorNotInitialized     Status = 0x100B
	StatusErrorInvalidISA         Status = 0x100F
	StatusErrorInvalidCodeObject  Status = 0x1010
	StatusErrorInvalidExecutable  Status = 0x1011
	StatusErrorFrozenExecutable   Status = 0x1012
	StatusErrorInvalidSymbolName  Status = 0x1013
	StatusErrorException          Status = 0x1016
	StatusErrorInvalidCodeObjRdr  Status = 0x1021
	StatusErrorFatal              Status = 0x1026
	StatusErrorMemoryFault        Status = 43
)

// Error is a failed HSA call: the function, the status code and the
// runtime's own hsa_status_string text.
type Error struct {
	Func   string
	Status Status
	Text   string
}

func (e *Error) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("hsa: %s: status 0x%x", e.Func, uint32(e.Status))
	}
	return fmt.Sprintf("hsa: %s: status 0x%x: %s", e.Func, uint32(e.Status), e.Text)
}

// Is lets errors.Is(err, &hsa.Error{Status: s}) match by status alone.
func (e *Error) Is(target error) bool {
	// errors.Is hands over the target as the caller wrote it; a type
	// assertion (not errors.As) keeps the comparison allocation-free.
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Status == e.Status && (t.Func == "" || t.Func == e.Func)
}

// DeviceType is hsa_device_type_t.
type DeviceType uint32

const (
	DeviceTypeCPU DeviceType = 0
	DeviceTypeGPU DeviceType = 1
	DeviceTypeDSP DeviceType = 2
)

// AgentInfo is hsa_agent_info_t (and the AMD extension values).
type AgentInfo uint32

const (
	AgentInfoName          AgentInfo = 0 // char[64]
	AgentInfoVendorName    AgentInfo = 1
	AgentInfoFeature       AgentInfo = 2
	AgentInfoWavefrontSize AgentInfo = 6
	AgentInfoQueuesMax     AgentInfo = 12
	AgentInfoQueueMinSize  AgentInfo = 13
	AgentInfoQueueMaxSize  AgentInfo = 14 // uint32
	AgentInfoNode          AgentInfo = 16
	AgentInfoDevice        AgentInfo = 17 // hsa_device_type_t
	AgentInfoProductName   AgentInfo = 0xA009
	AgentInfoComputeUnits  AgentInfo = 0xA002
)

// ISAInfoName is HSA_ISA_INFO_NAME: the full target ID, such as
// "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-".
const ISAInfoName uint32 = 1

// QueueType is hsa_queue_type32_t.
type QueueType uint32

const (
	QueueTypeMulti  QueueType = 0
	QueueTypeSingle QueueType = 1
)

// SignalCondition is hsa_signal_condition_t.
type SignalCondition uint32

const (
	ConditionEq  SignalCondition = 0
	ConditionNe  SignalCondition = 1
	ConditionLt  SignalCondition = 2
	ConditionGte SignalCondition = 3
)

// WaitState is hsa_wait_state_t.
type WaitState uint32

const (
	WaitStateBlocked WaitState = 0
	WaitStateActive  WaitState = 1
)

// AMD signal attributes for hsa_amd_signal_create.
const (
	SignalAttrAMDGPUOnly uint64 = 1
	SignalAttrIPC        uint64 = 2
)

// TimeoutInfinite is the timeout_hint meaning "no limit".
const TimeoutInfinite = ^uint64(0)

// Memory pool info attributes (hsa_amd_memory_pool_info_t).
type PoolInfo uint32

const (
	PoolInfoSegment             PoolInfo = 0 // uint32 segment
	PoolInfoGlobalFlags         PoolInfo = 1 // uint32 flags
	PoolInfoSize                PoolInfo = 2 // size_t
	PoolInfoRuntimeAllocAllowed PoolInfo = 5 // bool
	PoolInfoRuntimeAllocGranule PoolInfo = 6
	PoolInfoRuntimeAllocAlign   PoolInfo = 7
	PoolInfoAccessibleByAll     PoolInfo = 15
)

// Segments and global flags of a memory pool.
const (
	SegmentGlobal   uint32 = 0
	SegmentReadOnly uint32 = 1
	SegmentPrivate  uint32 = 2
	SegmentGroup    uint32 = 3

	GlobalFlagKernargInit   uint32 = 1
	GlobalFlagFineGrained   uint32 = 2
	GlobalFlagCoarseGrained uint32 = 4
)

// Executable and symbol constants.
const (
	ProfileBase                   uint32 = 0
	ProfileFull                   uint32 = 1
	FloatRoundingDefault          uint32 = 0
	SymbolInfoKernargSegmentSize  uint32 = 11 // uint32
	SymbolInfoKernargSegmentAlign uint32 = 12 // uint32
	SymbolInfoGroupSegmentSize    uint32 = 13 // uint32
	SymbolInfoPrivateSegmentSize  uint32 = 14 // uint32
	SymbolInfoKernelObject        uint32 = 22 // uint64
)

// Queue mirrors the fields of hsa_queue_t that the AQL submitter reads.
// For the real runtime Handle is the hsa_queue_t*; for the emulator it is
// the emulator's own queue. Base is the ring of Size 64-byte packet slots.
type Queue struct {
	Handle   unsafe.Pointer
	Base     unsafe.Pointer
	Doorbell Signal
	Size     uint32
	ID       uint64
}

// QueueErrorFunc receives asynchronous queue errors (the hsa_queue_create
// callback). It is called from a runtime thread.
type QueueErrorFunc func(status Status)

// QueueErrorCauser is implemented by a runtime that knows more about a
// queue error than its status: the emulator knows which kernel failed and
// why (a user kernel's reference that is missing, failed or panicked).
// ROCr's queue callback (hsa_queue_create) reports the status alone.
type QueueErrorCauser interface {
	// QueueErrorCause is the reason behind the queue's first error, or nil.
	QueueErrorCause(q *Queue) error
}

// Runtime is the set of HSA functions rocsync calls. Method names follow the
// C functions; the memory-order suffix is part of the name where C has
// several variants, because callers rely on the ordering.
type Runtime interface {
	Init() error
	ShutDown() error
	StatusString(s Status) string

	Agents() ([]Agent, error)
	AgentInfoString(a Agent, attr AgentInfo) (string, error)
	AgentInfoUint32(a Agent, attr AgentInfo) (uint32, error)
	AgentISAs(a Agent) ([]ISA, error)
	ISAName(isa ISA) (string, error)

	MemoryPools(a Agent) ([]MemoryPool, error)
	MemoryPoolInfoUint32(p MemoryPool, attr PoolInfo) (uint32, error)
	MemoryPoolInfoUint64(p MemoryPool, attr PoolInfo) (uint64, error)
	MemoryPoolInfoBool(p MemoryPool, attr PoolInfo) (bool, error)
	// MemoryPoolAllocate returns host-addressable memory for pools the host
	// can reach (kernarg, fine-grained); its device address is the same value.
	MemoryPoolAllocate(p MemoryPool, size uint64) (unsafe.Pointer, error)
	MemoryPoolFree(ptr unsafe.Pointer) error
	AgentsAllowAccess(agents []Agent, ptr unsafe.Pointer) error

	QueueCreate(a Agent, size uint32, typ QueueType, onError QueueErrorFunc) (*Queue, error)
	QueueDestroy(q *Queue) error
	QueueLoadReadIndexScacquire(q *Queue) uint64
	QueueLoadWriteIndexRelaxed(q *Queue) uint64
	QueueAddWriteIndexScacqScrel(q *Queue, n uint64) uint64
	QueueCASWriteIndexScacqScrel(q *Queue, expected, value uint64) uint64

	SignalCreate(initial int64, consumers []Agent) (Signal, error)
	AMDSignalCreate(initial int64, consumers []Agent, attributes uint64) (Signal, error)
	SignalDestroy(s Signal) error
	SignalStoreScrelease(s Signal, v int64)
	SignalStoreRelaxed(s Signal, v int64)
	SignalLoadScacquire(s Signal) int64
	SignalWaitScacquire(s Signal, cond SignalCondition, compare int64, timeoutHint uint64, state WaitState) int64
	// SignalValuePointer is hsa_amd_signal_value_pointer: the address of the
	// signal's 64-bit value. It fails for interrupt signals.
	SignalValuePointer(s Signal) (unsafe.Pointer, error)

	CodeObjectReaderCreateFromMemory(code []byte) (CodeObjectReader, error)
	CodeObjectReaderDestroy(r CodeObjectReader) error
	ExecutableCreateAlt(profile, rounding uint32) (Executable, error)
	ExecutableLoadAgentCodeObject(e Executable, a Agent, r CodeObjectReader) error
	ExecutableFreeze(e Executable) error
	ExecutableDestroy(e Executable) error
	ExecutableSymbolByName(e Executable, name string, a Agent) (ExecutableSymbol, error)
	SymbolInfoUint32(s ExecutableSymbol, attr uint32) (uint32, error)
	SymbolInfoUint64(s ExecutableSymbol, attr uint32) (uint64, error)

	// RegisterSystemEventHandler is hsa_amd_register_system_event_handler:
	// fn receives system events (GPU memory faults) on a runtime thread
	// until cancel is called. ROCr cannot unregister a handler, so cancel
	// makes the registration inert: the runtime's callback then reports
	// every event as not handled.
	RegisterSystemEventHandler(fn SystemEventFunc) (cancel func(), err error)
}

// DispatchTime is hsa_amd_profiling_dispatch_time_t: when a dispatch
// started and ended on the device, in system-domain ticks
// (SystemInfoTimestamp, SystemInfoTimestampFrequency per second).
type DispatchTime struct {
	Start, End uint64
}

// Profiler is the optional part of a Runtime that times dispatches (ROCr's
// hsa_amd_profiling_* calls): queue/ asks for it with a type assertion
// when a trace wants device timestamps.
type Profiler interface {
	// AMDProfilingSetProfilerEnabled is
	// hsa_amd_profiling_set_profiler_enabled.
	AMDProfilingSetProfilerEnabled(q *Queue, enable bool) error
	// AMDProfilingGetDispatchTime is hsa_amd_profiling_get_dispatch_time:
	// a's is the queue's agent, s the completed dispatch's completion
	// signal, read before the signal is used again.
	AMDProfilingGetDispatchTime(a Agent, s Signal) (DispatchTime, error)
	// SystemInfoUint64 is hsa_system_get_info for SystemInfoTimestamp and
	// SystemInfoTimestampFrequency.
	SystemInfoUint64(attr SystemInfo) (uint64, error)
}

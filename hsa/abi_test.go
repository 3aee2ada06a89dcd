package hsa

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// The Go side encodes AQL packets and passes enums by hand, so a wrong
// offset or value would corrupt packets silently on a real GPU. These tests
// compare every such value with what testdata/abi.c prints when compiled
// against the ROCm headers, or, where no compiler or headers exist, with
// testdata/abi_golden.txt (that program's stored output).

// abiEntry ties one line of abi.c's output to the Go value that must equal
// it. goName is the Go constant it checks ("" when the Go side has no
// named constant: a literal or a type size, described in note).
type abiEntry struct {
	goName string
	key    string
	val    uint64
	note   string
}

func abiTable() []abiEntry {
	c := func(goName, key string, v uint64) abiEntry { return abiEntry{goName: goName, key: key, val: v} }
	lit := func(key string, v uint64, note string) abiEntry { return abiEntry{key: key, val: v, note: note} }
	dispatchWord := func(dims uint16) uint64 {
		p := DispatchPacket{Header: Header(PacketTypeKernelDispatch, true, FenceScopeSystem, FenceScopeSystem), Setup: dims}
		return uint64(p.FirstWord())
	}
	hdr := func(t PacketType, barrier bool, acq, rel uint16) uint64 { return uint64(Header(t, barrier, acq, rel)) }
	const kd, ba, bo = "hsa_kernel_dispatch_packet_t", "hsa_barrier_and_packet_t", "hsa_barrier_or_packet_t"
	off := func(t, f string) string { return "offsetof(" + t + "." + f + ")" }

	return []abiEntry{
		// hsa_kernel_dispatch_packet_t
		c("PacketSize", "sizeof("+kd+")", PacketSize),
		lit(off(kd, "header"), 0, "PublishHeader stores the first word at offset 0"),
		c("DispatchOffSetup", off(kd, "setup"), DispatchOffSetup),
		c("DispatchOffWorkgroupSizeX", off(kd, "workgroup_size_x"), DispatchOffWorkgroupSizeX),
		c("DispatchOffWorkgroupSizeY", off(kd, "workgroup_size_y"), DispatchOffWorkgroupSizeY),
		c("DispatchOffWorkgroupSizeZ", off(kd, "workgroup_size_z"), DispatchOffWorkgroupSizeZ),
		c("DispatchOffReserved0", off(kd, "reserved0"), DispatchOffReserved0),
		c("DispatchOffGridSizeX", off(kd, "grid_size_x"), DispatchOffGridSizeX),
		c("DispatchOffGridSizeY", off(kd, "grid_size_y"), DispatchOffGridSizeY),
		c("DispatchOffGridSizeZ", off(kd, "grid_size_z"), DispatchOffGridSizeZ),
		c("DispatchOffPrivateSegment", off(kd, "private_segment_size"), DispatchOffPrivateSegment),
		c("DispatchOffGroupSegment", off(kd, "group_segment_size"), DispatchOffGroupSegment),
		c("DispatchOffKernelObject", off(kd, "kernel_object"), DispatchOffKernelObject),
		c("DispatchOffKernargAddress", off(kd, "kernarg_address"), DispatchOffKernargAddress),
		c("DispatchOffReserved2", off(kd, "reserved2"), DispatchOffReserved2),
		c("DispatchOffCompletionSignal", off(kd, "completion_signal"), DispatchOffCompletionSignal),

		// hsa_barrier_and_packet_t and hsa_barrier_or_packet_t share one
		// Go encoding (BarrierAndPacket).
		lit("sizeof("+ba+")", PacketSize, "PacketSize"),
		lit(off(ba, "header"), 0, "PublishHeader stores the first word at offset 0"),
		lit(off(ba, "reserved0"), 2, "upper half of BarrierAndPacket.FirstWord"),
		lit(off(ba, "reserved1"), 4, "literal in BarrierAndPacket.EncodeBody"),
		c("BarrierOffDepSignal", off(ba, "dep_signal"), BarrierOffDepSignal),
		c("BarrierAndMaxDependencies", "lengthof("+ba+".dep_signal)", BarrierAndMaxDependencies),
		lit(off(ba, "reserved2"), 48, "literal in BarrierAndPacket.EncodeBody"),
		c("BarrierOffCompletionSignal", off(ba, "completion_signal"), BarrierOffCompletionSignal),
		lit("sizeof("+bo+")", PacketSize, "PacketSize"),
		lit(off(bo, "header"), 0, "PublishHeader stores the first word at offset 0"),
		lit(off(bo, "reserved0"), 2, "upper half of BarrierAndPacket.FirstWord"),
		lit(off(bo, "reserved1"), 4, "literal in BarrierAndPacket.EncodeBody"),
		lit(off(bo, "dep_signal"), BarrierOffDepSignal, "BarrierOffDepSignal"),
		lit("lengthof("+bo+".dep_signal)", BarrierAndMaxDependencies, "BarrierAndMaxDependencies"),
		lit(off(bo, "reserved2"), 48, "literal in BarrierAndPacket.EncodeBody"),
		lit(off(bo, "completion_signal"), BarrierOffCompletionSignal, "BarrierOffCompletionSignal"),

		// hsa_queue_t, read by QueueCreate
		c("queueSizeof", "sizeof(hsa_queue_t)", queueSizeof),
		c("queueOffType", off("hsa_queue_t", "type"), queueOffType),
		c("queueOffFeatures", off("hsa_queue_t", "features"), queueOffFeatures),
		c("queueOffBaseAddress", off("hsa_queue_t", "base_address"), queueOffBaseAddress),
		c("queueOffDoorbell", off("hsa_queue_t", "doorbell_signal"), queueOffDoorbell),
		c("queueOffSize", off("hsa_queue_t", "size"), queueOffSize),
		c("queueOffReserved1", off("hsa_queue_t", "reserved1"), queueOffReserved1),
		c("queueOffID", off("hsa_queue_t", "id"), queueOffID),
		// amd_queue_t, read by QueueDestroy
		c("queueInactiveSignalOffset", off("amd_queue_t", "queue_inactive_signal"), queueInactiveSignalOffset),

		// Types passed in one register or read as 32 bits.
		lit("sizeof(hsa_agent_t)", uint64(unsafe.Sizeof(Agent(0))), "Agent"),
		lit("sizeof(hsa_amd_profiling_dispatch_time_t)", uint64(unsafe.Sizeof(DispatchTime{})), "DispatchTime"),
		lit("offsetof(hsa_amd_profiling_dispatch_time_t.start)", uint64(unsafe.Offsetof(DispatchTime{}.Start)), "DispatchTime.Start"),
		lit("offsetof(hsa_amd_profiling_dispatch_time_t.end)", uint64(unsafe.Offsetof(DispatchTime{}.End)), "DispatchTime.End"),
		lit("sizeof(hsa_signal_t)", uint64(unsafe.Sizeof(Signal(0))), "Signal"),
		lit("sizeof(hsa_amd_memory_pool_t)", uint64(unsafe.Sizeof(MemoryPool(0))), "MemoryPool"),
		lit("sizeof(hsa_isa_t)", uint64(unsafe.Sizeof(ISA(0))), "ISA"),
		lit("sizeof(hsa_executable_t)", uint64(unsafe.Sizeof(Executable(0))), "Executable"),
		lit("sizeof(hsa_executable_symbol_t)", uint64(unsafe.Sizeof(ExecutableSymbol(0))), "ExecutableSymbol"),
		lit("sizeof(hsa_code_object_reader_t)", uint64(unsafe.Sizeof(CodeObjectReader(0))), "CodeObjectReader"),
		lit("sizeof(hsa_signal_value_t)", uint64(unsafe.Sizeof(int64(0))), "signal values are int64"),
		lit("sizeof(hsa_status_t)", uint64(unsafe.Sizeof(Status(0))), "Status"),
		lit("sizeof(hsa_queue_type32_t)", uint64(unsafe.Sizeof(QueueType(0))), "QueueType"),
		lit("sizeof(hsa_agent_info_t)", uint64(unsafe.Sizeof(AgentInfo(0))), "AgentInfo"),
		lit("sizeof(hsa_signal_condition_t)", uint64(unsafe.Sizeof(SignalCondition(0))), "SignalCondition"),
		lit("sizeof(hsa_wait_state_t)", uint64(unsafe.Sizeof(WaitState(0))), "WaitState"),

		// hsa_status_t
		c("StatusSuccess", "HSA_STATUS_SUCCESS", uint64(StatusSuccess)),
		c("StatusInfoBreak", "HSA_STATUS_INFO_BREAK", uint64(StatusInfoBreak)),
		c("StatusError", "HSA_STATUS_ERROR", uint64(StatusError)),
		c("StatusErrorInvalidArgument", "HSA_STATUS_ERROR_INVALID_ARGUMENT", uint64(StatusErrorInvalidArgument)),
		c("StatusErrorInvalidQueueCreate", "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION", uint64(StatusErrorInvalidQueueCreate)),
		c("StatusErrorInvalidAllocation", "HSA_STATUS_ERROR_INVALID_ALLOCATION", uint64(StatusErrorInvalidAllocation)),
		c("StatusErrorInvalidAgent", "HSA_STATUS_ERROR_INVALID_AGENT", uint64(StatusErrorInvalidAgent)),
		c("StatusErrorInvalidRegion", "HSA_STATUS_ERROR_INVALID_REGION", uint64(StatusErrorInvalidRegion)),
		c("StatusErrorInvalidSignal", "HSA_STATUS_ERROR_INVALID_SIGNAL", uint64(StatusErrorInvalidSignal)),
		c("StatusErrorInvalidQueue", "HSA_STATUS_ERROR_INVALID_QUEUE", uint64(StatusErrorInvalidQueue)),
		c("StatusErrorOutOfResources", "HSA_STATUS_ERROR_OUT_OF_RESOURCES", uint64(StatusErrorOutOfResources)),
		c("StatusErrorInvalidPacket", "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT", uint64(StatusErrorInvalidPacket)),
		c("StatusErrorResourceFree", "HSA_STATUS_ERROR_RESOURCE_FREE", uint64(StatusErrorResourceFree)),
		c("StatusErrorNotInitialized", "HSA_STATUS_ERROR_NOT_INITIALIZED", uint64(StatusErrorNotInitialized)),
		c("StatusErrorInvalidISA", "HSA_STATUS_ERROR_INVALID_ISA", uint64(StatusErrorInvalidISA)),
		c("StatusErrorInvalidCodeObject", "HSA_STATUS_ERROR_INVALID_CODE_OBJECT", uint64(StatusErrorInvalidCodeObject)),
		c("StatusErrorInvalidExecutable", "HSA_STATUS_ERROR_INVALID_EXECUTABLE", uint64(StatusErrorInvalidExecutable)),
		c("StatusErrorFrozenExecutable", "HSA_STATUS_ERROR_FROZEN_EXECUTABLE", uint64(StatusErrorFrozenExecutable)),
		c("StatusErrorInvalidSymbolName", "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME", uint64(StatusErrorInvalidSymbolName)),
		c("StatusErrorException", "HSA_STATUS_ERROR_EXCEPTION", uint64(StatusErrorException)),
		c("StatusErrorInvalidCodeObjRdr", "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER", uint64(StatusErrorInvalidCodeObjRdr)),
		c("StatusErrorFatal", "HSA_STATUS_ERROR_FATAL", uint64(StatusErrorFatal)),
		c("StatusErrorMemoryFault", "HSA_STATUS_ERROR_MEMORY_FAULT", uint64(StatusErrorMemoryFault)),
		c("StatusErrorMemoryApertureViolation", "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION", uint64(StatusErrorMemoryApertureViolation)),

		// System events: hsa_amd_event_t and hsa_amd_gpu_memory_fault_info_t,
		// decoded by decodeSystemEvent.
		c("eventSizeof", "sizeof(hsa_amd_event_t)", eventSizeof),
		c("eventOffType", off("hsa_amd_event_t", "event_type"), eventOffType),
		c("eventOffMemoryFault", off("hsa_amd_event_t", "memory_fault"), eventOffMemoryFault),
		c("memoryFaultSizeof", "sizeof(hsa_amd_gpu_memory_fault_info_t)", memoryFaultSizeof),
		c("memoryFaultOffAgent", off("hsa_amd_gpu_memory_fault_info_t", "agent"), memoryFaultOffAgent),
		c("memoryFaultOffVirtualAddress", off("hsa_amd_gpu_memory_fault_info_t", "virtual_address"), memoryFaultOffVirtualAddress),
		c("memoryFaultOffReasonMask", off("hsa_amd_gpu_memory_fault_info_t", "fault_reason_mask"), memoryFaultOffReasonMask),
		lit("sizeof(hsa_amd_event_type_t)", uint64(unsafe.Sizeof(EventType(0))), "EventType"),
		c("EventGPUMemoryFault", "HSA_AMD_GPU_MEMORY_FAULT_EVENT", uint64(EventGPUMemoryFault)),
		c("MemoryFaultPageNotPresent", "HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT", uint64(MemoryFaultPageNotPresent)),
		c("MemoryFaultReadOnly", "HSA_AMD_MEMORY_FAULT_READ_ONLY", uint64(MemoryFaultReadOnly)),
		c("MemoryFaultNX", "HSA_AMD_MEMORY_FAULT_NX", uint64(MemoryFaultNX)),
		c("MemoryFaultHostOnly", "HSA_AMD_MEMORY_FAULT_HOST_ONLY", uint64(MemoryFaultHostOnly)),
		c("MemoryFaultDRAMECC", "HSA_AMD_MEMORY_FAULT_DRAMECC", uint64(MemoryFaultDRAMECC)),
		c("MemoryFaultImprecise", "HSA_AMD_MEMORY_FAULT_IMPRECISE", uint64(MemoryFaultImprecise)),
		c("MemoryFaultSRAMECC", "HSA_AMD_MEMORY_FAULT_SRAMECC", uint64(MemoryFaultSRAMECC)),
		c("MemoryFaultHang", "(uint32_t)HSA_AMD_MEMORY_FAULT_HANG", uint64(MemoryFaultHang)),

		// hsa_device_type_t, hsa_agent_info_t
		c("DeviceTypeCPU", "HSA_DEVICE_TYPE_CPU", uint64(DeviceTypeCPU)),
		c("DeviceTypeGPU", "HSA_DEVICE_TYPE_GPU", uint64(DeviceTypeGPU)),
		c("DeviceTypeDSP", "HSA_DEVICE_TYPE_DSP", uint64(DeviceTypeDSP)),
		c("AgentInfoName", "HSA_AGENT_INFO_NAME", uint64(AgentInfoName)),
		c("AgentInfoVendorName", "HSA_AGENT_INFO_VENDOR_NAME", uint64(AgentInfoVendorName)),
		c("AgentInfoFeature", "HSA_AGENT_INFO_FEATURE", uint64(AgentInfoFeature)),
		c("AgentInfoWavefrontSize", "HSA_AGENT_INFO_WAVEFRONT_SIZE", uint64(AgentInfoWavefrontSize)),
		c("AgentInfoQueuesMax", "HSA_AGENT_INFO_QUEUES_MAX", uint64(AgentInfoQueuesMax)),
		c("AgentInfoQueueMinSize", "HSA_AGENT_INFO_QUEUE_MIN_SIZE", uint64(AgentInfoQueueMinSize)),
		c("AgentInfoQueueMaxSize", "HSA_AGENT_INFO_QUEUE_MAX_SIZE", uint64(AgentInfoQueueMaxSize)),
		c("AgentInfoNode", "HSA_AGENT_INFO_NODE", uint64(AgentInfoNode)),
		c("AgentInfoDevice", "HSA_AGENT_INFO_DEVICE", uint64(AgentInfoDevice)),
		c("AgentInfoProductName", "HSA_AMD_AGENT_INFO_PRODUCT_NAME", uint64(AgentInfoProductName)),
		c("AgentInfoComputeUnits", "HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT", uint64(AgentInfoComputeUnits)),
		c("AgentInfoBDFID", "HSA_AMD_AGENT_INFO_BDFID", uint64(AgentInfoBDFID)),
		c("AgentInfoDomain", "HSA_AMD_AGENT_INFO_DOMAIN", uint64(AgentInfoDomain)),

		// hsa_isa_info_t, hsa_system_info_t
		c("ISAInfoNameLength", "HSA_ISA_INFO_NAME_LENGTH", uint64(ISAInfoNameLength)),
		c("ISAInfoName", "HSA_ISA_INFO_NAME", uint64(ISAInfoName)),
		c("SystemInfoVersionMajor", "HSA_SYSTEM_INFO_VERSION_MAJOR", uint64(SystemInfoVersionMajor)),
		c("SystemInfoVersionMinor", "HSA_SYSTEM_INFO_VERSION_MINOR", uint64(SystemInfoVersionMinor)),
		c("SystemInfoTimestamp", "HSA_SYSTEM_INFO_TIMESTAMP", uint64(SystemInfoTimestamp)),
		c("SystemInfoTimestampFrequency", "HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY", uint64(SystemInfoTimestampFrequency)),
		c("SystemInfoBuildVersion", "HSA_AMD_SYSTEM_INFO_BUILD_VERSION", uint64(SystemInfoBuildVersion)),

		// Queues and signals
		c("QueueTypeMulti", "HSA_QUEUE_TYPE_MULTI", uint64(QueueTypeMulti)),
		c("QueueTypeSingle", "HSA_QUEUE_TYPE_SINGLE", uint64(QueueTypeSingle)),
		c("ConditionEq", "HSA_SIGNAL_CONDITION_EQ", uint64(ConditionEq)),
		c("ConditionNe", "HSA_SIGNAL_CONDITION_NE", uint64(ConditionNe)),
		c("ConditionLt", "HSA_SIGNAL_CONDITION_LT", uint64(ConditionLt)),
		c("ConditionGte", "HSA_SIGNAL_CONDITION_GTE", uint64(ConditionGte)),
		c("WaitStateBlocked", "HSA_WAIT_STATE_BLOCKED", uint64(WaitStateBlocked)),
		c("WaitStateActive", "HSA_WAIT_STATE_ACTIVE", uint64(WaitStateActive)),
		c("SignalAttrAMDGPUOnly", "HSA_AMD_SIGNAL_AMD_GPU_ONLY", SignalAttrAMDGPUOnly),
		c("SignalAttrIPC", "HSA_AMD_SIGNAL_IPC", SignalAttrIPC),
		c("TimeoutInfinite", "UINT64_MAX", TimeoutInfinite),
		c("segmentSizeUnspecified", "UINT32_MAX", uint64(segmentSizeUnspecified)),

		// Memory pools
		c("PoolInfoSegment", "HSA_AMD_MEMORY_POOL_INFO_SEGMENT", uint64(PoolInfoSegment)),
		c("PoolInfoGlobalFlags", "HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS", uint64(PoolInfoGlobalFlags)),
		c("PoolInfoSize", "HSA_AMD_MEMORY_POOL_INFO_SIZE", uint64(PoolInfoSize)),
		c("PoolInfoRuntimeAllocAllowed", "HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED", uint64(PoolInfoRuntimeAllocAllowed)),
		c("PoolInfoRuntimeAllocGranule", "HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE", uint64(PoolInfoRuntimeAllocGranule)),
		c("PoolInfoRuntimeAllocAlign", "HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT", uint64(PoolInfoRuntimeAllocAlign)),
		c("PoolInfoAccessibleByAll", "HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL", uint64(PoolInfoAccessibleByAll)),
		c("PoolInfoAllocMaxSize", "HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE", uint64(PoolInfoAllocMaxSize)),
		c("SegmentGlobal", "HSA_AMD_SEGMENT_GLOBAL", uint64(SegmentGlobal)),
		c("SegmentReadOnly", "HSA_AMD_SEGMENT_READONLY", uint64(SegmentReadOnly)),
		c("SegmentPrivate", "HSA_AMD_SEGMENT_PRIVATE", uint64(SegmentPrivate)),
		c("SegmentGroup", "HSA_AMD_SEGMENT_GROUP", uint64(SegmentGroup)),
		c("GlobalFlagKernargInit", "HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT", uint64(GlobalFlagKernargInit)),
		c("GlobalFlagFineGrained", "HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED", uint64(GlobalFlagFineGrained)),
		c("GlobalFlagCoarseGrained", "HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED", uint64(GlobalFlagCoarseGrained)),
		c("AgentMemoryPoolInfoAccess", "HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS", uint64(AgentMemoryPoolInfoAccess)),
		c("PoolAccessNeverAllowed", "HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED", uint64(PoolAccessNeverAllowed)),
		c("PoolAccessAllowedByDefault", "HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT", uint64(PoolAccessAllowedByDefault)),
		c("PoolAccessDisallowedByDefault", "HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT", uint64(PoolAccessDisallowedByDefault)),

		// Executables and symbols
		c("ProfileBase", "HSA_PROFILE_BASE", uint64(ProfileBase)),
		c("ProfileFull", "HSA_PROFILE_FULL", uint64(ProfileFull)),
		c("FloatRoundingDefault", "HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT", uint64(FloatRoundingDefault)),
		c("SymbolInfoKernargSegmentSize", "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE", uint64(SymbolInfoKernargSegmentSize)),
		c("SymbolInfoKernargSegmentAlign", "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT", uint64(SymbolInfoKernargSegmentAlign)),
		c("SymbolInfoGroupSegmentSize", "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE", uint64(SymbolInfoGroupSegmentSize)),
		c("SymbolInfoPrivateSegmentSize", "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE", uint64(SymbolInfoPrivateSegmentSize)),
		c("SymbolInfoKernelObject", "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT", uint64(SymbolInfoKernelObject)),

		// AQL packet types, header bits, fence scopes
		c("PacketTypeVendor", "HSA_PACKET_TYPE_VENDOR_SPECIFIC", uint64(PacketTypeVendor)),
		c("PacketTypeInvalid", "HSA_PACKET_TYPE_INVALID", uint64(PacketTypeInvalid)),
		c("PacketTypeKernelDispatch", "HSA_PACKET_TYPE_KERNEL_DISPATCH", uint64(PacketTypeKernelDispatch)),
		c("PacketTypeBarrierAnd", "HSA_PACKET_TYPE_BARRIER_AND", uint64(PacketTypeBarrierAnd)),
		c("PacketTypeAgentDispatch", "HSA_PACKET_TYPE_AGENT_DISPATCH", uint64(PacketTypeAgentDispatch)),
		c("PacketTypeBarrierOr", "HSA_PACKET_TYPE_BARRIER_OR", uint64(PacketTypeBarrierOr)),
		lit("HSA_PACKET_HEADER_TYPE", 0, "Header and HeaderType put the type in the low bits"),
		lit("HSA_PACKET_HEADER_WIDTH_TYPE", uint64(bitLen(uint64(HeaderType(0xffff)))), "HeaderType's mask"),
		c("HeaderBarrierBit", "HSA_PACKET_HEADER_BARRIER", HeaderBarrierBit),
		c("HeaderAcquireFenceShift", "HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE", HeaderAcquireFenceShift),
		lit("HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE", HeaderReleaseFenceShift-HeaderAcquireFenceShift,
			"room between the acquire and release shifts"),
		c("HeaderReleaseFenceShift", "HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE", HeaderReleaseFenceShift),
		lit("HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE", uint64(bitLen(FenceScopeSystem)), "fits the largest scope"),
		c("FenceScopeNone", "HSA_FENCE_SCOPE_NONE", FenceScopeNone),
		c("FenceScopeAgent", "HSA_FENCE_SCOPE_AGENT", FenceScopeAgent),
		c("FenceScopeSystem", "HSA_FENCE_SCOPE_SYSTEM", FenceScopeSystem),
		lit("HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS", 0, "DispatchPacket.Setup bits 0-1"),
		lit("HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS", 2, "DispatchPacket.Setup bits 0-1"),

		// Headers built with the C enums vs Header().
		lit("header(KERNEL_DISPATCH,0,SYSTEM,SYSTEM)", hdr(PacketTypeKernelDispatch, false, FenceScopeSystem, FenceScopeSystem), "Header"),
		lit("header(KERNEL_DISPATCH,1,SYSTEM,SYSTEM)", hdr(PacketTypeKernelDispatch, true, FenceScopeSystem, FenceScopeSystem), "Header"),
		lit("header(KERNEL_DISPATCH,1,AGENT,AGENT)", hdr(PacketTypeKernelDispatch, true, FenceScopeAgent, FenceScopeAgent), "Header"),
		lit("header(KERNEL_DISPATCH,1,NONE,SYSTEM)", hdr(PacketTypeKernelDispatch, true, FenceScopeNone, FenceScopeSystem), "Header"),
		lit("header(BARRIER_AND,1,SYSTEM,SYSTEM)", hdr(PacketTypeBarrierAnd, true, FenceScopeSystem, FenceScopeSystem), "Header"),
		lit("header(BARRIER_OR,1,SYSTEM,SYSTEM)", hdr(PacketTypeBarrierOr, true, FenceScopeSystem, FenceScopeSystem), "Header"),
		c("InvalidFirstWord", "first_word(INVALID)", uint64(InvalidFirstWord)),
		lit("first_word(KERNEL_DISPATCH,1,SYSTEM,SYSTEM,dims=1)", dispatchWord(1), "DispatchPacket.FirstWord"),
	}
}

func bitLen(v uint64) int {
	n := 0
	for ; v != 0; v >>= 1 {
		n++
	}
	return n
}

// The packets abi.c dumps, filled with the same values from Go.
func abiDispatch() DispatchPacket {
	return DispatchPacket{
		Header:             Header(PacketTypeKernelDispatch, true, FenceScopeSystem, FenceScopeAgent),
		Setup:              3,
		WorkgroupSize:      [3]uint16{0x0102, 0x0304, 0x0506},
		GridSize:           [3]uint32{0x11121314, 0x15161718, 0x191a1b1c},
		PrivateSegmentSize: 0x21222324,
		GroupSegmentSize:   0x31323334,
		KernelObject:       0x4142434445464748,
		KernargAddress:     0x5152535455565758,
		CompletionSignal:   0x6162636465666768,
	}
}

func abiBarrierAnd() BarrierAndPacket {
	p := BarrierAndPacket{
		Header:           Header(PacketTypeBarrierAnd, true, FenceScopeAgent, FenceScopeSystem),
		CompletionSignal: 0x8182838485868788,
	}
	for i := range p.DepSignals {
		p.DepSignals[i] = Signal(0x7172737475767770 + uint64(i))
	}
	return p
}

func abiBarrierOr() BarrierAndPacket {
	p := BarrierAndPacket{Header: Header(PacketTypeBarrierOr, false, FenceScopeNone, FenceScopeSystem)}
	p.DepSignals[1] = 0x9192939495969798
	p.DepSignals[4] = 0xa1a2a3a4a5a6a7a8
	return p
}

// encodeSlot encodes into a slot full of stale bytes, as a reused ring slot
// is, so that a field the encoder forgets to write shows up.
func encodeSlot(body func(*[PacketSize]byte), first uint32) [PacketSize]byte {
	var slot [PacketSize]byte
	for i := range slot {
		slot[i] = 0xee
	}
	body(&slot)
	PublishHeader(&slot, first)
	return slot
}

// parseABI reads abi.c's "KEY VALUE" lines; '#' lines are comments.
func parseABI(data []byte) (map[string]string, error) {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: %q is not KEY VALUE", n, line)
		}
		if _, dup := m[f[0]]; dup {
			return nil, fmt.Errorf("line %d: %s repeated", n, f[0])
		}
		m[f[0]] = f[1]
	}
	return m, sc.Err()
}

// checkABI compares the C side (from the compiler or the golden file) with
// the Go values.
func checkABI(t *testing.T, c map[string]string) {
	t.Helper()
	table := abiTable()
	checked := map[string]bool{}
	for _, e := range table {
		name := e.goName
		if name == "" {
			name = e.note
		}
		if checked[e.key] {
			t.Errorf("abiTable lists %s twice", e.key)
		}
		checked[e.key] = true
		s, ok := c[e.key]
		if !ok {
			t.Errorf("%s (Go %s): not printed by abi.c", e.key, name)
			continue
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Errorf("%s: %v", e.key, err)
			continue
		}
		if v != e.val {
			t.Errorf("%s = %d (0x%x) in C, but Go %s = %d (0x%x)", e.key, v, v, name, e.val, e.val)
		}
	}

	dumps := []struct {
		ctype  string
		goSlot [PacketSize]byte
		decode func(t *testing.T, b []byte)
	}{
		{"hsa_kernel_dispatch_packet_t", func() [PacketSize]byte {
			p := abiDispatch()
			return encodeSlot(p.EncodeBody, p.FirstWord())
		}(), func(t *testing.T, b []byte) {
			if got, want := DecodeDispatch(b), abiDispatch(); got != want {
				t.Errorf("DecodeDispatch(C bytes) = %+#x, want %+#x", got, want)
			}
		}},
		{"hsa_barrier_and_packet_t", func() [PacketSize]byte {
			p := abiBarrierAnd()
			return encodeSlot(p.EncodeBody, p.FirstWord())
		}(), func(t *testing.T, b []byte) {
			if got, want := DecodeBarrierAnd(b), abiBarrierAnd(); got != want {
				t.Errorf("DecodeBarrierAnd(C bytes) = %+#x, want %+#x", got, want)
			}
		}},
		{"hsa_barrier_or_packet_t", func() [PacketSize]byte {
			p := abiBarrierOr()
			return encodeSlot(p.EncodeBody, p.FirstWord())
		}(), func(t *testing.T, b []byte) {
			if got, want := DecodeBarrierAnd(b), abiBarrierOr(); got != want {
				t.Errorf("DecodeBarrierAnd(C OR bytes) = %+#x, want %+#x", got, want)
			}
		}},
	}
	for _, d := range dumps {
		key := "dump(" + d.ctype + ")"
		checked[key] = true
		cb, err := hex.DecodeString(c[key])
		if err != nil || len(cb) != PacketSize {
			t.Errorf("%s: %d bytes, err %v; want %d hex bytes", key, len(cb), err, PacketSize)
			continue
		}
		if !bytes.Equal(cb, d.goSlot[:]) {
			t.Errorf("%s differs from the Go encoding:\n C  %x\n Go %x\n    %s", d.ctype, cb, d.goSlot, diffMarks(cb, d.goSlot[:]))
		}
		d.decode(t, cb)
	}

	// Anything abi.c prints must be checked here: a line without an entry
	// means the C program grew and this table did not.
	var extra []string
	for k := range c {
		if !checked[k] {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		t.Errorf("abi.c prints %s but abiTable does not check it", k)
	}
}

func diffMarks(a, b []byte) string {
	var s strings.Builder
	for i := range a {
		if a[i] != b[i] {
			s.WriteString("^^")
		} else {
			s.WriteString("  ")
		}
	}
	return s.String()
}

// TestABIConstantsCovered fails when an exported constant is added to the
// package without a line in abiTable (and in abi.c), so no hand-copied
// value escapes the check. Constants with no C counterpart go in noC.
func TestABIConstantsCovered(t *testing.T) {
	// name -> why it has no C counterpart
	noC := map[string]string{}
	for _, k := range []string{"FenceKindDispatch", "FenceKindBarrierAnd", "FenceKindBarrierOr", "FenceKindVendor", "FenceKinds"} {
		noC[k] = "rocsync's own index of packet kinds in FenceCounts (kfdsim's cp.c counts in the same order), not an HSA header value"
	}
	inTable := map[string]bool{}
	for _, e := range abiTable() {
		if e.goName != "" {
			inTable[e.goName] = true
		}
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					declared[id.Name] = true
					if id.IsExported() && !inTable[id.Name] && noC[id.Name] == "" {
						t.Errorf("%s (%s) is not checked against the C headers: add it to abiTable and testdata/abi.c",
							id.Name, fset.Position(id.Pos()))
					}
				}
			}
		}
	}
	for name := range inTable {
		if !declared[name] {
			t.Errorf("abiTable names %s, which is not a constant of the package", name)
		}
	}
}

// TestABIHeaderValues pins the header values quoted in the reference notes
// (rocm-api.md §2), independently of any C output.
func TestABIHeaderValues(t *testing.T) {
	for _, c := range []struct {
		t        PacketType
		barrier  bool
		acq, rel uint16
		want     uint16
	}{
		{PacketTypeKernelDispatch, false, FenceScopeSystem, FenceScopeSystem, 0x1402},
		{PacketTypeKernelDispatch, true, FenceScopeSystem, FenceScopeSystem, 0x1502},
		{PacketTypeKernelDispatch, true, FenceScopeAgent, FenceScopeAgent, 0x0B02},
		{PacketTypeBarrierAnd, true, FenceScopeSystem, FenceScopeSystem, 0x1503},
		{PacketTypeBarrierOr, true, FenceScopeSystem, FenceScopeSystem, 0x1505},
	} {
		if got := Header(c.t, c.barrier, c.acq, c.rel); got != c.want {
			t.Errorf("Header(%d, %v, %d, %d) = 0x%04x, want 0x%04x", c.t, c.barrier, c.acq, c.rel, got, c.want)
		}
	}
	p := DispatchPacket{Header: 0x1502, Setup: 1}
	if got := p.FirstWord(); got != 0x00011502 {
		t.Errorf("FirstWord of a 1-D dispatch with barrier = 0x%08x, want 0x00011502", got)
	}
}

func TestABIAgainstGolden(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "abi_golden.txt"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := parseABI(data)
	if err != nil {
		t.Fatalf("abi_golden.txt: %v", err)
	}
	checkABI(t, golden)
}

// TestABIAgainstHeaders compiles testdata/abi.c against the installed ROCm
// headers and checks the Go side against its output, then checks that the
// golden file is that same output.
func TestABIAgainstHeaders(t *testing.T) {
	out := runABIProgram(t)
	live, err := parseABI(out)
	if err != nil {
		t.Fatalf("abi.c output: %v", err)
	}
	checkABI(t, live)

	data, err := os.ReadFile(filepath.Join("testdata", "abi_golden.txt"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := parseABI(data)
	if err != nil {
		t.Fatalf("abi_golden.txt: %v", err)
	}
	var diffs []string
	for k, v := range live {
		if golden[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: headers %s, golden %q", k, v, golden[k]))
		}
	}
	for k := range golden {
		if _, ok := live[k]; !ok {
			diffs = append(diffs, k+": in golden only")
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Errorf("testdata/abi_golden.txt is stale; run hsa/testdata/gen_golden.sh:\n%s", strings.Join(diffs, "\n"))
	}
}

// runABIProgram builds and runs abi.c, skipping if there is no C compiler or
// no ROCm headers.
func runABIProgram(t *testing.T) []byte {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	ccPath, err := exec.LookPath(cc)
	if err != nil {
		t.Skipf("no C compiler (%s): checked against testdata/abi_golden.txt only", cc)
	}
	var inc string
	var tried []string
	for _, d := range []string{os.Getenv("ROCM_PATH"), "/opt/rocm", "/usr"} {
		if d == "" {
			continue
		}
		h := filepath.Join(d, "include", "hsa", "hsa.h")
		tried = append(tried, h)
		if _, err := os.Stat(h); err == nil {
			inc = filepath.Join(d, "include")
			break
		}
	}
	if inc == "" {
		t.Skipf("no ROCm headers (tried %s): checked against testdata/abi_golden.txt only", strings.Join(tried, ", "))
	}
	bin := filepath.Join(t.TempDir(), "abi")
	build := exec.Command(ccPath, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", inc, "-o", bin, filepath.Join("testdata", "abi.c"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("running abi: %v", err)
	}
	t.Logf("compiled testdata/abi.c with %s against %s/hsa", ccPath, inc)
	return out
}

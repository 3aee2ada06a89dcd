package hsa

// Values the purego binding needs beyond those in hsa.go and aql.go. They
// live in their own file so the shared files stay owned by one author; the
// layout test checks each against the C headers like the rest.

// StatusErrorMemoryApertureViolation is
// HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION (hsa_ext_amd.h): what ROCr's
// queue error callback reports for a GPU VM fault (KFD's
// EC_DEVICE_MEMORY_VIOLATION).
const StatusErrorMemoryApertureViolation Status = 41

// AMD agent attributes locating a GPU on PCIe, to match HSA agents with
// HIP devices.
const (
	// AgentInfoBDFID is HSA_AMD_AGENT_INFO_BDFID (uint32): bus << 8 |
	// device << 3 | function.
	AgentInfoBDFID AgentInfo = 0xA006
	// AgentInfoDomain is HSA_AMD_AGENT_INFO_DOMAIN (uint32): the PCI
	// domain (segment).
	AgentInfoDomain AgentInfo = 0xA00F
)

// SystemInfo is hsa_system_info_t.
type SystemInfo uint32

const (
	SystemInfoVersionMajor       SystemInfo = 0 // uint16
	SystemInfoVersionMinor       SystemInfo = 1 // uint16
	SystemInfoTimestamp          SystemInfo = 2 // uint64
	SystemInfoTimestampFrequency SystemInfo = 3 // uint64, Hz
)

// ISAInfoNameLength is HSA_ISA_INFO_NAME_LENGTH: the length of the ISA name
// without the NUL terminator (uint32).
const ISAInfoNameLength uint32 = 0

// PoolInfoAllocMaxSize is HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE (size_t).
const PoolInfoAllocMaxSize PoolInfo = 16

// AgentMemoryPoolInfoAccess is HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS, the
// hsa_amd_agent_memory_pool_get_info attribute saying whether an agent may
// touch a pool; its value is one of the PoolAccess* constants.
const AgentMemoryPoolInfoAccess uint32 = 0

// hsa_amd_memory_pool_access_t.
const (
	PoolAccessNeverAllowed        uint32 = 0
	PoolAccessAllowedByDefault    uint32 = 1
	PoolAccessDisallowedByDefault uint32 = 2
)

// hsa_queue_t field offsets read by QueueCreate (hsa_queue_t is C memory
// the runtime owns; we copy the fields the submitter needs into Queue).
const (
	queueOffType           = 0
	queueOffFeatures       = 4
	queueOffBaseAddress    = 8
	queueOffDoorbell       = 16
	queueOffSize           = 24
	queueOffReserved1      = 28
	queueOffID             = 32
	queueSizeof            = 40
	segmentSizeUnspecified = ^uint32(0) // UINT32_MAX: "no hint" for hsa_queue_create
)

//go:build linux && (amd64 || arm64)

package hsa

// The purego binding of libhsa-runtime64.
//
// Why this shape:
//   - Every symbol is resolved once, in Open, into a fixed array; a missing
//     one fails Open with the full list instead of failing later mid-run.
//   - Calls go through purego.SyscallN on those addresses rather than
//     RegisterLibFunc: RegisterLibFunc marshals through reflection and costs
//     about 3x as much per call (see BenchmarkCallOverhead), which matters
//     on the doorbell and queue-index paths.
//   - HSA handles are struct{uint64_t} and enums are 32-bit, which the SysV
//     ABI passes in a single integer register, so every argument fits a
//     uintptr. This is why the binding is limited to 64-bit targets.
//   - C writes to Go memory only through out-parameters whose address is
//     converted inline in the SyscallN argument list; SyscallN carries the
//     uintptrescapes directive, which keeps those objects alive and in
//     place for the duration of the call.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
)

var _ Runtime = (*Lib)(nil)

// Indexes into Lib.fn, one per C function.
const (
	symInit = iota
	symShutDown
	symStatusString
	symSystemGetInfo
	symIterateAgents
	symAgentGetInfo
	symAgentIterateISAs
	symISAGetInfoAlt
	symAMDAgentIterateMemoryPools
	symAMDMemoryPoolGetInfo
	symAMDAgentMemoryPoolGetInfo
	symAMDMemoryPoolAllocate
	symAMDMemoryPoolFree
	symAMDAgentsAllowAccess
	symAMDMemoryAsyncCopy
	symQueueCreate
	symQueueDestroy
	symQueueLoadReadIndexScacquire
	symQueueLoadWriteIndexRelaxed
	symQueueLoadWriteIndexScacquire
	symQueueAddWriteIndexScacqScrel
	symQueueCASWriteIndexScacqScrel
	symQueueStoreWriteIndexScrelease
	symSignalCreate
	symAMDSignalCreate
	symSignalDestroy
	symSignalStoreScrelease
	symSignalStoreRelaxed
	symSignalSilentStoreRelaxed
	symSignalLoadScacquire
	symSignalLoadRelaxed
	symSignalWaitScacquire
	symAMDSignalValuePointer
	symCodeObjectReaderCreateFromMemory
	symCodeObjectReaderDestroy
	symExecutableCreateAlt
	symExecutableLoadAgentCodeObject
	symExecutableFreeze
	symExecutableDestroy
	symExecutableGetSymbolByName
	symExecutableSymbolGetInfo
	symAMDRegisterSystemEventHandler
	symAMDProfilingSetProfilerEnabled
	symAMDProfilingGetDispatchTime
	numSyms
)

// BoundSymbols is every C function the binding calls, in Lib.fn order. Open
// fails unless the library exports all of them.
var BoundSymbols = []string{
	symInit:                             "hsa_init",
	symShutDown:                         "hsa_shut_down",
	symStatusString:                     "hsa_status_string",
	symSystemGetInfo:                    "hsa_system_get_info",
	symIterateAgents:                    "hsa_iterate_agents",
	symAgentGetInfo:                     "hsa_agent_get_info",
	symAgentIterateISAs:                 "hsa_agent_iterate_isas",
	symISAGetInfoAlt:                    "hsa_isa_get_info_alt",
	symAMDAgentIterateMemoryPools:       "hsa_amd_agent_iterate_memory_pools",
	symAMDMemoryPoolGetInfo:             "hsa_amd_memory_pool_get_info",
	symAMDAgentMemoryPoolGetInfo:        "hsa_amd_agent_memory_pool_get_info",
	symAMDMemoryPoolAllocate:            "hsa_amd_memory_pool_allocate",
	symAMDMemoryPoolFree:                "hsa_amd_memory_pool_free",
	symAMDAgentsAllowAccess:             "hsa_amd_agents_allow_access",
	symAMDMemoryAsyncCopy:               "hsa_amd_memory_async_copy",
	symQueueCreate:                      "hsa_queue_create",
	symQueueDestroy:                     "hsa_queue_destroy",
	symQueueLoadReadIndexScacquire:      "hsa_queue_load_read_index_scacquire",
	symQueueLoadWriteIndexRelaxed:       "hsa_queue_load_write_index_relaxed",
	symQueueLoadWriteIndexScacquire:     "hsa_queue_load_write_index_scacquire",
	symQueueAddWriteIndexScacqScrel:     "hsa_queue_add_write_index_scacq_screl",
	symQueueCASWriteIndexScacqScrel:     "hsa_queue_cas_write_index_scacq_screl",
	symQueueStoreWriteIndexScrelease:    "hsa_queue_store_write_index_screlease",
	symSignalCreate:                     "hsa_signal_create",
	symAMDSignalCreate:                  "hsa_amd_signal_create",
	symSignalDestroy:                    "hsa_signal_destroy",
	symSignalStoreScrelease:             "hsa_signal_store_screlease",
	symSignalStoreRelaxed:               "hsa_signal_store_relaxed",
	symSignalSilentStoreRelaxed:         "hsa_signal_silent_store_relaxed",
	symSignalLoadScacquire:              "hsa_signal_load_scacquire",
	symSignalLoadRelaxed:                "hsa_signal_load_relaxed",
	symSignalWaitScacquire:              "hsa_signal_wait_scacquire",
	symAMDSignalValuePointer:            "hsa_amd_signal_value_pointer",
	symCodeObjectReaderCreateFromMemory: "hsa_code_object_reader_create_from_memory",
	symCodeObjectReaderDestroy:          "hsa_code_object_reader_destroy",
	symExecutableCreateAlt:              "hsa_executable_create_alt",
	symExecutableLoadAgentCodeObject:    "hsa_executable_load_agent_code_object",
	symExecutableFreeze:                 "hsa_executable_freeze",
	symExecutableDestroy:                "hsa_executable_destroy",
	symExecutableGetSymbolByName:        "hsa_executable_get_symbol_by_name",
	symExecutableSymbolGetInfo:          "hsa_executable_symbol_get_info",
	symAMDRegisterSystemEventHandler:    "hsa_amd_register_system_event_handler",
	symAMDProfilingSetProfilerEnabled:   "hsa_amd_profiling_set_profiler_enabled",
	symAMDProfilingGetDispatchTime:      "hsa_amd_profiling_get_dispatch_time",
}

// Library names for dl.Open. The soname has been .so.1 from ROCm 5 to 7.
const (
	libName   = "libhsa-runtime64"
	libSoname = "libhsa-runtime64.so.1"
)

// Lib is the real HSA runtime, loaded with purego. It is safe for
// concurrent use; like the C library it is process-wide state, so opening
// it twice gives two handles on the same runtime.
type Lib struct {
	path string
	fn   [numSyms]uintptr
	// rocr: the library is AMD's ROCr (it exports
	// hsa_amd_queue_set_priority), whose hsa_queue_t is the first member
	// of an amd_queue_t (see waitErrorHandler).
	rocr bool

	statusTexts sync.Map // Status -> string; the runtime's strings are static
}

// Open loads libhsa-runtime64 ($ROCM_PATH/lib, /opt/rocm/lib, then the
// system paths) and resolves every symbol in BoundSymbols. It does not call
// hsa_init: that is Init, so a caller can tell "not installed" (a
// *dl.NotFoundError, errors.Is dl.ErrNotFound) from "no GPU" (ErrNoGPU).
func Open() (*Lib, error) {
	if len(BoundSymbols) != numSyms {
		panic("hsa: BoundSymbols out of sync with the sym* indexes")
	}
	lib, err := dl.Open(libName, []string{libSoname}, dl.SearchDirs())
	if err != nil {
		return nil, err
	}
	addrs, err := lib.Symbols(BoundSymbols)
	if err != nil {
		return nil, err
	}
	l := &Lib{path: lib.Path}
	if a, err := dl.Dlsym(lib.Handle, "hsa_amd_queue_set_priority"); err == nil && a != 0 {
		l.rocr = true
	}
	copy(l.fn[:], addrs)
	return l, nil
}

// Path is the file or soname the library was opened from.
func (l *Lib) Path() string { return l.path }

// status extracts hsa_status_t from a return register. The callee defines
// only the low 32 bits of a 32-bit return value.
func status(r uintptr) Status { return Status(uint32(r)) }

// check turns an hsa_status_t into nil or an *Error.
func (l *Lib) check(fn string, r uintptr) error {
	s := status(r)
	if s == StatusSuccess {
		return nil
	}
	return &Error{Func: fn, Status: s, Text: l.statusText(s)}
}

// statusText is hsa_status_string, which works before (and without) a
// successful hsa_init. It is "" for a status the runtime does not know.
func (l *Lib) statusText(s Status) string {
	if t, ok := l.statusTexts.Load(s); ok {
		return t.(string)
	}
	var p uintptr
	r, _, _ := purego.SyscallN(l.fn[symStatusString], uintptr(s), uintptr(unsafe.Pointer(&p)))
	if status(r) != StatusSuccess || p == 0 {
		return ""
	}
	t := cmem.GoString(p)
	l.statusTexts.Store(s, t)
	return t
}

// StatusString returns the runtime's description of s, which starts with
// the enum name (e.g. "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime
// failed..."), or "" for a code the runtime does not know.
func (l *Lib) StatusString(s Status) string { return l.statusText(s) }

// Init is hsa_init. Without a GPU (no /dev/kfd, no KFD nodes) ROCr returns
// OUT_OF_RESOURCES; Init turns that into an error matching both ErrNoGPU and
// the *Error. Each successful Init must be paired with a ShutDown.
func (l *Lib) Init() error {
	r, _, _ := purego.SyscallN(l.fn[symInit])
	err := l.check("hsa_init", r)
	var he *Error
	if errors.As(err, &he) && he.Status == StatusErrorOutOfResources {
		return &noGPUError{hsa: he, kfd: kfdProblem()}
	}
	return err
}

// kfdPath is the kernel driver node ROCr opens first.
const kfdPath = "/dev/kfd"

// kfdProblem says what the user can fix about /dev/kfd: absent (no amdgpu
// driver, or a container started without --device=/dev/kfd) or not
// read-writable (user not in the render group). It never opens the node:
// opening it creates a KFD process context.
func kfdProblem() string {
	err := syscall.Access(kfdPath, 6 /* R_OK|W_OK */)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, fs.ErrNotExist):
		return kfdPath + " is absent"
	case errors.Is(err, fs.ErrPermission):
		return kfdPath + " is not read-writable by this user (add it to the render and video groups)"
	default:
		return fmt.Sprintf("%s: %v", kfdPath, err)
	}
}

// ShutDown is hsa_shut_down.
func (l *Lib) ShutDown() error {
	r, _, _ := purego.SyscallN(l.fn[symShutDown])
	return l.check("hsa_shut_down", r)
}

// infoBuf receives *_get_info values. It is larger than any fixed-size
// attribute (the largest, HSA_AGENT_INFO_EXTENSIONS, is 128 bytes) so that a
// caller passing an attribute of the wrong type cannot make C write past
// Go memory. Name attributes of unbounded length go through the string
// getters, which size their buffer first.
type infoBuf [256]byte

func (b *infoBuf) uint64() uint64 { return le.Uint64(b[:8]) }

func (b *infoBuf) string() string {
	if i := bytes.IndexByte(b[:], 0); i >= 0 {
		return string(b[:i])
	}
	return string(b[:])
}

// SystemInfoUint64 is hsa_system_get_info for the integer attributes
// (uint16 versions, uint64 timestamps), widened to uint64.
func (l *Lib) SystemInfoUint64(attr SystemInfo) (uint64, error) {
	var b infoBuf
	r, _, _ := purego.SyscallN(l.fn[symSystemGetInfo], uintptr(attr), uintptr(unsafe.Pointer(&b)))
	return b.uint64(), l.check("hsa_system_get_info", r)
}

// Agents is hsa_iterate_agents, collected into a slice.
func (l *Lib) Agents() ([]Agent, error) {
	var out []Agent
	err := l.iterate("hsa_iterate_agents", func(cb, data uintptr) uintptr {
		return cmem.Call(l.fn[symIterateAgents], cb, data)
	}, func(h uint64) { out = append(out, Agent(h)) })
	return out, err
}

// AgentInfoString is hsa_agent_get_info for the char[64] attributes (name,
// vendor, product name).
func (l *Lib) AgentInfoString(a Agent, attr AgentInfo) (string, error) {
	var b infoBuf
	r, _, _ := purego.SyscallN(l.fn[symAgentGetInfo], uintptr(a), uintptr(attr), uintptr(unsafe.Pointer(&b)))
	if err := l.check("hsa_agent_get_info", r); err != nil {
		return "", err
	}
	return b.string(), nil
}

// AgentInfoUint32 is hsa_agent_get_info for the 32-bit attributes.
func (l *Lib) AgentInfoUint32(a Agent, attr AgentInfo) (uint32, error) {
	var b infoBuf
	r, _, _ := purego.SyscallN(l.fn[symAgentGetInfo], uintptr(a), uintptr(attr), uintptr(unsafe.Pointer(&b)))
	return uint32(b.uint64()), l.check("hsa_agent_get_info", r)
}

// AgentISAs is hsa_agent_iterate_isas.
func (l *Lib) AgentISAs(a Agent) ([]ISA, error) {
	var out []ISA
	err := l.iterate("hsa_agent_iterate_isas", func(cb, data uintptr) uintptr {
		return cmem.Call(l.fn[symAgentIterateISAs], uintptr(a), cb, data)
	}, func(h uint64) { out = append(out, ISA(h)) })
	return out, err
}

// ISAName is HSA_ISA_INFO_NAME through hsa_isa_get_info_alt: the full target
// ID such as "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-". The name has no
// fixed maximum, so its length is asked for first.
func (l *Lib) ISAName(isa ISA) (string, error) {
	var n uint64
	r, _, _ := purego.SyscallN(l.fn[symISAGetInfoAlt], uintptr(isa), uintptr(ISAInfoNameLength), uintptr(unsafe.Pointer(&n)))
	if err := l.check("hsa_isa_get_info_alt", r); err != nil {
		return "", err
	}
	buf := make([]byte, uint32(n)+1) // +1: the runtime need not write a NUL
	r, _, _ = purego.SyscallN(l.fn[symISAGetInfoAlt], uintptr(isa), uintptr(ISAInfoName), uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	if err := l.check("hsa_isa_get_info_alt", r); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

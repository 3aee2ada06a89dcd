//go:build linux && (amd64 || arm64)

package hsa

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// Code objects and executables.

// pinnedCode is the Go copy of a code object that a reader points at.
// hsa_code_object_reader_create_from_memory does not copy the bytes: the
// reader keeps the pointer and the loader reads it later, until the reader
// is destroyed. So the binding copies the caller's slice (which the caller
// may reuse) and pins the copy until CodeObjectReaderDestroy.
//
// The map is package-level, like the runtime's own state: a pinned Pinner
// that becomes unreachable makes the Go runtime panic, which a per-Lib map
// would risk when a *Lib is dropped with readers still open.
type pinnedCode struct {
	buf []byte
	pin runtime.Pinner
}

var (
	readersMu sync.Mutex
	readers   = map[CodeObjectReader]*pinnedCode{}
)

// CodeObjectReaderCreateFromMemory is hsa_code_object_reader_create_from_memory.
func (l *Lib) CodeObjectReaderCreateFromMemory(code []byte) (CodeObjectReader, error) {
	pc := &pinnedCode{buf: append([]byte(nil), code...)}
	if len(pc.buf) > 0 {
		pc.pin.Pin(&pc.buf[0])
	}
	var rd CodeObjectReader
	r, _, _ := purego.SyscallN(l.fn[symCodeObjectReaderCreateFromMemory], uintptr(unsafe.Pointer(unsafe.SliceData(pc.buf))),
		uintptr(len(pc.buf)), uintptr(unsafe.Pointer(&rd)))
	if err := l.check("hsa_code_object_reader_create_from_memory", r); err != nil {
		pc.pin.Unpin()
		return 0, err
	}
	readersMu.Lock()
	readers[rd] = pc
	readersMu.Unlock()
	return rd, nil
}

// CodeObjectReaderDestroy is hsa_code_object_reader_destroy; it unpins the
// reader's copy of the code object.
func (l *Lib) CodeObjectReaderDestroy(rd CodeObjectReader) error {
	if err := l.check("hsa_code_object_reader_destroy", cmem.Call(l.fn[symCodeObjectReaderDestroy], uintptr(rd))); err != nil {
		return err
	}
	readersMu.Lock()
	pc := readers[rd]
	delete(readers, rd)
	readersMu.Unlock()
	if pc != nil {
		pc.pin.Unpin()
	}
	return nil
}

// ExecutableCreateAlt is hsa_executable_create_alt with no options.
func (l *Lib) ExecutableCreateAlt(profile, rounding uint32) (Executable, error) {
	var e Executable
	r, _, _ := purego.SyscallN(l.fn[symExecutableCreateAlt], uintptr(profile), uintptr(rounding), 0, uintptr(unsafe.Pointer(&e)))
	return e, l.check("hsa_executable_create_alt", r)
}

// ExecutableLoadAgentCodeObject is hsa_executable_load_agent_code_object
// with no options; the loaded-code-object handle is not returned.
func (l *Lib) ExecutableLoadAgentCodeObject(e Executable, a Agent, rd CodeObjectReader) error {
	r := cmem.Call(l.fn[symExecutableLoadAgentCodeObject], uintptr(e), uintptr(a), uintptr(rd), 0, 0)
	return l.check("hsa_executable_load_agent_code_object", r)
}

// ExecutableFreeze is hsa_executable_freeze with no options.
func (l *Lib) ExecutableFreeze(e Executable) error {
	return l.check("hsa_executable_freeze", cmem.Call(l.fn[symExecutableFreeze], uintptr(e), 0))
}

// ExecutableDestroy is hsa_executable_destroy.
func (l *Lib) ExecutableDestroy(e Executable) error {
	return l.check("hsa_executable_destroy", cmem.Call(l.fn[symExecutableDestroy], uintptr(e)))
}

// ExecutableSymbolByName is hsa_executable_get_symbol_by_name. With code
// object v3 and later a kernel's symbol is its descriptor, "name.kd".
// Agent 0 passes a NULL agent, which C requires for program-allocation
// (agent-independent) variables; kernels need their agent.
func (l *Lib) ExecutableSymbolByName(e Executable, name string, a Agent) (ExecutableSymbol, error) {
	cname := append([]byte(name), 0)
	var agent *Agent
	if a != 0 {
		agent = &a
	}
	var s ExecutableSymbol
	r, _, _ := purego.SyscallN(l.fn[symExecutableGetSymbolByName], uintptr(e), uintptr(unsafe.Pointer(&cname[0])),
		uintptr(unsafe.Pointer(agent)), uintptr(unsafe.Pointer(&s)))
	return s, l.check("hsa_executable_get_symbol_by_name", r)
}

func (l *Lib) symbolInfo(s ExecutableSymbol, attr uint32) (uint64, error) {
	var b infoBuf
	r, _, _ := purego.SyscallN(l.fn[symExecutableSymbolGetInfo], uintptr(s), uintptr(attr), uintptr(unsafe.Pointer(&b)))
	return b.uint64(), l.check("hsa_executable_symbol_get_info", r)
}

// SymbolInfoUint32 is hsa_executable_symbol_get_info for uint32 attributes.
func (l *Lib) SymbolInfoUint32(s ExecutableSymbol, attr uint32) (uint32, error) {
	v, err := l.symbolInfo(s, attr)
	return uint32(v), err
}

// SymbolInfoUint64 is hsa_executable_symbol_get_info for uint64 attributes
// (the kernel object).
func (l *Lib) SymbolInfoUint64(s ExecutableSymbol, attr uint32) (uint64, error) {
	return l.symbolInfo(s, attr)
}

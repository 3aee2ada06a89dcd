//go:build linux && (amd64 || arm64)

package hsa

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// decodeSystemEvent copies an hsa_amd_event_t, which the runtime owns only
// for the duration of the callback, into Go values.
func decodeSystemEvent(p unsafe.Pointer) SystemEvent {
	ev := SystemEvent{Type: EventType(*(*uint32)(unsafe.Add(p, eventOffType)))}
	if ev.Type == EventGPUMemoryFault {
		f := unsafe.Add(p, eventOffMemoryFault)
		ev.MemoryFault = MemoryFault{
			Agent:   Agent(*(*uint64)(unsafe.Add(f, memoryFaultOffAgent))),
			Address: *(*uint64)(unsafe.Add(f, memoryFaultOffVirtualAddress)),
			Reason:  MemoryFaultReason(*(*uint32)(unsafe.Add(f, memoryFaultOffReasonMask))),
		}
	}
	return ev
}

// RegisterSystemEventHandler is hsa_amd_register_system_event_handler. The
// C data argument is an integer id into the binding's registry, so the
// runtime holds no Go pointer; cancel removes the id, after which the
// registration (which ROCr keeps until hsa_shut_down releases the runtime)
// answers every event as not handled.
func (l *Lib) RegisterSystemEventHandler(fn SystemEventFunc) (func(), error) {
	initCallbacks()
	id := systemEvents.add(fn)
	r, _, _ := purego.SyscallN(l.fn[symAMDRegisterSystemEventHandler], eventCallback, id)
	if err := l.check("hsa_amd_register_system_event_handler", r); err != nil {
		systemEvents.remove(id)
		return nil, err
	}
	return func() { systemEvents.remove(id) }, nil
}

package hsa

import (
	"errors"
	"fmt"
	"strings"
)

// System events (hsa_amd_register_system_event_handler).
//
// A GPU VM fault reaches ROCr through KFD's memory event, not through the
// faulting queue: ROCr 5.2's Runtime::VMFaultHandler packs it into an
// hsa_amd_event_t and calls every registered system event handler; unless
// one returns HSA_STATUS_SUCCESS it prints "Memory access fault by GPU
// node-N" and aborts the process. On real KFD without the debugger
// interface the faulting queues are evicted and may report no queue error,
// so the event is the one report of the fault a program can count on.

// EventType is hsa_amd_event_type_t.
type EventType uint32

// EventGPUMemoryFault is HSA_AMD_GPU_MEMORY_FAULT_EVENT.
const EventGPUMemoryFault EventType = 0

// MemoryFaultReason is a mask of hsa_amd_memory_fault_reason_t bits.
type MemoryFaultReason uint32

// hsa_amd_memory_fault_reason_t.
const (
	MemoryFaultPageNotPresent MemoryFaultReason = 1 << 0
	MemoryFaultReadOnly       MemoryFaultReason = 1 << 1
	MemoryFaultNX             MemoryFaultReason = 1 << 2
	MemoryFaultHostOnly       MemoryFaultReason = 1 << 3
	MemoryFaultDRAMECC        MemoryFaultReason = 1 << 4
	MemoryFaultImprecise      MemoryFaultReason = 1 << 5
	MemoryFaultSRAMECC        MemoryFaultReason = 1 << 6
	MemoryFaultHang           MemoryFaultReason = 1 << 31
)

var faultReasonNames = []struct {
	bit  MemoryFaultReason
	name string
}{
	{MemoryFaultPageNotPresent, "PAGE_NOT_PRESENT"},
	{MemoryFaultReadOnly, "READ_ONLY"},
	{MemoryFaultNX, "NX"},
	{MemoryFaultHostOnly, "HOST_ONLY"},
	{MemoryFaultDRAMECC, "DRAMECC"},
	{MemoryFaultImprecise, "IMPRECISE"},
	{MemoryFaultSRAMECC, "SRAMECC"},
	{MemoryFaultHang, "HANG"},
}

// String names the set bits, such as "PAGE_NOT_PRESENT|HOST_ONLY"; bits
// the header does not define are shown in hex.
func (r MemoryFaultReason) String() string {
	if r == 0 {
		return "none"
	}
	var parts []string
	for _, n := range faultReasonNames {
		if r&n.bit != 0 {
			parts = append(parts, n.name)
			r &^= n.bit
		}
	}
	if r != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(r)))
	}
	return strings.Join(parts, "|")
}

// MemoryFault is hsa_amd_gpu_memory_fault_info_t: the GPU agent that
// faulted, the faulting virtual address and why.
type MemoryFault struct {
	Agent   Agent
	Address uint64
	Reason  MemoryFaultReason
}

// SystemEvent is hsa_amd_event_t. MemoryFault is valid when Type is
// EventGPUMemoryFault.
type SystemEvent struct {
	Type        EventType
	MemoryFault MemoryFault
}

// SystemEventFunc handles a system event and says whether it did: ROCr
// aborts on a memory fault event that no handler handled. It runs on a
// runtime thread and must not block for long.
type SystemEventFunc func(ev SystemEvent) (handled bool)

// Layout of hsa_amd_event_t and hsa_amd_gpu_memory_fault_info_t, checked
// against the C headers in abi_test.go.
const (
	eventOffType                 = 0
	eventOffMemoryFault          = 8
	eventSizeof                  = 32
	memoryFaultOffAgent          = 0
	memoryFaultOffVirtualAddress = 8
	memoryFaultOffReasonMask     = 16
	memoryFaultSizeof            = 24
)

// ErrMemoryFault is matched (errors.Is) by a *MemoryFaultError.
var ErrMemoryFault = errors.New("GPU memory access fault")

// MemoryFaultError is a GPU VM fault reported by a system event. It
// matches ErrMemoryFault and an *Error with
// StatusErrorMemoryApertureViolation, the status ROCr's queue error
// callback gives the same fault where the queue reports one.
type MemoryFaultError struct {
	Fault MemoryFault
	// OnlyQueueError says no system event named the fault: a queue
	// reported StatusErrorMemoryApertureViolation and no event followed,
	// so Fault holds the agent alone.
	OnlyQueueError bool
}

func (e *MemoryFaultError) Error() string {
	if e.OnlyQueueError {
		return fmt.Sprintf("hsa: %v: agent %#x, address unknown (a queue reported a memory aperture violation and no system event followed)",
			ErrMemoryFault, uint64(e.Fault.Agent))
	}
	return fmt.Sprintf("hsa: %v: agent %#x accessed address %#x (%v)",
		ErrMemoryFault, uint64(e.Fault.Agent), e.Fault.Address, e.Fault.Reason)
}

// Unwrap returns ErrMemoryFault and the matching status.
func (e *MemoryFaultError) Unwrap() []error {
	return []error{ErrMemoryFault, &Error{Func: "system event", Status: StatusErrorMemoryApertureViolation}}
}

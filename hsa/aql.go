package hsa

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"
)

// PacketSize is the size of every AQL packet and ring slot.
const PacketSize = 64

// PacketType is bits 0-7 of an AQL header.
type PacketType uint8

const (
	PacketTypeVendor         PacketType = 0
	PacketTypeInvalid        PacketType = 1
	PacketTypeKernelDispatch PacketType = 2
	PacketTypeBarrierAnd     PacketType = 3
	PacketTypeAgentDispatch  PacketType = 4
	PacketTypeBarrierOr      PacketType = 5
)

// Header bit positions and fence scopes (hsa_packet_header_t,
// hsa_fence_scope_t).
const (
	HeaderBarrierBit          = 8
	HeaderAcquireFenceShift   = 9
	HeaderReleaseFenceShift   = 11
	FenceScopeNone            = 0
	FenceScopeAgent           = 1
	FenceScopeSystem          = 2
	BarrierAndMaxDependencies = 5
)

// Header builds an AQL header. Every packet rocsync writes sets the barrier
// bit: in-order completion on a queue is what lets the sync core skip waits
// between ops on the same queue.
func Header(t PacketType, barrier bool, acquire, release uint16) uint16 {
	h := uint16(t) | acquire<<HeaderAcquireFenceShift | release<<HeaderReleaseFenceShift
	if barrier {
		h |= 1 << HeaderBarrierBit
	}
	return h
}

// HeaderType returns the packet type of a header.
func HeaderType(h uint16) PacketType { return PacketType(h & 0xff) }

// HeaderBarrier reports whether the barrier bit is set.
func HeaderBarrier(h uint16) bool { return h&(1<<HeaderBarrierBit) != 0 }

// DispatchPacket is hsa_kernel_dispatch_packet_t.
type DispatchPacket struct {
	Header             uint16
	Setup              uint16 // bits 0-1: dimensions
	WorkgroupSize      [3]uint16
	GridSize           [3]uint32 // in work-items
	PrivateSegmentSize uint32
	GroupSegmentSize   uint32
	KernelObject       uint64
	KernargAddress     uint64
	CompletionSignal   Signal
}

// Byte offsets inside hsa_kernel_dispatch_packet_t, checked against the C
// header by the layout test.
const (
	DispatchOffSetup            = 2
	DispatchOffWorkgroupSizeX   = 4
	DispatchOffWorkgroupSizeY   = 6
	DispatchOffWorkgroupSizeZ   = 8
	DispatchOffReserved0        = 10
	DispatchOffGridSizeX        = 12
	DispatchOffGridSizeY        = 16
	DispatchOffGridSizeZ        = 20
	DispatchOffPrivateSegment   = 24
	DispatchOffGroupSegment     = 28
	DispatchOffKernelObject     = 32
	DispatchOffKernargAddress   = 40
	DispatchOffReserved2        = 48
	DispatchOffCompletionSignal = 56

	BarrierOffDepSignal        = 8
	BarrierOffCompletionSignal = 56
)

// BarrierAndPacket is hsa_barrier_and_packet_t. A zero dependency handle
// counts as satisfied.
type BarrierAndPacket struct {
	Header           uint16
	DepSignals       [BarrierAndMaxDependencies]Signal
	CompletionSignal Signal
}

var le = binary.LittleEndian

// EncodeBody writes bytes 4..63 of the dispatch packet into slot. The first
// 32-bit word (header and setup) is left alone: it is published last, with
// PublishHeader, so the packet processor never sees a half-written packet.
func (p *DispatchPacket) EncodeBody(slot *[PacketSize]byte) {
	le.PutUint16(slot[DispatchOffWorkgroupSizeX:], p.WorkgroupSize[0])
	le.PutUint16(slot[DispatchOffWorkgroupSizeY:], p.WorkgroupSize[1])
	le.PutUint16(slot[DispatchOffWorkgroupSizeZ:], p.WorkgroupSize[2])
	le.PutUint16(slot[DispatchOffReserved0:], 0)
	le.PutUint32(slot[DispatchOffGridSizeX:], p.GridSize[0])
	le.PutUint32(slot[DispatchOffGridSizeY:], p.GridSize[1])
	le.PutUint32(slot[DispatchOffGridSizeZ:], p.GridSize[2])
	le.PutUint32(slot[DispatchOffPrivateSegment:], p.PrivateSegmentSize)
	le.PutUint32(slot[DispatchOffGroupSegment:], p.GroupSegmentSize)
	le.PutUint64(slot[DispatchOffKernelObject:], p.KernelObject)
	le.PutUint64(slot[DispatchOffKernargAddress:], p.KernargAddress)
	le.PutUint64(slot[DispatchOffReserved2:], 0)
	le.PutUint64(slot[DispatchOffCompletionSignal:], uint64(p.CompletionSignal))
}

// FirstWord is the 32-bit header|setup<<16 word published last.
func (p *DispatchPacket) FirstWord() uint32 { return uint32(p.Header) | uint32(p.Setup)<<16 }

// DecodeDispatch parses a dispatch packet from a slot (header included).
func DecodeDispatch(slot []byte) DispatchPacket {
	_ = slot[PacketSize-1]
	return DispatchPacket{
		Header: le.Uint16(slot[0:]),
		Setup:  le.Uint16(slot[DispatchOffSetup:]),
		WorkgroupSize: [3]uint16{le.Uint16(slot[DispatchOffWorkgroupSizeX:]),
			le.Uint16(slot[DispatchOffWorkgroupSizeY:]), le.Uint16(slot[DispatchOffWorkgroupSizeZ:])},
		GridSize: [3]uint32{le.Uint32(slot[DispatchOffGridSizeX:]),
			le.Uint32(slot[DispatchOffGridSizeY:]), le.Uint32(slot[DispatchOffGridSizeZ:])},
		PrivateSegmentSize: le.Uint32(slot[DispatchOffPrivateSegment:]),
		GroupSegmentSize:   le.Uint32(slot[DispatchOffGroupSegment:]),
		KernelObject:       le.Uint64(slot[DispatchOffKernelObject:]),
		KernargAddress:     le.Uint64(slot[DispatchOffKernargAddress:]),
		CompletionSignal:   Signal(le.Uint64(slot[DispatchOffCompletionSignal:])),
	}
}

// EncodeBody writes bytes 4..63 of the barrier-AND packet.
func (p *BarrierAndPacket) EncodeBody(slot *[PacketSize]byte) {
	le.PutUint32(slot[4:], 0) // reserved1
	for i, s := range p.DepSignals {
		le.PutUint64(slot[BarrierOffDepSignal+8*i:], uint64(s))
	}
	le.PutUint64(slot[48:], 0) // reserved2
	le.PutUint64(slot[BarrierOffCompletionSignal:], uint64(p.CompletionSignal))
}

// FirstWord is the header word of a barrier packet (reserved0 is 0).
func (p *BarrierAndPacket) FirstWord() uint32 { return uint32(p.Header) }

// DecodeBarrierAnd parses a barrier-AND (or barrier-OR) packet.
func DecodeBarrierAnd(slot []byte) BarrierAndPacket {
	_ = slot[PacketSize-1]
	p := BarrierAndPacket{Header: le.Uint16(slot[0:]),
		CompletionSignal: Signal(le.Uint64(slot[BarrierOffCompletionSignal:]))}
	for i := range p.DepSignals {
		p.DepSignals[i] = Signal(le.Uint64(slot[BarrierOffDepSignal+8*i:]))
	}
	return p
}

// Slot returns ring slot index&(size-1) of q as a packet-sized array.
func Slot(q *Queue, index uint64) *[PacketSize]byte {
	off := uintptr(index&uint64(q.Size-1)) * PacketSize
	return (*[PacketSize]byte)(unsafe.Add(q.Base, off))
}

// PublishHeader does the one atomic release store of the first word that
// hands the slot to the packet processor. Go's atomic store is sequentially
// consistent, which is stronger than the release the protocol needs.
func PublishHeader(slot *[PacketSize]byte, firstWord uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(slot)), firstWord)
}

// LoadHeader is the packet processor's acquire load of the first word.
func LoadHeader(slot *[PacketSize]byte) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(slot)))
}

// InvalidFirstWord marks a slot as free (INVALID packet type).
const InvalidFirstWord = uint32(PacketTypeInvalid)

// HeaderAcquireScope is the acquire fence scope of a header.
func HeaderAcquireScope(h uint16) uint16 { return h >> HeaderAcquireFenceShift & 3 }

// HeaderReleaseScope is the release fence scope of a header.
func HeaderReleaseScope(h uint16) uint16 { return h >> HeaderReleaseFenceShift & 3 }

// Packet kinds FenceCounts tells apart.
const (
	FenceKindDispatch = iota
	FenceKindBarrierAnd
	FenceKindBarrierOr
	FenceKindVendor
	FenceKinds
)

// fenceKindNames are the FenceKind* names, for tables.
var fenceKindNames = [FenceKinds]string{"kernel dispatch", "barrier-AND", "barrier-OR", "vendor (AMD)"}

// FenceKindOf is the FenceCounts kind of a packet type, or -1 for one
// that has no fences (INVALID, agent dispatch).
func FenceKindOf(t PacketType) int {
	switch t {
	case PacketTypeKernelDispatch:
		return FenceKindDispatch
	case PacketTypeBarrierAnd:
		return FenceKindBarrierAnd
	case PacketTypeBarrierOr:
		return FenceKindBarrierOr
	case PacketTypeVendor:
		return FenceKindVendor
	}
	return -1
}

// FenceCounts counts processed AQL packets by kind and by the scope of
// their acquire and release fences: Acquire[k][s] is the number of packets
// of kind k (FenceKindDispatch, ...) whose acquire fence has scope s
// (FenceScopeNone, FenceScopeAgent, FenceScopeSystem; 3 is reserved).
//
// The scopes are a packet's cost: on gfx90a and gfx942 a system-scope
// release writes back the GPU's L2 and a system-scope acquire invalidates
// it (LLVM AMDGPUUsage, "Memory Model GFX90A" and "GFX942": release at
// system scope is buffer_wbl2, acquire buffer_invl2 / buffer_inv sc1), which
// agent scope does not need where the consumer shares the L2.
type FenceCounts struct {
	Acquire, Release [FenceKinds][4]uint64
}

// Count adds a packet with header h.
func (c *FenceCounts) Count(h uint16) {
	k := FenceKindOf(HeaderType(h))
	if k < 0 {
		return
	}
	c.Acquire[k][HeaderAcquireScope(h)]++
	c.Release[k][HeaderReleaseScope(h)]++
}

// Sub is c minus an earlier count o.
func (c FenceCounts) Sub(o FenceCounts) FenceCounts {
	for k := range c.Acquire {
		for s := range c.Acquire[k] {
			c.Acquire[k][s] -= o.Acquire[k][s]
			c.Release[k][s] -= o.Release[k][s]
		}
	}
	return c
}

// Packets is the number of packets of kind k counted.
func (c FenceCounts) Packets(k int) uint64 {
	var n uint64
	for _, x := range c.Acquire[k] {
		n += x
	}
	return n
}

// Table renders the counts as a Markdown table, one row per kind that
// has packets.
func (c FenceCounts) Table() string {
	var b strings.Builder
	b.WriteString("| packet | count | acquire none/agent/system | release none/agent/system |\n|---|---|---|---|\n")
	for k := range c.Acquire {
		if c.Packets(k) == 0 {
			continue
		}
		a, r := c.Acquire[k], c.Release[k]
		fmt.Fprintf(&b, "| %s | %d | %d / %d / %d | %d / %d / %d |\n", fenceKindNames[k], c.Packets(k),
			a[FenceScopeNone], a[FenceScopeAgent], a[FenceScopeSystem], r[FenceScopeNone], r[FenceScopeAgent], r[FenceScopeSystem])
	}
	return b.String()
}

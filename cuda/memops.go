package cuda

import (
	"unsafe"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
)

// Stream memory operations: a stream that waits on the device for a
// 64-bit word in host memory mapped to the device, which the host writes.
// They need entry points that older drivers lack (the _v2 ones are from
// CUDA 11.7), so they are resolved apart from BoundSymbols: a driver
// without them opens, and HasStreamMemOps says no.

// Optional symbols, indexes into Lib.sym after the required ones.
const (
	symStreamWaitValue64 = numSyms + iota
	symMemHostGetDevicePointer
	symStreamWriteValue64
	numOptional = iota
)

// OptionalSymbols are resolved when present; OptionalSymbols[i] is index
// numSyms+i.
var OptionalSymbols = []string{
	"cuStreamWaitValue64_v2",
	"cuMemHostGetDevicePointer_v2",
	"cuStreamWriteValue64_v2",
}

func symbolName(fn int) string {
	if fn < numSyms {
		return BoundSymbols[fn]
	}
	return OptionalSymbols[fn-numSyms]
}

func (l *Lib) resolveOptional() {
	for i, n := range OptionalSymbols {
		if a, err := dl.Dlsym(l.handle, n); err == nil {
			l.sym[numSyms+i] = a
		}
	}
}

// Device attributes of stream memory operations (cuda.h).
const (
	// AttrCanUse64BitStreamMemOps is
	// CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (CUDA 11.7 and
	// later): the _v2 cuStreamWaitValue64 and cuStreamWriteValue64, which
	// rocsync binds, are supported. Not to be confused with
	// AttrCanUse64BitStreamMemOpsV1.
	AttrCanUse64BitStreamMemOps int32 = 122
	// AttrCanUse64BitStreamMemOpsV1 is the deprecated
	// CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1 (93), which
	// speaks only of the legacy entry points: drivers report 0 unless the
	// nvidia module was loaded with NVreg_EnableStreamMemOPs=1 (an H100
	// with driver 580 does), though the _v2 calls work there.
	AttrCanUse64BitStreamMemOpsV1 int32 = 93
)

// Flags of cuStreamWaitValue64 (CUstreamWaitValue_flags).
const (
	StreamWaitValueGEQ uint32 = 0x0 // (int64)(*addr - value) >= 0
	StreamWaitValueEQ  uint32 = 0x1
	StreamWaitValueAnd uint32 = 0x2
	StreamWaitValueNor uint32 = 0x3
)

// MemHostAllocDeviceMap is CU_MEMHOSTALLOC_DEVICEMAP: the memory is mapped
// into the device's address space (cuMemHostGetDevicePointer).
const MemHostAllocDeviceMap uint32 = 0x2

// HasStreamMemOps reports whether the driver exports the entry points of
// stream memory operations (cuStreamWaitValue64_v2,
// cuMemHostGetDevicePointer_v2). Whether a device supports them is
// AttrCanUse64BitStreamMemOps.
func (l *Lib) HasStreamMemOps() bool {
	return l.sym[symStreamWaitValue64] != 0 && l.sym[symMemHostGetDevicePointer] != 0
}

// HasStreamWriteValue reports whether the driver exports
// cuStreamWriteValue64_v2 and cuMemHostGetDevicePointer_v2.
func (l *Lib) HasStreamWriteValue() bool {
	return l.sym[symStreamWriteValue64] != 0 && l.sym[symMemHostGetDevicePointer] != 0
}

// MemHostAllocFlags is cuMemHostAlloc with flags (MemHostAllocDeviceMap).
func (c *Ctx) MemHostAllocFlags(size uint64, flags uint32) (unsafe.Pointer, error) {
	v, err := c.lib.outInvoke(c, symMemHostAlloc, uintptr(size), uintptr(flags))
	if err != nil {
		return nil, err
	}
	return cmem.Ptr(uintptr(v)), nil
}

// The optional calls return ErrorNotSupported when the driver lacks their
// entry points.

// MemHostGetDevicePointer is cuMemHostGetDevicePointer_v2: the device
// address of mapped host memory.
func (c *Ctx) MemHostGetDevicePointer(p unsafe.Pointer) (DevicePtr, error) {
	if c.lib.sym[symMemHostGetDevicePointer] == 0 {
		return 0, c.lib.errorFor(symMemHostGetDevicePointer, ErrorNotSupported)
	}
	v, err := c.lib.outInvoke(c, symMemHostGetDevicePointer, uintptr(p), 0)
	return DevicePtr(v), err
}

// StreamWaitValue64 is cuStreamWaitValue64_v2: s waits on the device until
// the 64-bit word at addr satisfies flags against value.
func (c *Ctx) StreamWaitValue64(s Stream, addr DevicePtr, value uint64, flags uint32) error {
	if c.lib.sym[symStreamWaitValue64] == 0 {
		return c.lib.errorFor(symStreamWaitValue64, ErrorNotSupported)
	}
	return c.lib.invoke(c, symStreamWaitValue64, uintptr(s), uintptr(addr), uintptr(value), uintptr(flags))
}

// StreamWriteValue64 is cuStreamWriteValue64_v2 with the default flags: s
// writes value to the 64-bit word at addr once the work before it is done,
// with a memory barrier, so a host polling the (mapped) word sees the
// work's results once it sees the value.
func (c *Ctx) StreamWriteValue64(s Stream, addr DevicePtr, value uint64) error {
	if c.lib.sym[symStreamWriteValue64] == 0 {
		return c.lib.errorFor(symStreamWriteValue64, ErrorNotSupported)
	}
	return c.lib.invoke(c, symStreamWriteValue64, uintptr(s), uintptr(addr), uintptr(value), 0)
}

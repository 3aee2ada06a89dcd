package cuda

import (
	"fmt"
	"unsafe"

	"github.com/rocsync/rocsync/internal/cmem"
)

// C memory (see package cmem for the rules): everything the driver reads
// through a pointer array (cuLaunchKernel's kernelParams), everything it may
// read after a call (the PTX image, copied once), and the out-parameters of
// the calls (CUstream*, CUevent*, ...) live in C memory, which also keeps
// the calls free of Go allocations.

// blockBytes is the C memory of one call's block: out-parameters and short
// strings (kernel names).
const blockBytes = 256

var blocks = &cmem.Pool{Size: blockBytes}

// ParamBlock is C memory holding one kernel's argument values and the
// array of pointers to them that cuLaunchKernel takes as kernelParams. The
// driver copies the values when the launch is enqueued, so one block can be
// rewritten and reused for the next launch as soon as cuLaunchKernel
// returns. A ParamBlock is not safe for concurrent use: give each stream (or
// each submitting goroutine) its own.
type ParamBlock struct {
	p    unsafe.Pointer // [n]uintptr pointers, then size bytes of values
	n    int
	size int
}

// NewParamBlock allocates a block for a kernel whose parameters sit at
// offsets (in order) inside a size-byte argument buffer, such as
// kernels.Layout's offsets inside kernels.KernargSize bytes.
func NewParamBlock(size int, offsets []int) (*ParamBlock, error) {
	for _, o := range offsets {
		if o < 0 || o >= size {
			return nil, fmt.Errorf("cuda: parameter offset %d outside a %d-byte argument buffer", o, size)
		}
	}
	hdr := 8 * len(offsets)
	p := cmem.Alloc(uintptr(hdr + size + 8))
	if p == nil {
		return nil, fmt.Errorf("cuda: cannot allocate %d bytes of C memory for kernel parameters", hdr+size)
	}
	pb := &ParamBlock{p: p, n: len(offsets), size: size}
	vals := uintptr(p) + uintptr(hdr)
	for i, o := range offsets {
		*(*uintptr)(unsafe.Add(p, 8*i)) = vals + uintptr(o)
	}
	return pb, nil
}

// Bytes is the argument buffer, in C memory: write the values here (for
// example with kernels.Args.Encode) before each launch.
func (pb *ParamBlock) Bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(pb.p, 8*pb.n)), pb.size)
}

// Params is the kernelParams argument of cuLaunchKernel: the C address of
// the pointer array.
func (pb *ParamBlock) Params() uintptr { return uintptr(pb.p) }

// Pointers returns the pointer array's entries (for tests and fakes).
func (pb *ParamBlock) Pointers() []uintptr {
	return unsafe.Slice((*uintptr)(pb.p), pb.n)
}

// Free releases the C memory; the block must not be used afterwards.
func (pb *ParamBlock) Free() {
	if pb != nil && pb.p != nil {
		cmem.Free(pb.p)
		pb.p = nil
	}
}

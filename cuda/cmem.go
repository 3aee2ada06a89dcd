package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// C memory.
//
// The cgo pointer-passing rules, which purego follows, say that C may not
// keep a Go pointer after the call returns and that memory passed to C must
// not contain Go pointers. Everything the driver reads through a pointer
// array (cuLaunchKernel's kernelParams), everything it may read after the
// call (the PTX image, copied once), and the out-parameters of the calls
// (CUstream*, CUevent*, ...) therefore live in C memory from libc's calloc.
// For the out-parameters this is also what keeps the calls free of Go
// allocations: purego.SyscallN is //go:uintptrescapes, so passing &local
// would move the local to the heap on every call.

var libcState struct {
	once         sync.Once
	calloc, free uintptr
	err          error
}

func libc() (calloc, free uintptr, err error) {
	s := &libcState
	s.once.Do(func() {
		var h uintptr
		for _, name := range []string{"libc.so.6", "libc.so"} {
			if h, s.err = purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL); s.err == nil {
				break
			}
		}
		if s.err != nil {
			s.err = fmt.Errorf("cuda: cannot open libc for C memory: %w", s.err)
			return
		}
		if s.calloc, s.err = purego.Dlsym(h, "calloc"); s.err != nil {
			return
		}
		s.free, s.err = purego.Dlsym(h, "free")
	})
	return s.calloc, s.free, s.err
}

// cAlloc returns n zeroed bytes of C memory, or nil when libc fails.
func cAlloc(n uintptr) unsafe.Pointer {
	calloc, _, err := libc()
	if err != nil || n == 0 {
		return nil
	}
	r, _, _ := purego.SyscallN(calloc, 1, n)
	return cptr(r)
}

func cFree(p unsafe.Pointer) {
	if p == nil {
		return
	}
	_, free, err := libc()
	if err != nil {
		return
	}
	purego.SyscallN(free, uintptr(p))
}

// cptr turns an address that C returned into an unsafe.Pointer. The address
// is not Go memory, so the garbage collector ignores it; the indirection
// keeps go vet's unsafeptr check quiet without changing the meaning.
func cptr(u uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&u))
}

// goString copies the NUL-terminated C string at p.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	b := cptr(p)
	n := 0
	for *(*byte)(unsafe.Add(b, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(b), n))
}

// maxCallArgs is the most arguments a bound function takes (cuLaunchKernel
// has 11; cublasSgemm_v2 has 14 and has its own blocks).
const maxCallArgs = 12

// blockBytes is the C memory of one block: out-parameters and short
// strings (kernel names).
const blockBytes = 256

type cmem struct{ p unsafe.Pointer }

// block is reusable memory for one call at a time: C memory for the
// out-parameters and a Go-heap argument array for purego.SyscallN.
type block struct {
	mem  *cmem
	args [maxCallArgs]uintptr
}

var blocks sync.Pool // of *block; per-P, so threads do not contend

func getBlock() *block {
	if b, _ := blocks.Get().(*block); b != nil {
		return b
	}
	m := &cmem{p: cAlloc(blockBytes)}
	if m.p == nil {
		// calloc of a few bytes failed, or libc did not load (Open
		// checks that it does).
		panic(fmt.Sprintf("cuda: cannot allocate %d bytes of C memory", blockBytes))
	}
	b := &block{mem: m}
	// A block the pool drops at a GC frees its C memory.
	runtime.AddCleanup(b, func(m *cmem) { cFree(m.p) }, m)
	return b
}

func putBlock(b *block) { blocks.Put(b) }

// u64 returns the i-th 8-byte word of the block's C memory.
func (b *block) u64(i int) *uint64 { return (*uint64)(unsafe.Add(b.mem.p, 8*i)) }

// word returns the address of the i-th 8-byte word, to pass to C.
func (b *block) word(i int) uintptr { return uintptr(b.mem.p) + uintptr(8*i) }

// call runs fn through the block's own argument array. Passing a slice that
// is already on the heap with "..." means SyscallN's variadic slice is not
// allocated: a plain SyscallN(fn, a, b) call allocates one on every call,
// because SyscallN is //go:uintptrescapes and so its arguments escape
// (BenchmarkFake* in bench_test.go measure both).
//
// Only integers and C addresses may go through call. A Go pointer must be
// converted with uintptr(unsafe.Pointer(p)) inside the SyscallN call
// expression itself: that is what makes //go:uintptrescapes keep the object
// alive and in place until the call returns.
func (b *block) call(fn uintptr, args ...uintptr) uintptr {
	n := copy(b.args[:], args)
	r, _, _ := purego.SyscallN(fn, b.args[:n]...)
	return r
}

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
	p := cAlloc(uintptr(hdr + size + 8))
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
		cFree(pb.p)
		pb.p = nil
	}
}

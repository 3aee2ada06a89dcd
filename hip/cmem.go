package hip

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
// keep a Go pointer after the call returns, and that memory passed to C must
// not contain Go pointers. Anything HIP keeps (the code-object image, which
// HIP may read again after hipModuleLoadData returns) or anything that holds
// pointers (the hipModuleLaunchKernel "extra" array, which points at the
// argument buffer and at the size_t) therefore lives in C memory from libc's
// calloc, never in Go memory. The out-parameters (hipStream_t*, int*, ...)
// live in C memory too, so that the calls make no Go allocation:
// purego.SyscallN is //go:uintptrescapes, so passing &local would move the
// local to the heap on every call.

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
			s.err = fmt.Errorf("hip: cannot open libc for C memory: %w", s.err)
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

// maxCallArgs is the most arguments a bound function takes
// (hipModuleLaunchKernel has 11).
const maxCallArgs = 12

// cmem is a piece of C memory. A cleanup on the cBlock that owns it frees it
// when the block is dropped from its pool.
type cmem struct {
	p    unsafe.Pointer
	size uintptr
}

// cBlock is reusable C memory for one call at a time, plus a Go-side
// argument array for purego.SyscallN.
type cBlock struct {
	mem  *cmem
	args [maxCallArgs]uintptr
}

// cPool hands out cBlocks through a sync.Pool, which is per-P and so does
// not make goroutines on different threads contend. Blocks that the pool
// drops at a GC have their C memory freed by a cleanup.
type cPool struct {
	size uintptr
	init func(*cBlock)
	pool sync.Pool
}

func (p *cPool) get() *cBlock {
	if b, _ := p.pool.Get().(*cBlock); b != nil {
		return b
	}
	m := &cmem{p: cAlloc(p.size), size: p.size}
	if m.p == nil {
		// calloc of a few bytes failed, or libc did not load (Open checks
		// that it does).
		panic(fmt.Sprintf("hip: cannot allocate %d bytes of C memory", p.size))
	}
	b := &cBlock{mem: m}
	runtime.AddCleanup(b, func(m *cmem) { cFree(m.p) }, m)
	if p.init != nil {
		p.init(b)
	}
	return b
}

func (p *cPool) put(b *cBlock) { p.pool.Put(b) }

// u64 returns the i-th 8-byte word of the block's C memory.
func (b *cBlock) u64(i int) *uint64 { return (*uint64)(unsafe.Add(b.mem.p, 8*i)) }

// word returns the address of the i-th 8-byte word, to pass to C.
func (b *cBlock) word(i int) uintptr { return uintptr(b.mem.p) + uintptr(8*i) }

// call runs fn through the block's own argument array. Passing a slice that
// is already on the heap with "..." means SyscallN's variadic slice is not
// allocated: a plain SyscallN(fn, a, b) call allocates one on every call,
// because SyscallN is //go:uintptrescapes and so its arguments escape.
//
// Only integers and C addresses may go through call. A Go pointer must be
// converted with uintptr(unsafe.Pointer(p)) inside the SyscallN call
// expression itself: that is what makes //go:uintptrescapes move the object
// to the heap (a stack could move under a bare uintptr) and keep it alive
// until the call returns.
func (b *cBlock) call(fn uintptr, args ...uintptr) uintptr {
	n := copy(b.args[:], args)
	r, _, _ := purego.SyscallN(fn, b.args[:n]...)
	return r
}

// Package cmem is the C memory and the allocation-free calls that the
// purego bindings (hsa, hip, rocblas, cuda, cublas) share.
//
// The cgo pointer-passing rules, which purego follows, say that C may not
// keep a Go pointer after a call returns, and that memory passed to C must
// not contain Go pointers. Whatever a library keeps (a code-object image it
// may read again later) or whatever holds pointers (the "extra" array of a
// kernel launch) therefore lives in C memory from libc's calloc. The
// out-parameters of hot calls live in C memory too, so the calls make no Go
// allocation.
package cmem

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/dl"
)

// MaxArgs is the most arguments Call and Block.Call pass.
const MaxArgs = 16

type args [MaxArgs]uintptr

var argPool = sync.Pool{New: func() any { return new(args) }}

// Call calls the C function at fn with integer or C-address arguments and
// allocates nothing. purego.SyscallN is variadic and //go:uintptrescapes,
// so a plain SyscallN(fn, a, b) moves its implicit argument slice to the
// heap on every call; passing a pooled array with "..." does not.
//
// A Go pointer must never go through Call: only a conversion written inside
// the SyscallN call expression itself keeps the object alive and in place
// for the call. Calls with Go out-parameters call purego.SyscallN directly.
// (Under -race, sync.Pool drops items on purpose, so allocations reappear
// there.)
func Call(fn uintptr, a ...uintptr) uintptr {
	p := argPool.Get().(*args)
	n := copy(p[:], a)
	r, _, _ := purego.SyscallN(fn, p[:n]...)
	argPool.Put(p)
	return r
}

var libcState struct {
	once         sync.Once
	calloc, free uintptr
	err          error
}

// OpenLibc opens the C library (libc.so.6, else libc.so) for its
// symbols.
func OpenLibc() (uintptr, error) {
	h, err := dl.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		h, err = dl.Dlopen("libc.so", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	}
	return h, err
}

// Libc loads calloc and free once.
func Libc() error {
	s := &libcState
	s.once.Do(func() {
		var h uintptr
		if h, s.err = OpenLibc(); s.err != nil {
			s.err = fmt.Errorf("cmem: cannot open libc for C memory: %w", s.err)
			return
		}
		if s.calloc, s.err = dl.Dlsym(h, "calloc"); s.err != nil {
			return
		}
		s.free, s.err = dl.Dlsym(h, "free")
	})
	return s.err
}

// Alloc returns n zeroed bytes of C memory, or nil when libc fails or n is 0.
func Alloc(n uintptr) unsafe.Pointer {
	if Libc() != nil || n == 0 {
		return nil
	}
	return Ptr(Call(libcState.calloc, 1, n))
}

// Free releases memory from Alloc; nil is ignored.
func Free(p unsafe.Pointer) {
	if p == nil || Libc() != nil {
		return
	}
	Call(libcState.free, uintptr(p))
}

// Ptr turns an address that C returned into an unsafe.Pointer. The address
// is not Go memory, so the garbage collector ignores it; the indirection
// keeps go vet's unsafeptr check quiet without changing the meaning.
func Ptr(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }

// GoString copies the NUL-terminated C string at p ("" for 0).
func GoString(p uintptr) string {
	if p == 0 {
		return ""
	}
	b := Ptr(p)
	n := 0
	for *(*byte)(unsafe.Add(b, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(b), n))
}

// mem is a piece of C memory freed by a cleanup on the Block that owns it.
type mem struct {
	p    unsafe.Pointer
	size uintptr
}

// Block is reusable C memory for one call at a time, plus an argument
// array for purego.SyscallN.
type Block struct {
	mem  *mem
	args args
}

// Pool hands out Blocks of Size bytes through a sync.Pool, which is per-P
// and so does not make goroutines on different threads contend. Blocks
// that the pool drops at a GC have their C memory freed by a cleanup. Init,
// if set, prepares a new Block once.
type Pool struct {
	Size uintptr
	Init func(*Block)
	pool sync.Pool
}

// Get returns a Block; it panics if C memory cannot be had (the bindings
// check that libc loads when they open).
func (p *Pool) Get() *Block {
	if b, _ := p.pool.Get().(*Block); b != nil {
		return b
	}
	m := &mem{p: Alloc(p.Size), size: p.Size}
	if m.p == nil {
		panic(fmt.Sprintf("cmem: cannot allocate %d bytes of C memory", p.Size))
	}
	b := &Block{mem: m}
	runtime.AddCleanup(b, func(m *mem) { Free(m.p) }, m)
	if p.Init != nil {
		p.Init(b)
	}
	return b
}

// Put returns a Block to the pool.
func (p *Pool) Put(b *Block) { p.pool.Put(b) }

// Ptr is the start of the block's C memory.
func (b *Block) Ptr() unsafe.Pointer { return b.mem.p }

// U64 returns the i-th 8-byte word of the block's C memory.
func (b *Block) U64(i int) *uint64 { return (*uint64)(unsafe.Add(b.mem.p, 8*i)) }

// Word returns the address of the i-th 8-byte word, to pass to C.
func (b *Block) Word(i int) uintptr { return uintptr(b.mem.p) + uintptr(8*i) }

// Call is cmem.Call through the block's own argument array.
func (b *Block) Call(fn uintptr, a ...uintptr) uintptr {
	n := copy(b.args[:], a)
	r, _, _ := purego.SyscallN(fn, b.args[:n]...)
	return r
}

// Size is the block's C memory size.
func (b *Block) Size() uintptr { return b.mem.size }

// Grow replaces the block's memory with n zeroed bytes when it holds
// fewer; it reports false when C memory cannot be had.
func (b *Block) Grow(n uintptr) bool {
	if n <= b.mem.size {
		return true
	}
	p := Alloc(n)
	if p == nil {
		return false
	}
	Free(b.mem.p)
	b.mem.p, b.mem.size = p, n
	return true
}

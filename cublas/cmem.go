package cublas

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// C memory for alpha, beta and the out-parameters (see cuda/cmem.go for
// why: purego.SyscallN is //go:uintptrescapes, so &local would move the
// local to the heap on every call).

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
			s.err = fmt.Errorf("cublas: cannot open libc for C memory: %w", s.err)
			return
		}
		if s.calloc, s.err = purego.Dlsym(h, "calloc"); s.err != nil {
			return
		}
		s.free, s.err = purego.Dlsym(h, "free")
	})
	return s.calloc, s.free, s.err
}

func cptr(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }

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

// maxCallArgs covers cublasSgemm_v2's 14 arguments.
const maxCallArgs = 14

const blockBytes = 32 // alpha, beta, an out word

type cmem struct{ p unsafe.Pointer }

type block struct {
	mem  *cmem
	args [maxCallArgs]uintptr
}

var blocks sync.Pool

func getBlock() *block {
	if b, _ := blocks.Get().(*block); b != nil {
		return b
	}
	calloc, free, err := libc()
	if err != nil {
		panic(err)
	}
	r, _, _ := purego.SyscallN(calloc, 1, blockBytes)
	if r == 0 {
		panic("cublas: cannot allocate C memory")
	}
	m := &cmem{p: cptr(r)}
	b := &block{mem: m}
	runtime.AddCleanup(b, func(m *cmem) { purego.SyscallN(free, uintptr(m.p)) }, m)
	return b
}

func putBlock(b *block) { blocks.Put(b) }

func (b *block) u64(i int) *uint64  { return (*uint64)(unsafe.Add(b.mem.p, 8*i)) }
func (b *block) word(i int) uintptr { return uintptr(b.mem.p) + uintptr(8*i) }

// call passes the block's heap argument array with "...", so SyscallN's
// variadic slice is not allocated. Integers and C addresses only.
func (b *block) call(fn uintptr, args ...uintptr) uintptr {
	n := copy(b.args[:], args)
	r, _, _ := purego.SyscallN(fn, b.args[:n]...)
	return r
}

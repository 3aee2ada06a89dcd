package rocblas

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// C memory from libc, for the gemm scalars and the out-parameters (see the
// comment on handleState for why they are not Go memory).

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
			s.err = fmt.Errorf("rocblas: cannot open libc for C memory: %w", s.err)
			return
		}
		if s.calloc, s.err = purego.Dlsym(h, "calloc"); s.err != nil {
			return
		}
		s.free, s.err = purego.Dlsym(h, "free")
	})
	return s.calloc, s.free, s.err
}

func cAlloc(n uintptr) unsafe.Pointer {
	calloc, _, err := libc()
	if err != nil {
		return nil
	}
	r, _, _ := purego.SyscallN(calloc, 1, n)
	return cptr(r)
}

func cFree(p unsafe.Pointer) {
	if _, free, err := libc(); err == nil && p != nil {
		purego.SyscallN(free, uintptr(p))
	}
}

// cptr turns an address that C returned into an unsafe.Pointer (not Go
// memory, so the garbage collector ignores it) without tripping go vet.
func cptr(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }

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

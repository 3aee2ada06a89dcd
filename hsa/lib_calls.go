//go:build linux && (amd64 || arm64)

package hsa

import (
	"sync"

	"github.com/ebitengine/purego"
)

// Non-allocating calls for the hot paths.
//
// purego.SyscallN is variadic and marked go:uintptrescapes, so the compiler
// moves the implicit []uintptr backing array of every call to the heap: one
// 8*n-byte allocation per call, whatever the arguments. Passing an existing
// slice with args... creates no new backing array, so these helpers fill a
// pooled array and pass that; they cost the same time as a plain SyscallN
// (see BenchmarkCallOverhead) and allocate nothing. (Under -race sync.Pool
// drops items on purpose, so some allocations reappear there.)
//
// The arguments must not be Go pointers: converting a Go pointer to uintptr
// before the SyscallN call site loses the go:uintptrescapes guarantee that
// the object stays alive. Calls with Go out-parameters use SyscallN directly
// with the conversion written inline; they are not on hot paths.

type callArgs [8]uintptr

var argPool = sync.Pool{New: func() any { return new(callArgs) }}

func call1(fn, a0 uintptr) uintptr {
	a := argPool.Get().(*callArgs)
	a[0] = a0
	r, _, _ := purego.SyscallN(fn, a[:1]...)
	argPool.Put(a)
	return r
}

func call2(fn, a0, a1 uintptr) uintptr {
	a := argPool.Get().(*callArgs)
	a[0], a[1] = a0, a1
	r, _, _ := purego.SyscallN(fn, a[:2]...)
	argPool.Put(a)
	return r
}

func call3(fn, a0, a1, a2 uintptr) uintptr {
	a := argPool.Get().(*callArgs)
	a[0], a[1], a[2] = a0, a1, a2
	r, _, _ := purego.SyscallN(fn, a[:3]...)
	argPool.Put(a)
	return r
}

func call5(fn, a0, a1, a2, a3, a4 uintptr) uintptr {
	a := argPool.Get().(*callArgs)
	a[0], a[1], a[2], a[3], a[4] = a0, a1, a2, a3, a4
	r, _, _ := purego.SyscallN(fn, a[:5]...)
	argPool.Put(a)
	return r
}

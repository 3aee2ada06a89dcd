//go:build linux && (amd64 || arm64)

package hsa

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// BenchmarkCallOverhead compares the ways of calling into libhsa-runtime64
// on calls that work without a GPU:
//
//   - hsa_signal_destroy(0): one integer argument, no Go pointers; the
//     runtime returns NOT_INITIALIZED (or INVALID_ARGUMENT after a
//     successful init) at once. Its shape is that of the hot paths
//     (hsa_signal_load_scacquire, hsa_queue_load_read_index_scacquire).
//   - hsa_executable_freeze(0, NULL) and
//     hsa_executable_load_agent_code_object(0, 0, 0, NULL, NULL): the same
//     with 2 and 5 arguments, the shapes of the doorbell store
//     (hsa_signal_store_screlease) and of hsa_signal_wait_scacquire.
//   - hsa_status_string(s, &p): a Go out-parameter, the shape of the cold
//     *_get_info and *_create calls.
//
// Forms: purego.SyscallN (variadic: allocates its []uintptr), the binding's
// pooled callN helpers (SyscallN fed an existing slice), and RegisterLibFunc
// (reflection). Run with -benchmem or read the allocs column.
func BenchmarkCallOverhead(b *testing.B) {
	l := openOrSkip(b)
	destroy, statusString := l.fn[symSignalDestroy], l.fn[symStatusString]
	freeze, load := l.fn[symExecutableFreeze], l.fn[symExecutableLoadAgentCodeObject]

	b.Run("1arg/SyscallN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _, _ := purego.SyscallN(destroy, 0); r == 0 {
				b.Fatal("hsa_signal_destroy(0) succeeded")
			}
		}
	})
	b.Run("1arg/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if cmem.Call(destroy, 0) == 0 {
				b.Fatal("hsa_signal_destroy(0) succeeded")
			}
		}
	})
	b.Run("1arg/RegisterLibFunc", func(b *testing.B) {
		var f func(uint64) uint32
		purego.RegisterFunc(&f, destroy)
		b.ReportAllocs()
		for b.Loop() {
			if f(0) == 0 {
				b.Fatal("hsa_signal_destroy(0) succeeded")
			}
		}
	})
	b.Run("2arg/SyscallN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _, _ := purego.SyscallN(freeze, 0, 0); r == 0 {
				b.Fatal("hsa_executable_freeze(0) succeeded")
			}
		}
	})
	b.Run("2arg/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if cmem.Call(freeze, 0, 0) == 0 {
				b.Fatal("hsa_executable_freeze(0) succeeded")
			}
		}
	})
	b.Run("5arg/SyscallN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _, _ := purego.SyscallN(load, 0, 0, 0, 0, 0); r == 0 {
				b.Fatal("hsa_executable_load_agent_code_object(0) succeeded")
			}
		}
	})
	b.Run("5arg/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if cmem.Call(load, 0, 0, 0, 0, 0) == 0 {
				b.Fatal("hsa_executable_load_agent_code_object(0) succeeded")
			}
		}
	})
	b.Run("5arg/RegisterLibFunc", func(b *testing.B) {
		var f func(uint64, uint64, uint64, uintptr, uintptr) uint32
		purego.RegisterFunc(&f, load)
		b.ReportAllocs()
		for b.Loop() {
			if f(0, 0, 0, 0, 0) == 0 {
				b.Fatal("hsa_executable_load_agent_code_object(0) succeeded")
			}
		}
	})
	b.Run("2arg-outptr/SyscallN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p uintptr
			if r, _, _ := purego.SyscallN(statusString, uintptr(StatusErrorOutOfResources), uintptr(unsafe.Pointer(&p))); r != 0 || p == 0 {
				b.Fatal("hsa_status_string failed")
			}
		}
	})
	b.Run("2arg-outptr/RegisterLibFunc", func(b *testing.B) {
		var f func(uint32, *uintptr) uint32
		purego.RegisterFunc(&f, statusString)
		b.ReportAllocs()
		for b.Loop() {
			var p uintptr
			if f(uint32(StatusErrorOutOfResources), &p) != 0 || p == 0 {
				b.Fatal("hsa_status_string failed")
			}
		}
	})
}

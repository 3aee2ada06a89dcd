//go:build linux && (amd64 || arm64)

package kfdsim_test

import (
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// Registering the same user range twice succeeds and is counted by the real
// thunk (fmm_register_user_memory): HIP 5.2.3 registers a freshly allocated
// host buffer at an address it registered before, on every stream creation.
// The simulated driver keeps the USERPTR buffer object until the thunk frees
// it at the last deregister.
func TestRegisterSameRangeIsCounted(t *testing.T) {
	if !kfdsim.InChild(t) {
		kfdsim.Run(t, "gfx90a", t.Name(), kfdsim.Options{})
		return
	}
	k := openThunk(t)
	k.openKFD(t)
	buf := make([]byte, 3*4096)
	p := unsafe.Pointer(&buf[4096-uintptr(unsafe.Pointer(&buf[0]))%4096])
	const size = 4096
	for i := 0; i < 2; i++ {
		if st := k.call(t, "hsaKmtRegisterMemory", uintptr(p), size); st != kmtSuccess {
			t.Fatalf("registration %d: %d", i+1, st)
		}
	}
	if st := k.call(t, "hsaKmtDeregisterMemory", uintptr(p)); st != kmtSuccess {
		t.Fatalf("first deregister: %d", st)
	}
	if _, ok := k.lookup(t, p); !ok {
		t.Fatal("the range was dropped while one registration remained")
	}
	if st := k.call(t, "hsaKmtDeregisterMemory", uintptr(p)); st != kmtSuccess {
		t.Fatalf("second deregister: %d", st)
	}
	if _, ok := k.lookup(t, p); ok {
		t.Fatal("the range is still registered after the last deregister")
	}
}

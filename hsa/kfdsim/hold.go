//go:build linux && (amd64 || arm64)

package kfdsim

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
)

// Hold pauses every simulated command processor (AQL and SDMA queues) of
// the simulated driver this process loaded (libPath, or ShimSoname when empty)
// before its next packet, until release is called. Work submitted meanwhile
// stays pending, as on a GPU kept busy behind a fast host, so a test can
// count the waits a crossing costs exactly. A packet already in progress
// finishes; holds nest; release is idempotent.
func Hold(libPath string) (release func(), err error) {
	if libPath == "" {
		libPath = ShimSoname
	}
	h, err := dl.Dlopen(libPath, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: dlopen %s: %v", ErrNoThunk, libPath, err)
	}
	hold, err := dl.Dlsym(h, "kfdsim_hold")
	if err != nil {
		purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %s has no kfdsim_hold: %v", ErrNoThunk, libPath, err)
	}
	rel, err := dl.Dlsym(h, "kfdsim_release")
	if err != nil {
		purego.Dlclose(h)
		return nil, fmt.Errorf("%w: %s has no kfdsim_release: %v", ErrNoThunk, libPath, err)
	}
	cmem.Call(hold)
	var once sync.Once
	return func() {
		once.Do(func() {
			cmem.Call(rel)
			purego.Dlclose(h)
		})
	}, nil
}

// shimCall calls the simulated driver's test hook sym (in libPath, or
// ShimSoname when empty) with args, and returns its result.
func shimCall(libPath, sym string, args ...uintptr) (uintptr, error) {
	if libPath == "" {
		libPath = ShimSoname
	}
	h, err := dl.Dlopen(libPath, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return 0, fmt.Errorf("%w: dlopen %s: %v", ErrNoThunk, libPath, err)
	}
	defer purego.Dlclose(h)
	fn, err := dl.Dlsym(h, sym)
	if err != nil {
		return 0, fmt.Errorf("%w: %s has no %s: %v", ErrNoThunk, libPath, sym, err)
	}
	return cmem.Call(fn, args...), nil
}

// Allocated reports whether addr lies in memory the simulated driver has
// handed out (AllocMemory) or registered and not yet freed: the
// simulated-driver counterpart of asking the emulator whether a device
// allocation is still live.
func Allocated(libPath string, addr uintptr) (bool, error) {
	var rec [40]byte // kfdsim_alloc: base, size, home_node, mapped_mask, flags
	r, err := shimCall(libPath, "kfdsim_lookup", addr, uintptr(unsafe.Pointer(&rec[0])))
	return uint8(r) != 0, err
}

// EOPInterrupts is how many end-of-pipe interrupts the simulated command
// processors of this process's simulated driver (libPath, or ShimSoname
// when empty) have raised for AQL packets: one per completed packet whose
// completion signal has an event mailbox (an interrupt signal).
func EOPInterrupts(libPath string) (uint64, error) {
	r, err := shimCall(libPath, "kfdsim_eop_interrupts")
	return uint64(r), err
}

// FenceScopes counts the AQL packets the simulated command processors of
// this process's simulated driver (libPath, or ShimSoname when empty) have
// processed, by kind and by the scopes of their acquire and release
// fences: rocsync's packets, and ROCr's and HIP's own.
func FenceScopes(libPath string) (hsa.FenceCounts, error) {
	var c hsa.FenceCounts
	var raw [2 * hsa.FenceKinds * 4]uint64
	if _, err := shimCall(libPath, "kfdsim_fence_scopes", uintptr(unsafe.Pointer(&raw[0]))); err != nil {
		return c, err
	}
	for k := range hsa.FenceKinds {
		for s := range 4 {
			c.Acquire[k][s] = raw[k*4+s]
			c.Release[k][s] = raw[16+k*4+s]
		}
	}
	return c, nil
}

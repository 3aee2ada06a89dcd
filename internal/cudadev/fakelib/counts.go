package fakelib

import (
	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/dl"
)

// The fake libcuda's call counters, by index (the enum in
// cuda/testdata/fakecuda.c).
const (
	CountSetCurrent  = 0
	CountLaunch      = 1
	CountRecord      = 2
	CountWait        = 3
	CountQuery       = 4
	CountSync        = 5
	CountGetCurrent  = 11
	CountGraphLaunch = 12
	CountWaitValue   = 13
	CountWriteValue  = 14
)

// Counts reads the fake libcuda's call counters (fakecuda_count) of the
// library at a path the bindings opened: dlopen of the same path returns
// the same instance, and so the same counters.
type Counts struct{ fn uintptr }

// OpenCounts finds the counters of the fake libcuda at path.
func OpenCounts(path string) (Counts, error) {
	h, err := dl.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return Counts{}, err
	}
	fn, err := dl.Dlsym(h, "fakecuda_count")
	if err != nil {
		return Counts{}, err
	}
	return Counts{fn}, nil
}

// Get is counter i's value.
func (c Counts) Get(i int) int64 {
	r, _, _ := purego.SyscallN(c.fn, uintptr(i))
	return int64(r)
}

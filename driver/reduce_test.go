package driver

import (
	"errors"
	"testing"

	"github.com/rocsync/rocsync/kernels"
)

// A kernel is loaded once per (reduction, element type); a failed load is
// returned and tried again next time.
func TestReductionCacheLoadsOncePerKernel(t *testing.T) {
	var c ReductionCache
	loads := 0
	boom := errors.New("boom")
	if _, err := c.Get(kernels.SumCols, kernels.F64, func() (LoadedKernel, error) { loads++; return LoadedKernel{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed load: %v, want boom", err)
	}
	load := func(name string) func() (LoadedKernel, error) {
		return func() (LoadedKernel, error) { loads++; return LoadedKernel{Name: name}, nil }
	}
	k1, err := c.Get(kernels.SumCols, kernels.F64, load("a"))
	if err != nil || k1.Name != "a" {
		t.Fatalf("Get = %v, %v", k1, err)
	}
	k2, _ := c.Get(kernels.SumCols, kernels.F64, load("b"))
	k3, _ := c.Get(kernels.SumCols, kernels.F32, load("c"))
	if k2 != k1 || k3.Name != "c" || loads != 3 {
		t.Errorf("cached kernel %q (same pointer %v), other type %q, %d loads; want a, true, c, 3", k2.Name, k2 == k1, k3.Name, loads)
	}
}

package driver

import (
	"sync"

	"github.com/rocsync/rocsync/kernels"
)

// Reducer is a Device that has rocsync's sum reductions (kernels.Reduction)
// loaded next to its elementwise kernels: a Dispatch of the returned
// kernel takes a kernels.ReduceArgs block, a 1-D grid of whole
// kernels.ReduceWorkgroupSize workgroups, and a zeroed workspace that it
// leaves zeroed.
type Reducer interface {
	Reduction(r kernels.Reduction, dt kernels.DType) (*LoadedKernel, error)
}

// ReductionCache keeps a Reducer's kernels: one per reduction and element
// type, looked up on first use. The zero value is ready.
type ReductionCache struct {
	mu     sync.Mutex
	loaded [kernels.SumCols + 1][2]bool
	k      [kernels.SumCols + 1][2]LoadedKernel
}

// Get returns the kernel of (r, dt), calling load (under the cache's lock)
// the first time; a failed load is not kept. r and dt must be valid.
func (c *ReductionCache) Get(r kernels.Reduction, dt kernels.DType, load func() (LoadedKernel, error)) (*LoadedKernel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded[r][dt] {
		return &c.k[r][dt], nil
	}
	k, err := load()
	if err != nil {
		return nil, err
	}
	c.k[r][dt], c.loaded[r][dt] = k, true
	return &c.k[r][dt], nil
}

package cudadev

import (
	"fmt"
	"sync"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
)

var _ driver.Reducer = (*Device)(nil)

// reductions caches the reduction kernels, looked up by name in the PTX
// module that holds the elementwise ones.
type reductions struct {
	mu      sync.Mutex
	loaded  [kernels.SumCols + 1][2]bool
	k       [kernels.SumCols + 1][2]driver.Kernel
	offsets []int
}

// Reduction implements driver.Reducer.
func (d *Device) Reduction(r kernels.Reduction, dt kernels.DType) (*driver.Kernel, error) {
	if !d.kready.Load() {
		if err := d.loadKernels(); err != nil {
			return nil, err
		}
	}
	if !r.Valid() || dt.Size() == 0 {
		return nil, fmt.Errorf("cudadev: no reduction %v for %v", r, dt)
	}
	rs := &d.reductions
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.loaded[r][dt] {
		return &rs.k[r][dt], nil
	}
	if rs.offsets == nil {
		for _, a := range kernels.ReduceLayout {
			rs.offsets = append(rs.offsets, int(a.Offset))
		}
	}
	f, err := d.b.function(r.KernelName(dt))
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", r.KernelName(dt), err)
	}
	rs.k[r][dt] = driver.Kernel{Name: r.KernelName(dt), Object: uint64(f), ArgsSize: kernels.ReduceKernargSize,
		Workgroup: kernels.ReduceWorkgroupSize, ParamOffsets: rs.offsets}
	rs.loaded[r][dt] = true
	return &rs.k[r][dt], nil
}

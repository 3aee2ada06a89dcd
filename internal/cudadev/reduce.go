package cudadev

import (
	"fmt"
	"sync"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
)

var _ driver.Reducer = (*Device)(nil)

// reduceParamOffsets are the offsets of kernels.ReduceLayout's arguments.
var reduceParamOffsets = sync.OnceValue(func() []int {
	var offsets []int
	for _, a := range kernels.ReduceLayout {
		offsets = append(offsets, int(a.Offset))
	}
	return offsets
})

// Reduction implements driver.Reducer. The reduction kernels are looked up
// by name in the PTX module that holds the elementwise ones.
func (d *Device) Reduction(r kernels.Reduction, dt kernels.DType) (*driver.LoadedKernel, error) {
	if !d.kready.Load() {
		if err := d.loadKernels(); err != nil {
			return nil, err
		}
	}
	if !r.Valid() || dt.Size() == 0 {
		return nil, fmt.Errorf("cudadev: no reduction %v for %v", r, dt)
	}
	return d.reductions.Get(r, dt, func() (driver.LoadedKernel, error) {
		f, err := d.b.function(r.KernelName(dt))
		if err != nil {
			return driver.LoadedKernel{}, fmt.Errorf("kernel %s: %w", r.KernelName(dt), err)
		}
		return driver.LoadedKernel{Name: r.KernelName(dt), Object: uint64(f), ArgsSize: kernels.ReduceKernargSize,
			Workgroup: kernels.ReduceWorkgroupSize, ParamOffsets: reduceParamOffsets()}, nil
	})
}

package rocmdev

import (
	"fmt"
	"sync"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

var _ driver.Reducer = (*Device)(nil)

// reductions caches the reduction kernels, looked up in the executable
// (and, under Unified, the HIP module) that holds the elementwise ones.
type reductions struct {
	mu     sync.Mutex
	loaded [kernels.SumCols + 1][2]bool
	k      [kernels.SumCols + 1][2]driver.Kernel
}

// Reduction implements driver.Reducer.
func (d *Device) Reduction(r kernels.Reduction, dt kernels.DType) (*driver.Kernel, error) {
	if err := d.loadKernels(); err != nil {
		return nil, err
	}
	if !r.Valid() || dt.Size() == 0 {
		return nil, fmt.Errorf("rocmdev: no reduction %v for %v", r, dt)
	}
	rs := &d.reductions
	di := 0
	if dt == kernels.F64 {
		di = 1
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.loaded[r][di] {
		return &rs.k[r][di], nil
	}
	sym, err := d.rt.HSA.ExecutableSymbolByName(d.exe, r.Symbol(dt), d.agent)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", r.Symbol(dt), err)
	}
	k := driver.Kernel{Name: r.KernelName(dt), Workgroup: kernels.ReduceWorkgroupSize}
	if err := d.fillKernel(&k, sym, r.Symbol(dt)); err != nil {
		return nil, err
	}
	if k.ArgsSize < kernels.ReduceKernargSize {
		return nil, fmt.Errorf("kernel %s: kernarg segment is %d bytes, rocsync packs %d", r.Symbol(dt), k.ArgsSize, kernels.ReduceKernargSize)
	}
	if d.cfg.Policy == syncstate.Unified {
		f, err := d.rt.HIP.ModuleGetFunction(d.module, r.KernelName(dt))
		if err != nil {
			return nil, err
		}
		k.Function = uint64(f)
	}
	rs.k[r][di], rs.loaded[r][di] = k, true
	return &rs.k[r][di], nil
}

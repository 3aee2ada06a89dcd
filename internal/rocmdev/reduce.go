package rocmdev

import (
	"fmt"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

var _ driver.Reducer = (*Device)(nil)

// Reduction implements driver.Reducer. The reduction kernels are looked up
// in the executable (and, under Unified, the HIP module) that holds the
// elementwise ones.
func (d *Device) Reduction(r kernels.Reduction, dt kernels.DType) (*driver.LoadedKernel, error) {
	if err := d.loadKernels(); err != nil {
		return nil, err
	}
	if !r.Valid() || dt.Size() == 0 {
		return nil, fmt.Errorf("rocmdev: no reduction %v for %v", r, dt)
	}
	return d.reductions.Get(r, dt, func() (driver.LoadedKernel, error) {
		sym, err := d.rt.HSA.ExecutableSymbolByName(d.exe, r.Symbol(dt), d.agent)
		if err != nil {
			return driver.LoadedKernel{}, fmt.Errorf("kernel %s: %w", r.Symbol(dt), err)
		}
		k := driver.LoadedKernel{Name: r.KernelName(dt), Workgroup: kernels.ReduceWorkgroupSize, ExplicitArgsSize: kernels.ReduceKernargSize}
		if err := d.fillKernel(&k, sym, r.Symbol(dt)); err != nil {
			return driver.LoadedKernel{}, err
		}
		if k.ArgsSize < kernels.ReduceKernargSize {
			return driver.LoadedKernel{}, fmt.Errorf("kernel %s: kernarg segment is %d bytes, rocsync packs %d", r.Symbol(dt), k.ArgsSize, kernels.ReduceKernargSize)
		}
		if d.cfg.Policy == syncstate.Unified {
			f, err := d.rt.HIP.ModuleGetFunction(d.module, r.KernelName(dt))
			if err != nil {
				return driver.LoadedKernel{}, err
			}
			k.Function = uint64(f)
		}
		return k, nil
	})
}

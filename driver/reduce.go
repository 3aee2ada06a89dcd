package driver

import "github.com/rocsync/rocsync/kernels"

// Reducer is a Device that has rocsync's sum reductions (kernels.Reduction)
// loaded next to its elementwise kernels: a Dispatch of the returned
// kernel takes a kernels.ReduceArgs block, a 1-D grid of whole
// kernels.ReduceWorkgroupSize workgroups, and a zeroed workspace that it
// leaves zeroed.
type Reducer interface {
	Reduction(r kernels.Reduction, dt kernels.DType) (*Kernel, error)
}

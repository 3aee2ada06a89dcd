package rocmdev

import (
	"fmt"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/collective"
	"github.com/rocsync/rocsync/nccl"
)

var _ driver.CollectiveDevice = (*Device)(nil)

// Collectives implements driver.CollectiveDevice: RCCL, loaded at its
// first use, or the library Runtimes.Collectives gives.
func (d *Device) Collectives(timeout time.Duration) (driver.Collectives, error) {
	if d.rt.Collectives != nil {
		return d.rt.Collectives(timeout)
	}
	l, err := collective.Load(nccl.RCCL)
	if err != nil {
		return nil, fmt.Errorf("collectives on ROCm need RCCL: %w", err)
	}
	return &collective.Lib{LibName: "RCCL", C: l, UniqueID: l.GetUniqueID, Ordinal: HIPIndexOf,
		InitRank: func(dd driver.Device, nranks int, id nccl.UniqueID, rank int) (nccl.Comm, error) {
			var c nccl.Comm
			err := onDevice(dd, func() (err error) {
				c, err = l.CommInitRank(nranks, id, rank)
				return err
			})
			return c, err
		},
		OnDevice: onDevice}, nil
}

// onDevice runs fn on a locked OS thread after hipSetDevice(d).
func onDevice(dd driver.Device, fn func() error) error {
	d := dd.(*Device)
	h, ok := d.rt.HIP.(*hip.Lib)
	if !ok {
		return fmt.Errorf("rocsync: the HIP runtime cannot select a device for RCCL")
	}
	return h.OnDevice(d.hipIndex, fn)
}

// HIPIndexOf is the HIP index of d, a Device of this package: the
// device ordinal RCCL takes.
func HIPIndexOf(d driver.Device) int { return d.(*Device).hipIndex }

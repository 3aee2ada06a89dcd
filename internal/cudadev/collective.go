package cudadev

import (
	"fmt"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/collective"
	"github.com/rocsync/rocsync/nccl"
)

var _ driver.CollectiveDevice = (*Device)(nil)

// Collectives implements driver.CollectiveDevice: NCCL, loaded at its
// first use (timeout is for emulated libraries; NCCL has its own).
func (d *Device) Collectives(time.Duration) (driver.Collectives, error) {
	l, err := collective.Load(nccl.NCCL)
	if err != nil {
		return nil, fmt.Errorf("collectives on CUDA need NCCL: %w", err)
	}
	return &collective.Lib{LibName: "NCCL", C: l, UniqueID: l.GetUniqueID,
		Ordinal: func(d driver.Device) int { return d.(*Device).Ordinal() },
		InitRank: func(d driver.Device, nranks int, id nccl.UniqueID, rank int) (nccl.Comm, error) {
			var c nccl.Comm
			err := d.(*Device).OnDevice(func() (err error) {
				c, err = l.CommInitRank(nranks, id, rank)
				return err
			})
			return c, err
		},
		OnDevice: func(d driver.Device, fn func() error) error { return d.(*Device).OnDevice(fn) }}, nil
}

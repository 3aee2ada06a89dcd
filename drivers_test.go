package rocsync

import (
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/drivers" // registers the drivers Open finds
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/rocblas"
)

// machine is the emulated machine d runs on (nil off the emulator), for
// the tests that hold it, inject faults into it or read its counters.
func (d *Device) machine() *emu.Machine {
	if s, ok := d.system.(*drivers.Emulated); ok {
		return s.Machine
	}
	return nil
}

// rocmLibraries is backends.ROCmLibraries, which this package's tests
// cannot import (it imports this package).
func rocmLibraries(d *Device) (h hip.Runtime, blas rocblas.Library, ok bool) {
	rd, ok := d.drv.(*rocmdev.Device)
	if !ok {
		return nil, nil, false
	}
	h, blas = rd.Libraries()
	return h, blas, true
}

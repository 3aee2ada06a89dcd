// Package drivers registers rocsync's drivers with package driver: "rocm"
// (the ROCm stack: HSA, HIP, rocBLAS), "cuda" (the CUDA driver API and
// cuBLAS) and "emulator" (the ROCm driver over the emulated ROCm stack).
// It is the one package that imports the concrete drivers and the
// runtimes' bindings to open them; the front package imports none of
// them, and a program gets them by importing package backends.
//
// The package refuses to know about arrays, ordering or the front
// package's options: it turns an OpenConfig into runtimes and devices.
package drivers

import (
	"errors"
	"time"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/collective"
	"github.com/rocsync/rocsync/internal/cudadev"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/nccl"
	"github.com/rocsync/rocsync/rocblas"
	"github.com/rocsync/rocsync/syncstate"
)

func init() {
	driver.Register("rocm", rocm{})
	driver.Register("cuda", cudaDriver{})
	driver.Register("emulator", emulator{})
}

// rocm opens the real ROCm stack.
type rocm struct{}

func (rocm) Open(c driver.OpenConfig) (*driver.Family, error) {
	h, err := hsa.Open()
	if err != nil {
		return nil, rocmAbsent(err)
	}
	if err := h.Init(); err != nil {
		return nil, rocmAbsent(err)
	}
	hp, err := hip.Open()
	if err != nil {
		_ = h.ShutDown()
		return nil, rocmAbsent(err)
	}
	if n, err := hp.DeviceCount(); err != nil || n == 0 {
		_ = h.ShutDown()
		if err == nil {
			err = hip.ErrNoDevice
		}
		return nil, rocmAbsent(err)
	}
	rt := rocmdev.Runtimes{HSA: h, HIP: hp, Log: c.Log}
	if b, err := rocblas.Open(hp.Major()); err != nil {
		rt.BLASErr = err
		c.Log.Warn().Err(err).Msg("rocsync: rocBLAS unavailable; MatMul will fail, everything else works")
	} else {
		rt.BLAS = b
	}
	devs, err := rocmdev.Open(rt, c.Config)
	if err != nil {
		return nil, rocmAbsent(err)
	}
	return &driver.Family{Devices: devs}, nil
}

// rocmAbsent gives a ROCm stack's failure to start its kind: no AMD GPU
// (HSA or HIP finds none), or ROCm not installed (a library missing).
func rocmAbsent(err error) error {
	switch {
	case errors.Is(err, hsa.ErrNoGPU) || errors.Is(err, hip.ErrNoDevice):
		return driver.WithKind(err, driver.ErrNoDevice)
	case errors.Is(err, dl.ErrNotFound):
		return driver.WithKind(err, driver.ErrNotInstalled)
	}
	return err
}

// cudaDriver opens NVIDIA's CUDA driver and cuBLAS.
type cudaDriver struct{}

func (cudaDriver) Open(c driver.OpenConfig) (*driver.Family, error) {
	devs, err := cudadev.OpenFunc(c.Config)
	switch {
	case err == nil:
		return &driver.Family{Devices: devs}, nil
	case errors.Is(err, cuda.ErrNoDevice):
		return nil, driver.WithKind(err, driver.ErrNoDevice)
	case errors.Is(err, cuda.ErrNoDriver):
		return nil, driver.WithKind(err, driver.ErrNotInstalled)
	}
	return nil, err
}

// emulator opens the ROCm driver over an emulated machine.
type emulator struct{}

func (emulator) Open(c driver.OpenConfig) (*driver.Family, error) {
	e := c.Emulator
	m := emu.New(emu.Options{Devices: e.Devices, ISA: e.ISA, MemoryPerDevice: e.MemoryPerDevice,
		Hazards: e.HazardChecker, MaxDelay: e.MaxDelay, Seed: e.Seed, HIPVersion: e.HIPVersion,
		HIPVisibleDevices: e.HIPVisibleDevices, Partitions: e.Partitions, KernelGroupSegmentSize: e.KernelGroupSegmentSize,
		FaultInjector: e.FaultInjector, References: e.KernelReferences, PeerAccess: e.PeerAccess})
	if err := m.HSA().Init(); err != nil {
		return nil, err
	}
	rt := rocmdev.Runtimes{HSA: m.HSA(), HIP: m.HIP(), BLAS: m.BLAS(), Log: c.Log, Collectives: emulatedRCCL(m)}
	devs, err := rocmdev.Open(rt, c.Config)
	if err != nil {
		return nil, err
	}
	return &driver.Family{Devices: devs, System: &Emulated{m}}, nil
}

// emulatedRCCL is the machine's model of RCCL as a driver's collectives;
// a rendezvous that runs out of time is a wait timeout.
func emulatedRCCL(m *emu.Machine) func(time.Duration) (driver.Collectives, error) {
	return func(timeout time.Duration) (driver.Collectives, error) {
		c := m.Collectives(timeout)
		return &collective.Lib{LibName: "the emulated RCCL", C: c, UniqueID: c.GetUniqueID, Ordinal: rocmdev.HIPIndexOf,
			InitRank: func(d driver.Device, nranks int, id nccl.UniqueID, rank int) (nccl.Comm, error) {
				comm, err := c.CommInitRank(rocmdev.HIPIndexOf(d), nranks, id, rank)
				if errors.Is(err, emu.ErrCollectiveTimeout) {
					err = driver.WithKind(err, syncstate.ErrWaitTimeout)
				}
				return comm, err
			}}, nil
	}
}

// Emulated is the System of the emulator's devices: the machine, with
// the instruments the front package asks for (driver.HazardReporter,
// driver.HostTracker).
type Emulated struct{ *emu.Machine }

var (
	_ driver.HazardReporter = (*Emulated)(nil)
	_ driver.HostTracker    = (*Emulated)(nil)
)

// Hazards returns what the machine's hazard checker found.
func (s *Emulated) Hazards() []error {
	var out []error
	for _, h := range s.Machine.Hazards() {
		out = append(out, h)
	}
	return out
}

// Package backends makes rocsync's drivers available to rocsync.Open: the
// real ROCm stack, NVIDIA's CUDA driver and the emulated AMD device. A
// program imports it once, for its side effect, as a database/sql program
// imports its database's driver:
//
//	import (
//		"github.com/rocsync/rocsync"
//		_ "github.com/rocsync/rocsync/backends" // ROCm, CUDA and the emulator
//	)
//
// Without it, Open fails with an ErrUnavailable error that says so.
// ROCmLibraries reaches the ROCm libraries under a device, for library
// calls of the program's own.
package backends

import (
	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/hip"
	_ "github.com/rocsync/rocsync/internal/drivers" // registers "rocm", "cuda" and "emulator"
	"github.com/rocsync/rocsync/rocblas"
)

// rocmDevice is a ROCm driver's device, real or emulated.
type rocmDevice interface {
	Libraries() (hip.Runtime, rocblas.Library)
}

// ROCmLibraries returns the HIP runtime and the rocBLAS library that d
// runs on (the emulated ones on the emulator; blas is nil without
// rocBLAS), for library calls that use them on a task's raw stream
// (Task.LibraryCall); ok is false on other backends and on a closed
// device.
func ROCmLibraries(d *rocsync.Device) (h hip.Runtime, blas rocblas.Library, ok bool) {
	_ = d.Raw(func(dd any) error {
		if rd, is := dd.(rocmDevice); is {
			h, blas = rd.Libraries()
			ok = true
		}
		return nil
	})
	return h, blas, ok
}

//go:build linux && (amd64 || arm64)

package main

import (
	"fmt"
	"os"

	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// Over the simulated driver (go run -exec with cmd/simrun, as CI runs
// ci/rocm's GPU branch), the simulated GPU runs rocsync's kernels and
// simblas's gemms through the Go executor, registered before HSA is
// initialised. On a real GPU the driver is not loaded and nothing happens.
func init() {
	if _, err := kfdsim.RegisterExecutorIfLoaded(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: over the simulated driver without its executor:", err)
	}
}

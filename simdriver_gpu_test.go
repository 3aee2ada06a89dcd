//go:build linux && (amd64 || arm64)

package rocsync

import (
	"fmt"
	"os"

	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// The hardware suite (ROCSYNC_GPU=1) run over the simulated driver
// (cmd/simrun as go test's -exec, as CI runs ci/rocm's GPU branch): the
// simulated GPU runs rocsync's kernels and simblas's gemms through the Go
// executor, which must be registered before HSA is initialised.
func init() {
	if os.Getenv("ROCSYNC_GPU") != "1" || kfdsim.IsChild() {
		return
	}
	if _, err := kfdsim.RegisterExecutorIfLoaded(); err != nil {
		fmt.Fprintln(os.Stderr, "rocsync: over the simulated driver without its executor:", err)
	}
}

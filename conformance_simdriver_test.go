//go:build linux && (amd64 || arm64)

package rocsync_test

import (
	"testing"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/conformance"
)

func TestConformanceOnSimulatedDriver(t *testing.T) {
	rocsync.OnSimulatedGPUs(t, func(t *testing.T) { conformance.Run(t, backend(t, "simulated driver")) })
}

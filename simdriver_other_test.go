//go:build !(linux && (amd64 || arm64))

package rocsync

import (
	"testing"
)

// holdSimulatedGPU: the simulated driver runs on linux/amd64 and arm64 only.
func holdSimulatedGPU(t *testing.T) func() {
	t.Helper()
	t.Fatal("the simulated driver runs on linux/amd64 and linux/arm64 only")
	return func() {}
}

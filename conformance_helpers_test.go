package rocsync_test

import (
	"testing"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/conformance"
	"github.com/rocsync/rocsync/internal/testenv"
)

// The package's own tests use the conformance suites' seed programs and
// replay check (ReplayEqualsEager), on the backend their device is of,
// and the peer-copy chain (PeerCopyTrainingChain).
func init() {
	rocsync.UsePeerChain(func(t *testing.T, devs []*rocsync.Device, settle func()) rocsync.PeerChain {
		pc := conformance.NewPeerChain(t, devs)
		pc.Settle = settle
		return pc
	})
	progs := make([]rocsync.ReplayProgram, len(conformance.ReplaySeedPrograms))
	for i, p := range conformance.ReplaySeedPrograms {
		progs[i] = rocsync.ReplayProgram(p)
	}
	rocsync.UseReplayChecks(progs,
		func(t *testing.T, d *rocsync.Device, tk *rocsync.Task, p rocsync.ReplayProgram, n, iters int) {
			conformance.CheckReplayEqualsEager(t, backendOf(t, d), d, tk, conformance.ReplayProgram(p), n, iters)
		},
		func(t *testing.T, d *rocsync.Device, p rocsync.ReplayProgram, n int) []*rocsync.Array {
			return conformance.ReplayOuts(t, d, conformance.ReplayProgram(p), n)
		})
}

// backendOf is the row of suiteBackends d is a device of.
func backendOf(t *testing.T, d *rocsync.Device) *conformance.Backend {
	switch {
	case d.Emulated():
		return backend(t, "emulator")
	case kfdsim.IsChild():
		return backend(t, "simulated driver")
	case testenv.OnGPU() && testenv.OnCUDA():
		return backend(t, "cuda")
	case testenv.OnGPU():
		return backend(t, "rocm")
	}
	return backend(t, "cuda emulator")
}

//go:build linux && (amd64 || arm64)

package rocsync

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/queue"
)

// Record and replay on Debian's real ROCr and HIP 5.2.3 over the simulated
// driver: the replayed AQL packets are copied into ROCr's own ring and
// processed by the simulated command processor, reading their kernargs
// from the recording's memory, which ROCr maps to the GPU only after
// hsa_amd_agents_allow_access. The seed programs and a 99-op chain give
// what the eager ops gave, under DeviceSide (HSA queue, HIP stream, the
// crossing a counted host wait) and Unified (the HIP stream alone).
func TestReplayOnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		for _, p := range []Policy{DeviceSide, Unified} {
			t.Run(p.String(), func(t *testing.T) {
				d := openSimulatedROCm(t, p)[0]
				defer func() { require.NoError(t, d.Close()) }()
				tk, err := d.NewTask()
				require.NoError(t, err)
				for _, prog := range replaySeedPrograms {
					checkReplayEqualsEager(t, d, tk, prog, 16, 3)
				}
				x, err := d.FromFloat32(4, 4, randMatrix(3, 4))
				require.NoError(t, err)
				eager, err := d.FromFloat32(4, 4, randMatrix(4, 4))
				require.NoError(t, err)
				replayed, err := d.FromFloat32(4, 4, randMatrix(4, 4))
				require.NoError(t, err)
				rec, err := tk.Record(func() error {
					for range chainLen {
						if err := tk.ScaleInto(replayed, 1.01, replayed); err != nil {
							return err
						}
					}
					return tk.AddInto(replayed, replayed, x)
				})
				require.NoError(t, err)
				for range 3 {
					for range chainLen {
						require.NoError(t, tk.ScaleInto(eager, 1.01, eager))
					}
					require.NoError(t, tk.AddInto(eager, eager, x))
					require.NoError(t, rec.Replay())
					want, err := eager.Float32s()
					require.NoError(t, err)
					got, err := replayed.Float32s()
					require.NoError(t, err)
					require.Equal(t, want, got)
				}
				require.NoError(t, rec.Close())
				require.NoError(t, tk.Close())
			})
		}
	})
}

// Without hsa_amd_agents_allow_access on the recording's kernarg memory
// (the test-only switch), ROCr leaves it unmapped for the GPU: the first
// replayed packet's kernarg read is a VM fault, reported as the queue's
// typed error without a hang. The same recording made with the access
// allowed runs (TestReplayOnSimulatedDriver).
func TestReplayKernargWithoutAllowAccessFaultsOnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		d := openSimulatedROCm(t, DeviceSide)[0]
		tk := d.DefaultTask()
		x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
		require.NoError(t, err)
		_, err = tk.Mul(x, x) // the queue and the kernels, with access
		require.NoError(t, err)
		require.NoError(t, tk.Synchronize())
		testhooks.SkipKernargAllowAccess.Store(true)
		rec, err := tk.Record(func() error { return tk.MulInto(x, x, x) })
		testhooks.SkipKernargAllowAccess.Store(false)
		require.NoError(t, err)
		require.NoError(t, rec.Replay())
		done := make(chan error, 1)
		go func() { done <- tk.Synchronize() }()
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the wait hung on a faulted queue")
		}
		require.ErrorIs(t, err, ErrFault)
		require.ErrorIs(t, err, queue.ErrQueueBroken)
		require.True(t, errors.Is(err, &hsa.Error{Status: hsa.StatusErrorMemoryApertureViolation}), "%v", err)
		require.NoError(t, rec.Close())
		_ = d.Close()
	})
}

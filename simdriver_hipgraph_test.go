//go:build linux && (amd64 || arm64)

package rocsync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testhooks"
)

// hipGraph replay on Debian's real HIP 5.2.3 over the simulated driver.
// HIP 5.2 does not capture hipModuleLaunchKernel (rocsync's kernels under
// Unified, and simblas's gemm): rocsync replays such segments as their
// recorded calls in order, and says why. A segment of copies alone is
// captured, and its hipGraph replays what the eager copies did.
func TestHIPGraphReplayOnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		d := openSimulatedROCm(t, Unified)[0]
		defer func() { require.NoError(t, d.Close()) }()
		tk := d.DefaultTask()
		src, err := d.FromFloat32(4, 4, randMatrix(1, 4))
		require.NoError(t, err)
		dst, err := d.Empty(4, 4, Float32)
		require.NoError(t, err)
		input := randMatrix(2, 4)

		// Copies only: captured into a hipGraph on HIP 5.2.3.
		rec, err := tk.Record(func() error {
			if err := tk.UploadFloat32(src, input); err != nil {
				return err
			}
			return tk.CopyBuffer(dst, src)
		})
		require.NoError(t, err)
		graphs, fallbacks := rec.Graphs()
		require.Empty(t, fallbacks)
		require.Equal(t, 1, graphs, "the copies are one hipGraph")
		require.NoError(t, tk.UploadFloat32(src, randMatrix(3, 4)))
		require.NoError(t, tk.Fill(dst, 0))
		require.NoError(t, rec.Replay())
		got, err := dst.Float32s()
		require.NoError(t, err)
		require.Equal(t, input, got, "the replayed hipGraph uploaded and copied")
		require.NoError(t, rec.Close())

		// Kernels and gemm: not captured on HIP 5.2, replayed in order.
		x, err := d.FromFloat32(4, 4, randMatrix(4, 4))
		require.NoError(t, err)
		y, err := d.Empty(4, 4, Float32)
		require.NoError(t, err)
		z, err := d.Empty(4, 4, Float32)
		require.NoError(t, err)
		rec, err = tk.Record(func() error {
			if err := tk.MulInto(y, x, x); err != nil {
				return err
			}
			return tk.MatMulInto(z, y, x, false, false)
		})
		require.NoError(t, err)
		graphs, fallbacks = rec.Graphs()
		require.Zero(t, graphs)
		require.Len(t, fallbacks, 1)
		require.ErrorContains(t, fallbacks[0], "captured from HIP 5.3")
		t.Logf("fallback: %v", fallbacks[0])
		require.NoError(t, rec.Replay())
		require.NoError(t, rec.Close())
	})
}

// What HIP 5.2.3 does when rocsync captures a kernel launch anyway (the
// test-only switch): hipModuleLaunchKernel runs the kernel on the stream
// at capture, hipStreamEndCapture and hipGraphInstantiate succeed, and the
// graph lacks the kernel, so a replay does not compute. This is why
// rocsync does not capture kernels on HIP before 5.3.
func TestHIPGraphLacksModuleLaunchOnHIP52OnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		testhooks.ForceHIPCapture.Store(true)
		defer testhooks.ForceHIPCapture.Store(false)
		d := openSimulatedROCm(t, Unified)[0]
		defer func() { require.NoError(t, d.Close()) }()
		tk := d.DefaultTask()
		x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
		require.NoError(t, err)
		y, err := d.FromFloat32(1, 4, []float32{0, 0, 0, 0})
		require.NoError(t, err)
		rec, err := tk.Record(func() error { return tk.MulInto(y, x, x) })
		require.NoError(t, err)
		graphs, fallbacks := rec.Graphs()
		t.Logf("forced capture on HIP 5.2.3: graphs %d, fallbacks %v", graphs, fallbacks)
		require.Equal(t, 1, graphs, "HIP 5.2.3 ends and instantiates the capture without complaint")
		got, err := y.Float32s()
		require.NoError(t, err)
		t.Logf("after capture, before any replay: y = %v", got)
		require.Equal(t, []float32{1, 4, 9, 16}, got, "the kernel ran at capture")
		require.NoError(t, tk.Fill(y, 0))
		require.NoError(t, rec.Replay())
		got, err = y.Float32s()
		require.NoError(t, err)
		t.Logf("after a replay of the graph: y = %v", got)
		require.Equal(t, []float32{0, 0, 0, 0}, got, "the graph lacks the kernel")
		require.NoError(t, rec.Close())
	})
}

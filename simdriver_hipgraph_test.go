//go:build linux && (amd64 || arm64)

package rocsync

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/testhooks"
)

// hipGraph replay on Debian's real HIP 5.2.3 over the simulated driver.
// HIP 5.2 does not capture hipModuleLaunchKernel (rocsync's kernels under
// Unified, and simblas's gemm), and its graphs of copies replay slower
// than the calls: rocsync replays HIP 5.2's stream segments as their
// recorded calls in order, and says why. Captured anyway (the test-only
// switch), a segment of copies alone is one hipGraph that replays what
// the eager copies did: the bindings work on the real HIP.
func TestHIPGraphReplayOnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		testhooks.ForceHIPCapture.Store(true)
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
		testhooks.ForceHIPCapture.Store(false)

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
		require.ErrorIs(t, fallbacks[0], rocmdev.ErrNotCaptured)
		require.ErrorContains(t, fallbacks[0], "HIP 50221153 does not capture hipModuleLaunchKernel")
		t.Logf("fallback: %v", fallbacks[0])
		require.NoError(t, rec.Replay())
		require.NoError(t, rec.Close())
	})
}

// What HIP 5.2.3 does when rocsync captures a kernel launch anyway (the
// test-only switch), for rocsync's kernel under Unified and simblas's
// gemm: hipModuleLaunchKernel runs it on the stream at capture, no call
// reports an error (hipStreamBeginCapture, hipStreamEndCapture,
// hipGraphInstantiate, hipGraphLaunch all return hipSuccess), and the
// graph lacks it, so a replay does not compute. This is why
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

		// simblas's gemm (hipModuleLaunchKernel on the handle's stream,
		// rebound to the capture stream by rocblas_set_stream): the same.
		a, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
		require.NoError(t, err)
		c, err := d.FromFloat32(2, 2, []float32{0, 0, 0, 0})
		require.NoError(t, err)
		rec, err = tk.Record(func() error { return tk.MatMulInto(c, a, a, false, false) })
		require.NoError(t, err)
		graphs, fallbacks = rec.Graphs()
		require.Equal(t, 1, graphs, "%v", fallbacks)
		want, err := c.Float32s()
		require.NoError(t, err)
		require.NotEqual(t, []float32{0, 0, 0, 0}, want, "the gemm ran at capture")
		require.NoError(t, tk.Fill(c, 0))
		require.NoError(t, rec.Replay())
		got, err = c.Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{0, 0, 0, 0}, got, "the graph lacks the gemm")
		require.NoError(t, rec.Close())
	})
}

// TestHIPGraphTimingOnSimulatedDriver is a benchmark, not a test: with
// ROCSYNC_SIMDRIVER_TIMING=1 it times, in a child over Debian's HIP 5.2.3
// and the simulated driver, the host's cost to submit a 99-copy chain
// under Unified: eager, replayed as a hipGraph, and replayed as the
// in-order re-issue of the recorded calls; five alternated rounds of 200
// iterations each (the device drained every 10, untimed), medians logged.
// It asserts nothing about time. (Copies, because HIP 5.2 does not
// capture kernel launches; the hipGraph is made with the test-only switch,
// as rocsync makes none on HIP 5.2.)
func TestHIPGraphTimingOnSimulatedDriver(t *testing.T) {
	if !kfdsim.InChild(t) {
		if os.Getenv("ROCSYNC_SIMDRIVER_TIMING") == "" {
			t.Skip("a benchmark: set ROCSYNC_SIMDRIVER_TIMING=1")
		}
		parentOfSimulatedDriver(t)
		out := kfdsim.Run(t, simulatedSuiteRuns[0].gpus, t.Name(), kfdsim.Options{Release: simRelease(t), Env: simblasEnv(t)})
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "timing:") {
				t.Log(strings.TrimSpace(l))
			}
		}
		return
	}
	e, err := kfdsim.RegisterExecutor("")
	require.NoError(t, err)
	defer e.Close()
	d := openSimulatedROCm(t, Unified)[0]
	defer func() { require.NoError(t, d.Close()) }()
	tk := d.DefaultTask()
	a, err := d.FromFloat32(1, 256, make([]float32, 256))
	require.NoError(t, err)
	b, err := d.Empty(1, 256, Float32)
	require.NoError(t, err)
	chain := func() error {
		for i := range chainLen {
			src, dst := a, b
			if i%2 == 1 {
				src, dst = b, a
			}
			if err := tk.CopyBuffer(dst, src); err != nil {
				return err
			}
		}
		return nil
	}
	steps := map[string]func() error{"eager": chain}
	for _, mode := range []string{"reissue", "hipgraph"} {
		testhooks.SkipHIPCapture.Store(mode == "reissue")
		testhooks.ForceHIPCapture.Store(mode == "hipgraph") // HIP 5.2: not by default
		rec, err := tk.Record(chain)
		testhooks.SkipHIPCapture.Store(false)
		testhooks.ForceHIPCapture.Store(false)
		require.NoError(t, err)
		defer func() { require.NoError(t, rec.Close()) }()
		graphs, _ := rec.Graphs()
		require.Equal(t, map[string]int{"reissue": 0, "hipgraph": 1}[mode], graphs, mode)
		steps[mode] = rec.Replay
	}
	modes := []string{"eager", "reissue", "hipgraph"}
	times := map[string][]time.Duration{}
	for range 5 {
		for _, mode := range modes {
			step := steps[mode]
			require.NoError(t, step())
			require.NoError(t, tk.Synchronize())
			var spent time.Duration
			for i := range 200 {
				start := time.Now()
				require.NoError(t, step())
				spent += time.Since(start)
				if i%10 == 9 {
					require.NoError(t, tk.Synchronize())
				}
			}
			times[mode] = append(times[mode], spent/200)
		}
	}
	for _, mode := range modes {
		ts := times[mode]
		slices.Sort(ts)
		t.Logf("timing: %s: median %v per 99-copy chain (%v per copy); rounds %v", mode, ts[len(ts)/2], ts[len(ts)/2]/chainLen, ts)
	}
}

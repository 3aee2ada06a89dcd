//go:build linux && (amd64 || arm64)

package rocsync

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/kernels"
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

		// Kernels and gemm: not captured on HIP before 5.3, replayed in
		// order; one hipGraph from HIP 5.3 on, whose hipModuleLaunchKernel
		// is captured (hip.HIPVersionModuleLaunchCaptured).
		xs := randMatrix(4, 4)
		x, err := d.FromFloat32(4, 4, xs)
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
		_, hipVersion := simulatedRuntimeVersions(t)
		if hipVersion < hip.HIPVersionModuleLaunchCaptured {
			require.Zero(t, graphs)
			require.Len(t, fallbacks, 1)
			require.ErrorIs(t, fallbacks[0], rocmdev.ErrNotCaptured)
			require.ErrorContains(t, fallbacks[0], fmt.Sprintf("HIP %d does not capture hipModuleLaunchKernel", hipVersion))
			t.Logf("fallback: %v", fallbacks[0])
		} else {
			require.Empty(t, fallbacks, "HIP %d captures hipModuleLaunchKernel", hipVersion)
			require.Equal(t, 1, graphs, "the kernel and the gemm are one hipGraph on HIP %d", hipVersion)
		}
		require.NoError(t, tk.Fill(z, 0))
		require.NoError(t, rec.Replay())
		got, err = z.Float32s()
		require.NoError(t, err)
		// z = (x∘x)·x
		for i := range 4 {
			for j := range 4 {
				var want float64
				for k := range 4 {
					want += float64(xs[4*i+k]) * float64(xs[4*i+k]) * float64(xs[4*k+j])
				}
				require.InDelta(t, want, float64(got[4*i+j]), 1e-3*(1+math.Abs(want)), "z[%d,%d] after the replay", i, j)
			}
		}
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
		_, hipVersion := simulatedRuntimeVersions(t)
		if hipVersion >= hip.HIPVersionModuleLaunchCaptured {
			hipGraphHasModuleLaunch(t, d, x, y)
			return
		}
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

// hipGraphHasModuleLaunch is TestHIPGraphLacksModuleLaunchOnHIP52's
// counterpart on HIP 5.3 and later, which capture hipModuleLaunchKernel
// (hip.HIPVersionModuleLaunchCaptured): the kernel and simblas's gemm do
// not run at capture, the graph holds them, and each replay computes.
func hipGraphHasModuleLaunch(t *testing.T, d *Device, x, y *Array) {
	tk := d.DefaultTask()
	rec, err := tk.Record(func() error { return tk.MulInto(y, x, x) })
	require.NoError(t, err)
	graphs, fallbacks := rec.Graphs()
	require.Equal(t, 1, graphs, "%v", fallbacks)
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{0, 0, 0, 0}, got, "the kernel did not run at capture")
	require.NoError(t, rec.Replay())
	got, err = y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9, 16}, got, "the graph holds the kernel")
	require.NoError(t, rec.Close())

	a, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	c, err := d.FromFloat32(2, 2, []float32{0, 0, 0, 0})
	require.NoError(t, err)
	rec, err = tk.Record(func() error { return tk.MatMulInto(c, a, a, false, false) })
	require.NoError(t, err)
	graphs, fallbacks = rec.Graphs()
	require.Equal(t, 1, graphs, "%v", fallbacks)
	got, err = c.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{0, 0, 0, 0}, got, "the gemm did not run at capture")
	require.NoError(t, rec.Replay())
	got, err = c.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{7, 10, 15, 22}, got, "the graph holds the gemm")
	require.NoError(t, rec.Close())
}

// simulatedRuntimeVersions are the ROCr and HIP versions of the release
// the child runs (kernels.ROCrVersion from hsa_system_get_info's build
// version, hipRuntimeGetVersion).
func simulatedRuntimeVersions(t *testing.T) (kernels.ROCrVersion, int) {
	t.Helper()
	h, err := hsa.Open()
	require.NoError(t, err)
	build, err := h.BuildVersion()
	require.NoError(t, err)
	rocr, err := kernels.ParseROCrBuildVersion(build)
	require.NoError(t, err, "%q", build)
	rt, err := hip.Open()
	require.NoError(t, err)
	v, err := rt.RuntimeVersion()
	require.NoError(t, err)
	return rocr, v
}

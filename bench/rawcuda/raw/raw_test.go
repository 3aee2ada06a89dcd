package raw

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/bench/internal/measure"
	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakelib.Cleanup()
	os.Exit(code)
}

// fakeCUDA points the bindings at the fake libcuda and libcublas (host
// memory, kernels and sgemm run on the CPU, synchronously), or skips.
func fakeCUDA(t *testing.T) {
	t.Helper()
	p, err := fakelib.Build()
	if errors.Is(err, fakelib.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(cuda.EnvLibCUDA, p.CUDA)
	t.Setenv(cublas.EnvLibCUBLAS, p.CUBLAS)
}

func TestValidate(t *testing.T) {
	good := Config{N: 8, Iters: 1, Repeat: 3, Programs: Programs}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Config{
		{N: 0, Iters: 1, Repeat: 3},
		{N: 8, Iters: 0, Repeat: 3},
		{N: 8, Iters: 1, Warmup: -1, Repeat: 3},
		{N: 8, Iters: 1, Repeat: 0},
		{N: 8, Iters: 1, Repeat: 3, Programs: []string{"mixed"}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
		if _, err := Run(bad); err == nil {
			t.Errorf("%+v: Run ran", bad)
		}
	}
}

func TestRunWithoutDriver(t *testing.T) {
	t.Setenv(cuda.EnvLibCUDA, filepath.Join(t.TempDir(), "libcuda.so.1"))
	if _, err := Run(Config{N: 8, Iters: 1, Repeat: 3, Programs: Programs}); !errors.Is(err, cuda.ErrNoDriver) {
		t.Fatalf("got %v, want cuda.ErrNoDriver", err)
	}
}

// Every program on the fake libcuda and libcublas (host memory, kernels
// and sgemm on the CPU), checked against the CPU reference by Run.
func TestRunOnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	for _, perCall := range []bool{false, true} {
		out, err := Run(Config{N: 8, Iters: 3, Warmup: 1, Repeat: 2, Seed: 1, PerCall: perCall, Programs: Programs})
		if err != nil {
			t.Fatal(err)
		}
		if out.Meta.Device == "" || out.Meta.ContextPerCall != perCall || len(out.Results) != len(Programs) {
			t.Fatalf("%+v", out)
		}
		sums := map[string]float64{}
		for _, r := range out.Results {
			if r.TotalMedianUS <= 0 || r.Checksum == 0 || r.MaxRelErr > 1e-5 || r.Iterations != 3 {
				t.Errorf("%+v", r)
			}
			sums[r.Program] = r.Checksum
		}
		// The three mixed shapes compute the same thing.
		if sums["mixed/event"] != sums["mixed/one-stream"] || sums["mixed/host-wait"] != sums["mixed/one-stream"] {
			t.Errorf("mixed checksums differ: %v", sums)
		}
	}
}

// The CUDA-graph replay on the fake libcuda, which records a capturing
// stream's launches and runs them at cuGraphLaunch: the kernel programs
// replay to the eager result, and the replay's host side allocates
// nothing. (The fake cuBLAS does not take part in captures, so matmul and
// mixed/one-stream are captured only on a GPU.)
func TestGraphReplayOnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	for _, perCall := range []bool{false, true} {
		out, err := Run(Config{N: 8, Iters: 5, Warmup: 1, Repeat: 2, Seed: 1, PerCall: perCall, Graph: true,
			Programs: []string{"elementwise", "chain99", "mixed/event"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Results {
			switch r.Program {
			case "mixed/event":
				if r.GraphTotalMedianUS != 0 || r.GraphUnavailableCause != "" {
					t.Errorf("a two-stream program was replayed: %+v", r)
				}
			default:
				if r.GraphTotalMedianUS <= 0 || r.GraphLaunchMedianUS <= 0 || r.GraphChecksum != r.Checksum || r.Checksum == 0 {
					t.Errorf("replay: %+v", r)
				}
				if !raceEnabled && r.GraphMallocsPerIter > 0.5 && replayAllocs(t, r.Program, perCall) > 0.5 {
					t.Errorf("%s: a replay allocates %v times", r.Program, r.GraphMallocsPerIter)
				}
			}
		}
		if out.Results[1].Ops != 99 || out.Results[0].Ops != 3 {
			t.Errorf("ops per iteration: %d, %d", out.Results[0].Ops, out.Results[1].Ops)
		}
		var buf strings.Builder
		WriteText(&buf, out)
		if !strings.Contains(buf.String(), "CUDA-graph replay") {
			t.Errorf("no replay table:\n%s", buf.String())
		}
	}
}

// replayAllocs measures one program's replay allocations again, three
// times, and returns the fewest: the count is the process's (MemStats),
// so an allocation of another goroutine inside a window counts too (seen
// once in CI, loaded: 2.6 per replay, then 0 in every rerun); a replay
// that allocates does so in every window.
func replayAllocs(t *testing.T, program string, perCall bool) float64 {
	t.Helper()
	least := math.Inf(1)
	for range 3 {
		out, err := Run(Config{N: 8, Iters: 20, Warmup: 2, Repeat: 2, Seed: 1, PerCall: perCall, Graph: true,
			Programs: []string{program}})
		if err != nil {
			t.Fatal(err)
		}
		least = min(least, out.Results[0].GraphMallocsPerIter)
	}
	return least
}

// A capture records instead of running, and the fake enforces the
// driver's rules around it: no synchronization of a capturing stream, no
// second capture, no replay of a destroyed graph.
func TestGraphBindingsOnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g, err := Open(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	prog, err := g.Prepare("elementwise", 4, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	if _, _, err := prog.Replay(); err == nil {
		t.Fatal("replay before capture")
	}
	lib := g.lib
	if err := lib.BeginCapture(prog.final, cuda.CaptureModeThreadLocal); err != nil {
		t.Fatal(err)
	}
	if err := lib.BeginCapture(prog.final, cuda.CaptureModeThreadLocal); !errors.Is(err, &cuda.Error{Code: 401}) {
		t.Fatalf("second capture: %v", err)
	}
	if err := lib.StreamSynchronize(prog.final); !errors.Is(err, &cuda.Error{Code: 900}) {
		t.Fatalf("synchronizing a capturing stream: %v", err)
	}
	if err := prog.body(); err != nil {
		t.Fatal(err)
	}
	graph, err := lib.EndCapture(prog.final)
	if err != nil || graph == 0 {
		t.Fatal(graph, err)
	}
	if _, err := lib.EndCapture(prog.final); !errors.Is(err, &cuda.Error{Code: 401}) {
		t.Fatalf("ending no capture: %v", err)
	}
	exec, err := lib.GraphInstantiate(graph)
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.GraphDestroy(graph); err != nil {
		t.Fatal(err)
	}
	// Nothing ran during the capture; the replay computes the result.
	if err := lib.GraphLaunch(exec, prog.final); err != nil {
		t.Fatal(err)
	}
	if _, _, err := prog.Verify(); err != nil {
		t.Fatal(err)
	}
	if err := lib.GraphExecDestroy(exec); err != nil {
		t.Fatal(err)
	}
	if err := lib.GraphLaunch(exec, prog.final); !errors.Is(err, &cuda.Error{Code: 400}) {
		t.Fatalf("launching a destroyed graph: %v", err)
	}
}

// mixedShapes alternates iterations of the mixed programs' raw shapes in
// one process, one GPU (and cuBLAS handle) per shape on the calling OS
// thread, and returns per shape the median dispatch and total times (µs):
// what the raw driver pays for DeviceBridge's crossings (mixed/event: a
// cuEventRecord and a cuStreamWaitEvent each) against Unified's one stream
// (mixed/one-stream), measured side by side.
func mixedShapes(tb testing.TB, n, iters int) map[string][2]float64 {
	tb.Helper()
	shapes := []string{"mixed/one-stream", "mixed/event", "mixed/host-wait"}
	progs := make([]*Program, len(shapes))
	for i, name := range shapes {
		g, err := Open(0, false)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = g.Close() })
		if progs[i], err = g.Prepare(name, n, 3, 1); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = progs[i].Close() })
	}
	times := make([][2][]float64, len(shapes))
	for it := -iters / 10; it < iters; it++ { // a tenth more as warm-up
		for i, p := range progs {
			d, tot, err := p.Iterate()
			if err != nil {
				tb.Fatal(err)
			}
			if it >= 0 {
				times[i][0] = append(times[i][0], measure.Micros(d))
				times[i][1] = append(times[i][1], measure.Micros(tot))
			}
		}
	}
	out := map[string][2]float64{}
	for i, name := range shapes {
		out[name] = [2]float64{measure.Quantile(times[i][0], 0.5), measure.Quantile(times[i][1], 0.5)}
	}
	return out
}

func TestMixedShapesOnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := mixedShapes(t, 8, 20)
	for name, v := range m {
		if v[0] <= 0 || v[1] < v[0] {
			t.Errorf("%s: dispatch %v, total %v", name, v[0], v[1])
		}
	}
}

// BenchmarkGPUMixedShapes (ROCSYNC_GPU=1) is the floor under DeviceBridge
// against Unified on mixed: the raw driver's two shapes alternating in one
// process. It reports each shape's median dispatch and total (µs per
// iteration), the event shape over the one-stream shape, and the host
// cost per crossing of the event calls (the dispatch difference over the
// 3 crossings). b.N iterations of each shape.
func BenchmarkGPUMixedShapes(b *testing.B) {
	if os.Getenv("ROCSYNC_GPU") != "1" {
		b.Skip("set ROCSYNC_GPU=1 to run on an NVIDIA GPU")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := mixedShapes(b, 128, b.N)
	one, ev, hw := m["mixed/one-stream"], m["mixed/event"], m["mixed/host-wait"]
	b.ReportMetric(one[1], "one-stream-total-µs")
	b.ReportMetric(ev[1], "event-total-µs")
	b.ReportMetric(hw[1], "host-wait-total-µs")
	b.ReportMetric(ev[1]/one[1], "event/one-stream-total")
	b.ReportMetric(one[0], "one-stream-dispatch-µs")
	b.ReportMetric(ev[0], "event-dispatch-µs")
	b.ReportMetric((ev[0]-one[0])/3, "event-calls-µs/crossing")
}

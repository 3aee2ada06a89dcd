package main

// The paired replay mode (-paired-raw -replay): for each program that both
// sides can replay, four runs alternate in one process, one iteration each
// in turn: the raw driver's eager iteration, the raw driver's CUDA-graph
// replay of the same sequence (stream capture, cuGraphLaunch), rocsync's
// eager iteration and rocsync's replay of a recording made once
// (Task.Record, Recording.Replay). Alternating keeps the four under the
// same machine state, as -paired-raw does for two, so that the target
// ratios (replay against the raw graph, ≤ 1.05×; one replay's host cost
// against cuGraphLaunch's, ≤ 1 µs more) resolve a few percent.
//
// The raw graph is the program's single-stream shape (raw.Program.Graphable):
// the program itself for matmul, elementwise and chain99, and
// mixed/one-stream for mixed under every policy, since a graph orders its
// nodes by dependency and keeps no streams; rocsync's replay of mixed under
// DeviceSide or DeviceBridge is several segments ordered by host or device
// waits (its segments and graphs are reported), which is what the ratio
// then measures.

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/internal/measure"
	"github.com/rocsync/rocsync/bench/rawcuda/raw"
)

// rawGraphFor is the raw program whose CUDA graph replays prog's sequence:
// its single-stream shape.
func rawGraphFor(prog string) string {
	if prog == "mixed" {
		return "mixed/one-stream"
	}
	return prog
}

// replayPairResult is one program under one policy, its four runs. Times
// are in µs.
type replayPairResult struct {
	Program         string `json:"program"`
	Policy          string `json:"policy"`
	RawProgram      string `json:"raw_program"`
	RawGraphProgram string `json:"raw_graph_program"`
	Shape           string `json:"shape"`
	N               int    `json:"n"`
	Iterations      int    `json:"iterations"`
	Warmup          int    `json:"warmup"`
	// OpsPerIter is the kernel launches and gemms of one iteration (raw);
	// RocRecordedOps what rocsync's recording holds (the same), in
	// RocSegments driver submissions of which RocGraphs replay as CUDA
	// graphs; RocGraphFallbacks says why a stream segment was not captured.
	OpsPerIter        int      `json:"ops_per_iter"`
	RocRecordedOps    int      `json:"rocsync_recorded_ops"`
	RocSegments       int      `json:"rocsync_replay_segments"`
	RocGraphs         int      `json:"rocsync_replay_graphs"`
	RocGraphFallbacks []string `json:"rocsync_graph_fallbacks,omitempty"`

	// Totals: submit (or launch) and the final synchronization.
	RawEagerTotalMedianUS  float64 `json:"raw_eager_total_median_us"`
	RawEagerTotalP90US     float64 `json:"raw_eager_total_p90_us"`
	RawGraphTotalMedianUS  float64 `json:"raw_graph_total_median_us"`
	RawGraphTotalP90US     float64 `json:"raw_graph_total_p90_us"`
	RocEagerTotalMedianUS  float64 `json:"rocsync_eager_total_median_us"`
	RocEagerTotalP90US     float64 `json:"rocsync_eager_total_p90_us"`
	RocReplayTotalMedianUS float64 `json:"rocsync_replay_total_median_us"`
	RocReplayTotalP90US    float64 `json:"rocsync_replay_total_p90_us"`

	// ReplayOverRawGraph is rocsync's replay total median over the raw
	// graph's (the issue's ≤ 1.05× target); PairReplayOverRawGraph the
	// median over rounds of the same ratio within a round;
	// ReplayOverEager rocsync's replay over its own eager run;
	// RawGraphOverEager and EagerOverRaw put them in context.
	ReplayOverRawGraph     float64 `json:"replay_over_raw_graph"`
	PairReplayOverRawGraph float64 `json:"pair_replay_over_raw_graph_median"`
	ReplayOverEager        float64 `json:"rocsync_replay_over_eager"`
	RawGraphOverEager      float64 `json:"raw_graph_over_eager"`
	EagerOverRaw           float64 `json:"rocsync_eager_over_raw_eager"`

	// The host cost of one replay call: cuGraphLaunch on the raw side,
	// Recording.Replay() on rocsync's. ReplayHostOverRawUS is the
	// difference of the medians (the issue's ≤ 1 µs target),
	// PairReplayHostDiffUS the median of the differences within a round.
	RawLaunchMedianUS    float64 `json:"raw_graph_launch_median_us"`
	RawLaunchP90US       float64 `json:"raw_graph_launch_p90_us"`
	RocReplayCallMedUS   float64 `json:"rocsync_replay_call_median_us"`
	RocReplayCallP90US   float64 `json:"rocsync_replay_call_p90_us"`
	ReplayHostOverRawUS  float64 `json:"replay_host_over_raw_launch_us"`
	PairReplayHostDiffUS float64 `json:"pair_replay_host_diff_median_us"`
	// The eager dispatch (submit) medians, for the eager per-op costs.
	RawEagerDispatchMedianUS float64 `json:"raw_eager_dispatch_median_us"`
	RocEagerDispatchMedianUS float64 `json:"rocsync_eager_dispatch_median_us"`

	// rocsync's waits per replay and per eager iteration (before the
	// final Synchronize).
	RocReplayHostWaitsPerIter   float64 `json:"rocsync_replay_host_waits_per_iter"`
	RocReplayDeviceWaitsPerIter float64 `json:"rocsync_replay_device_waits_per_iter"`
	RocEagerHostWaitsPerIter    float64 `json:"rocsync_eager_host_waits_per_iter"`
	RawHostWaitsPerIter         float64 `json:"raw_eager_host_waits_per_iter"`

	// Go allocations: of the measured loop per round (all four), and of
	// each run alone over AllocIters iterations.
	LoopMallocsPerRound     float64 `json:"loop_go_mallocs_per_round"`
	LoopGCs                 uint32  `json:"loop_gcs"`
	RawEagerMallocsPerIter  float64 `json:"raw_eager_go_mallocs_per_iter"`
	RawGraphMallocsPerIter  float64 `json:"raw_graph_go_mallocs_per_iter"`
	RocEagerMallocsPerIter  float64 `json:"rocsync_eager_go_mallocs_per_iter"`
	RocReplayMallocsPerIter float64 `json:"rocsync_replay_go_mallocs_per_iter"`

	// Checksums of the four runs' results. The raw eager and graph results
	// are checked against a float64 CPU reference (raw.Program.Verify);
	// SameChecksum says all four are equal.
	RawChecksum       float64 `json:"raw_checksum"`
	RawGraphChecksum  float64 `json:"raw_graph_checksum"`
	RocChecksum       float64 `json:"rocsync_checksum"`
	RocReplayChecksum float64 `json:"rocsync_replay_checksum"`
	SameChecksum      bool    `json:"same_checksum"`
	RawMaxRelErr      float64 `json:"raw_max_rel_err_vs_cpu"`

	// Start-up: rocsync's Open, first (eager) iteration and Record; the
	// raw side's capture and instantiation.
	RocOpenMS      float64 `json:"rocsync_open_ms"`
	RocFirstIterMS float64 `json:"rocsync_first_iteration_ms"`
	RocRecordMS    float64 `json:"rocsync_record_ms"`
	RawCaptureMS   float64 `json:"raw_capture_instantiate_ms"`
}

type pairedReplayOutput struct {
	Run   runMeta            `json:"run"`
	Meta  pairedMeta         `json:"meta"`
	Pairs []replayPairResult `json:"replay_pairs"`
}

// replayRounds is the order of the four runs (-replay-rounds). A replay's
// host cost depends on what ran just before it on the host: the eager
// iteration before it leaves its own data in the caches, and rocsync's
// eager ops touch more memory than the raw driver's. The orders tell that
// cost from the replay's own.
type replayRounds string

const (
	// roundsOwn: raw eager, raw graph, rocsync eager, rocsync replay;
	// each replay after its own side's eager iteration.
	roundsOwn replayRounds = "own"
	// roundsCrossed: raw eager, rocsync replay, rocsync eager, raw
	// graph; each replay after the other side's eager iteration.
	roundsCrossed replayRounds = "crossed"
	// roundsApart: raw graph and rocsync replay in turn, every round,
	// then raw eager and rocsync eager in turn, every round.
	roundsApart replayRounds = "apart"
)

func (o *replayRounds) String() string {
	if *o == "" {
		return string(roundsOwn)
	}
	return string(*o)
}

func (o *replayRounds) Set(v string) error {
	switch r := replayRounds(v); r {
	case roundsOwn, roundsCrossed, roundsApart:
		*o = r
		return nil
	}
	return fmt.Errorf("%q is not own, crossed or apart", v)
}

// roundsSaid is what the table's heading says of each order.
var roundsSaid = map[replayRounds]string{
	roundsOwn:     "rounds own: each replay after its own side's eager iteration",
	roundsCrossed: "rounds crossed: raw eager, rocsync replay, rocsync eager, raw graph (each replay after the other side's eager iteration)",
	roundsApart:   "rounds apart: the two replays in turn, then the two eager runs in turn",
}

// phases is the measured loop's shape: each phase runs its runs (indices
// into the four: raw eager, raw graph, rocsync eager, rocsync replay) in
// turn for every round, and the phases run one after the other.
func (o replayRounds) phases() [][]int {
	switch o {
	case roundsCrossed:
		return [][]int{{0, 3, 2, 1}}
	case roundsApart:
		return [][]int{{1, 3}, {0, 2}}
	}
	return [][]int{{0, 1, 2, 3}}
}

// run4 is one of a round's four runs: one iteration, its host time
// (submit, launch or replay call) and its total.
type run4 struct {
	name        string
	iterate     func() (host, total time.Duration, err error)
	host, total []float64
	mallocs     float64
}

// runPairedReplay is the whole paired replay mode: print a table (or
// JSON) and save JSON as the flags ask.
func runPairedReplay(cfg config, stdout io.Writer) error {
	out := &pairedReplayOutput{}
	var err error
	out.Run, out.Meta, out.Pairs, err = eachPair(cfg, 4,
		fmt.Sprintf("%d programs/policies: raw eager, raw graph, rocsync eager, rocsync replay in turn, %d+%d rounds each",
			len(cfg.pairs), cfg.warmup, cfg.iters),
		func(p pair) string {
			return fmt.Sprintf("%s %s replay against raw %s's CUDA graph", p.program, p.policy, rawGraphFor(p.program))
		},
		func(p pair) string {
			return fmt.Sprintf("%s under %s, replayed against raw %s", p.program, p.policy, rawGraphFor(p.program))
		},
		runReplayPair)
	if err != nil {
		return err
	}
	return emitPaired(cfg, stdout, out, printPairedReplay)
}

func runReplayPair(cfg config, g *raw.GPU, p pair, progress *progress) (r replayPairResult, err error) {
	prog, err := programByName(p.program)
	if err != nil {
		return r, err
	}
	r = replayPairResult{Program: p.program, Policy: p.policy.String(), RawProgram: p.raw, RawGraphProgram: rawGraphFor(p.program),
		Shape: prog.shape(cfg), N: cfg.n, Iterations: cfg.iters, Warmup: cfg.warmup}

	// The graph's program first, captured after one eager iteration
	// (cuBLAS sets its workspace up outside the capture). Preparing binds
	// the GPU's cuBLAS handle to the program's stream: a separate eager
	// program (mixed's two-stream shapes) is prepared after the capture,
	// which holds its gemms already.
	rg, err := g.Prepare(r.RawGraphProgram, cfg.n, cfg.repeat, cfg.seed)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, rg.Close()) }()
	if !rg.Graphable() {
		return r, fmt.Errorf("raw %s cannot be captured into one CUDA graph", r.RawGraphProgram)
	}
	if _, _, err := rg.Iterate(); err != nil {
		return r, err
	}
	t0 := time.Now()
	if err := rg.Capture(); err != nil {
		return r, fmt.Errorf("raw CUDA graph: %w", err)
	}
	r.RawCaptureMS = sinceMS(t0)
	re := rg
	if p.raw != r.RawGraphProgram {
		if re, err = g.Prepare(p.raw, cfg.n, cfg.repeat, cfg.seed); err != nil {
			return r, err
		}
		defer func() { err = errors.Join(err, re.Close()) }()
	}
	r.RawHostWaitsPerIter, r.OpsPerIter = re.HostWaitsPerIter(), re.Ops()

	roc, err := openRocSide(cfg, p.policy, prog, &r.RocOpenMS, &r.RocFirstIterMS)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, roc.close()) }()
	d, t, st := roc.d, roc.t, roc.st

	// The recording, made once (as -replay does) after the eager
	// iteration that loaded the kernels and set cuBLAS up. Its arrays are
	// its own: st.run reuses its temporaries' slice, so keep a copy.
	var recOut *rocsync.Array
	var recTemps []*rocsync.Array
	t0 = time.Now()
	rec, err := t.Record(func() error {
		out, temps, err := st.run(t)
		recOut, recTemps = out, slices.Clone(temps)
		return err
	})
	if err != nil {
		return r, errors.Join(fmt.Errorf("recording: %w", err), freeAll(recTemps))
	}
	r.RocRecordMS = sinceMS(t0)
	defer func() { err = errors.Join(err, rec.Close(), freeAll(recTemps)) }()
	r.RocRecordedOps, r.RocSegments = rec.Ops(), rec.Segments()
	var fallbacks []error
	r.RocGraphs, fallbacks = rec.Graphs()
	for _, f := range fallbacks {
		r.RocGraphFallbacks = append(r.RocGraphFallbacks, f.Error())
	}

	// rocsync's waits are counted around its runs, outside their timing.
	var replayWaits, replayDevWaits, eagerWaits uint64
	counting := false
	hostWaits := func(s rocsync.Stats) uint64 { return s.HostWaitsTotal() - s.HostWaitsFor(rocsync.ReasonSync) }
	runs := [4]run4{
		{name: "raw eager", iterate: re.Iterate},
		{name: "raw graph", iterate: rg.Replay},
		{name: "rocsync eager", iterate: func() (time.Duration, time.Duration, error) {
			var s0 rocsync.Stats
			if counting {
				s0 = d.Stats()
			}
			dispatch, total, _, err := roc.iterate(false)
			if counting {
				eagerWaits += hostWaits(d.Stats().Sub(s0))
			}
			return dispatch, total, err
		}},
		{name: "rocsync replay", iterate: func() (time.Duration, time.Duration, error) {
			var s0 rocsync.Stats
			if counting {
				s0 = d.Stats()
			}
			t0 := time.Now()
			if err := rec.Replay(); err != nil {
				return 0, 0, err
			}
			t1 := time.Now()
			if err := t.Synchronize(); err != nil {
				return 0, 0, err
			}
			t2 := time.Now()
			if counting {
				s := d.Stats().Sub(s0)
				replayWaits += hostWaits(s)
				replayDevWaits += s.DeviceWaits
			}
			return t1.Sub(t0), t2.Sub(t0), nil
		}},
	}
	for i := range runs {
		runs[i].host, runs[i].total = make([]float64, 0, cfg.iters), make([]float64, 0, cfg.iters)
	}

	phases := cfg.replayRounds.phases()
	for i := 0; i < cfg.warmup; i++ {
		for _, ph := range phases {
			for _, k := range ph {
				if _, _, err := runs[k].iterate(); err != nil {
					return r, fmt.Errorf("%s: %w", runs[k].name, err)
				}
			}
		}
		progress.step()
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	counting = true
	for p, ph := range phases {
		for i := 0; i < cfg.iters; i++ {
			for _, k := range ph {
				h, tot, err := runs[k].iterate()
				if err != nil {
					return r, fmt.Errorf("%s: %w", runs[k].name, err)
				}
				runs[k].host, runs[k].total = append(runs[k].host, measure.Micros(h)), append(runs[k].total, measure.Micros(tot))
			}
			if p == len(phases)-1 {
				progress.step()
			}
		}
	}
	counting = false
	runtime.ReadMemStats(&m1)
	it := float64(cfg.iters)
	r.LoopMallocsPerRound = float64(m1.Mallocs-m0.Mallocs) / it
	r.LoopGCs = m1.NumGC - m0.NumGC
	r.RocReplayHostWaitsPerIter, r.RocReplayDeviceWaitsPerIter = float64(replayWaits)/it, float64(replayDevWaits)/it
	r.RocEagerHostWaitsPerIter = float64(eagerWaits) / it

	// Allocations of each run alone, each after a collection and one
	// iteration outside the window: the collection runs the cleanups of
	// an earlier run's garbage (rocsync eager's arrays) before the window,
	// and the iteration refills the sync.Pools it emptied. A collection
	// inside the window still shows as a few allocations (sync.Pool
	// refills, in purego and in cuda's C-memory pool) in whatever run it
	// falls.
	n := allocIters(cfg)
	for k := range runs {
		var a0, a1 runtime.MemStats
		runtime.GC()
		if _, _, err := runs[k].iterate(); err != nil {
			return r, fmt.Errorf("%s: %w", runs[k].name, err)
		}
		runtime.ReadMemStats(&a0)
		for i := 0; i < n; i++ {
			if _, _, err := runs[k].iterate(); err != nil {
				return r, fmt.Errorf("%s: %w", runs[k].name, err)
			}
			progress.step()
		}
		runtime.ReadMemStats(&a1)
		runs[k].mallocs = float64(a1.Mallocs-a0.Mallocs) / float64(n)
	}
	fillReplayPairStats(&r, &runs)

	// The four results, each read right after a run of its own.
	if _, _, err := rg.Replay(); err != nil {
		return r, fmt.Errorf("raw graph: %w", err)
	}
	if r.RawGraphChecksum, _, err = rg.Verify(); err != nil {
		return r, fmt.Errorf("raw graph: %w", err)
	}
	if _, _, err := re.Iterate(); err != nil {
		return r, err
	}
	if r.RawChecksum, r.RawMaxRelErr, err = re.Verify(); err != nil {
		return r, err
	}
	if _, _, r.RocChecksum, err = roc.iterate(true); err != nil {
		return r, err
	}
	if _, _, err := runs[3].iterate(); err != nil {
		return r, err
	}
	vals, err := recOut.Float32s()
	if err != nil {
		return r, fmt.Errorf("reading the replay's result: %w", err)
	}
	r.RocReplayChecksum = measure.Checksum(vals)
	r.SameChecksum = r.RawChecksum == r.RawGraphChecksum && r.RawChecksum == r.RocChecksum && r.RawChecksum == r.RocReplayChecksum
	return r, nil
}

// fillReplayPairStats computes the quantiles and ratios from the four
// runs' per-round times (µs), in the order raw eager, raw graph, rocsync
// eager, rocsync replay.
func fillReplayPairStats(r *replayPairResult, runs *[4]run4) {
	rawE, rawG, rocE, rocR := &runs[0], &runs[1], &runs[2], &runs[3]
	q := measure.Quantile
	r.RawEagerTotalMedianUS, r.RawEagerTotalP90US = q(rawE.total, 0.5), q(rawE.total, 0.9)
	r.RawGraphTotalMedianUS, r.RawGraphTotalP90US = q(rawG.total, 0.5), q(rawG.total, 0.9)
	r.RocEagerTotalMedianUS, r.RocEagerTotalP90US = q(rocE.total, 0.5), q(rocE.total, 0.9)
	r.RocReplayTotalMedianUS, r.RocReplayTotalP90US = q(rocR.total, 0.5), q(rocR.total, 0.9)
	r.RawEagerDispatchMedianUS, r.RocEagerDispatchMedianUS = q(rawE.host, 0.5), q(rocE.host, 0.5)
	r.RawLaunchMedianUS, r.RawLaunchP90US = q(rawG.host, 0.5), q(rawG.host, 0.9)
	r.RocReplayCallMedUS, r.RocReplayCallP90US = q(rocR.host, 0.5), q(rocR.host, 0.9)

	r.ReplayOverRawGraph = r.RocReplayTotalMedianUS / r.RawGraphTotalMedianUS
	r.ReplayOverEager = r.RocReplayTotalMedianUS / r.RocEagerTotalMedianUS
	r.RawGraphOverEager = r.RawGraphTotalMedianUS / r.RawEagerTotalMedianUS
	r.EagerOverRaw = r.RocEagerTotalMedianUS / r.RawEagerTotalMedianUS
	r.ReplayHostOverRawUS = r.RocReplayCallMedUS - r.RawLaunchMedianUS
	r.PairReplayOverRawGraph, r.PairReplayHostDiffUS = pairMedian(rocR.total, rawG.total, over), pairMedian(rocR.host, rawG.host, minus)
	r.RawEagerMallocsPerIter, r.RawGraphMallocsPerIter = rawE.mallocs, rawG.mallocs
	r.RocEagerMallocsPerIter, r.RocReplayMallocsPerIter = rocE.mallocs, rocR.mallocs
}

func printPairedReplay(w io.Writer, out *pairedReplayOutput) {
	m := out.Meta
	fmt.Fprintf(w, "paired replay: raw eager, raw CUDA-graph replay, rocsync eager and rocsync replay (backend %s), one iteration each in turn; %s\n",
		m.Backend, roundsSaid[replayRounds(m.ReplayRounds)])
	printMachine(w, m)
	fmt.Fprintf(w, "%dx%d float32 (mixed: repeat %d); %d measured rounds after %d warm-up; mallocs per run from %d iterations alone; times in µs\n",
		m.N, m.N, m.Repeat, m.Iterations, m.Warmup, m.AllocIters)
	fmt.Fprintln(w, "total = submit (or launch, or Replay()) + final sync; the raw graph is the program's single-stream shape")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tpolicy\traw eager\traw graph\traw eager med\tp90\traw graph med\tp90\trocsync eager med\tp90\trocsync replay med\tp90\t"+
		"replay/raw graph\tpair med\treplay/eager\traw graph/eager\trocsync/raw eager\t")
	for _, r := range out.Pairs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n",
			r.Program, r.Policy, r.RawProgram, r.RawGraphProgram, r.RawEagerTotalMedianUS, r.RawEagerTotalP90US, r.RawGraphTotalMedianUS, r.RawGraphTotalP90US,
			r.RocEagerTotalMedianUS, r.RocEagerTotalP90US, r.RocReplayTotalMedianUS, r.RocReplayTotalP90US,
			r.ReplayOverRawGraph, r.PairReplayOverRawGraph, r.ReplayOverEager, r.RawGraphOverEager, r.EagerOverRaw)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nhost cost of one replay call: cuGraphLaunch (raw) and Recording.Replay() (rocsync), µs")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tpolicy\tops\tsegments\tgraphs\tcuGraphLaunch med\tp90\tReplay() med\tp90\tReplay() - launch\tpair diff med\t"+
		"replay host waits/it\tdevice waits/it\treplay mallocs/it\tgraph mallocs/it\teager mallocs/it\trecord ms\tcapture ms\tsame checksum\t")
	for _, r := range out.Pairs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%v\t\n",
			r.Program, r.Policy, r.OpsPerIter, r.RocSegments, r.RocGraphs, r.RawLaunchMedianUS, r.RawLaunchP90US, r.RocReplayCallMedUS, r.RocReplayCallP90US,
			r.ReplayHostOverRawUS, r.PairReplayHostDiffUS, r.RocReplayHostWaitsPerIter, r.RocReplayDeviceWaitsPerIter,
			r.RocReplayMallocsPerIter, r.RawGraphMallocsPerIter, r.RocEagerMallocsPerIter, r.RocRecordMS, r.RawCaptureMS, r.SameChecksum)
	}
	tw.Flush()
	for _, r := range out.Pairs {
		if !r.SameChecksum {
			fmt.Fprintf(w, "%s %s: checksums differ: raw eager %v, raw graph %v, rocsync eager %v, rocsync replay %v\n",
				r.Program, r.Policy, r.RawChecksum, r.RawGraphChecksum, r.RocChecksum, r.RocReplayChecksum)
		}
		for _, f := range r.RocGraphFallbacks {
			fmt.Fprintf(w, "%s %s: a rocsync segment replays its calls, not a graph: %s\n", r.Program, r.Policy, f)
		}
	}
}

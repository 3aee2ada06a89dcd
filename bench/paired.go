package main

// The paired mode (-paired-raw): rocsync against the same op sequences
// written directly on the CUDA driver API and cuBLAS (bench/rawcuda/raw),
// in one process, one raw iteration and one rocsync iteration in turn, so
// that both see the same machine state. Run separately, the two programs
// drift by tens of percent between runs on a VM, which hides a 10%
// overhead; paired, the ratio of the medians (and the median of the
// per-pair ratios) resolves it. With -replay, pairedreplay.go runs four
// in turn: raw eager, raw CUDA-graph replay, rocsync eager, rocsync replay.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/internal/measure"
	"github.com/rocsync/rocsync/bench/rawcuda/raw"
)

// pair is one rocsync program under one policy and the raw program of the
// same shape.
type pair struct {
	program string
	policy  rocsync.Policy
	raw     string
}

// defaultPairs are what -paired-raw runs when -policies is not given:
// DeviceSide on every seed program, and on mixed also DeviceBridge and
// Unified, each against the raw shape it reproduces.
var defaultPairs = []pair{
	{"matmul", rocsync.DeviceSide, "matmul"},
	{"elementwise", rocsync.DeviceSide, "elementwise"},
	{"mixed", rocsync.DeviceSide, "mixed/host-wait"},
	{"mixed", rocsync.DeviceBridge, "mixed/event"},
	{"mixed", rocsync.Unified, "mixed/one-stream"},
}

// defaultReplayPairs are what -paired-raw -replay runs when -policies is
// not given: the default pairs and chain99, the 99-op chain of the
// replay host-cost target.
var defaultReplayPairs = []pair{
	{"matmul", rocsync.DeviceSide, "matmul"},
	{"elementwise", rocsync.DeviceSide, "elementwise"},
	{"chain99", rocsync.DeviceSide, "chain99"},
	{"mixed", rocsync.DeviceSide, "mixed/host-wait"},
	{"mixed", rocsync.DeviceBridge, "mixed/event"},
	{"mixed", rocsync.Unified, "mixed/one-stream"},
}

// pairedPrograms are the programs that have a raw counterpart.
var pairedPrograms = []string{"matmul", "elementwise", "mixed", "chain99"}

// defaultPairsFor is defaultPairs, or with replay defaultReplayPairs.
func defaultPairsFor(replay bool) []pair {
	if replay {
		return defaultReplayPairs
	}
	return defaultPairs
}

// defaultPairedPrograms is -programs' default with -paired-raw: the
// default pairs' programs in their order (so chain99, 99 ops an
// iteration, only with -replay, whose host-cost target names it).
func defaultPairedPrograms(replay bool) []string {
	var progs []string
	for _, p := range defaultPairsFor(replay) {
		if !slices.Contains(progs, p.program) {
			progs = append(progs, p.program)
		}
	}
	return progs
}

// checkPaired says why prog cannot run in the paired mode: it has no raw
// counterpart.
func checkPaired(prog string) error {
	if !slices.Contains(pairedPrograms, prog) {
		return fmt.Errorf("-paired-raw: program %q has no raw counterpart (want %s)", prog, strings.Join(pairedPrograms, ", "))
	}
	return nil
}

// rawShapeFor is the raw program with the shape of prog under pol: one
// stream for matmul and elementwise (every policy but WaitAlways makes no
// wait inside them); for mixed, a host wait at each crossing (DeviceSide,
// SkipSameQueue), an event (DeviceBridge) or one stream (Unified).
func rawShapeFor(prog string, pol rocsync.Policy) (string, error) {
	if err := checkPaired(prog); err != nil {
		return "", err
	}
	switch {
	case pol == rocsync.WaitAlways:
		return "", fmt.Errorf("-paired-raw: %s has no raw counterpart (bench/rawcuda has no host wait after every op)", pol)
	case prog != "mixed":
		return prog, nil
	case pol == rocsync.DeviceSide || pol == rocsync.SkipSameQueue:
		return "mixed/host-wait", nil
	case pol == rocsync.DeviceBridge:
		return "mixed/event", nil
	case pol == rocsync.Unified:
		return "mixed/one-stream", nil
	}
	return "", fmt.Errorf("-paired-raw: no raw shape for %s under %s", prog, pol)
}

// pairsFor turns the -programs and -policies lists into pairs: the default
// pairs (for the programs chosen; with replay, defaultReplayPairs) when
// -policies was not given, else every program under every policy.
func pairsFor(progs []string, pols []rocsync.Policy, policiesSet, replay bool) ([]pair, error) {
	var out []pair
	if !policiesSet {
		for _, p := range defaultPairsFor(replay) {
			if slices.Contains(progs, p.program) {
				out = append(out, p)
			}
		}
		for _, prog := range progs {
			if err := checkPaired(prog); err != nil {
				return nil, err
			}
			if !slices.ContainsFunc(out, func(p pair) bool { return p.program == prog }) {
				// chain99 in the eager mode: DeviceSide, as the seed programs.
				out = append(out, pair{prog, rocsync.DeviceSide, prog})
			}
		}
		return out, nil
	}
	for _, prog := range progs {
		for _, pol := range pols {
			r, err := rawShapeFor(prog, pol)
			if err != nil {
				return nil, err
			}
			out = append(out, pair{prog, pol, r})
		}
	}
	return out, nil
}

// pairedMeta is the machine, the start-up costs and the run's settings.
type pairedMeta struct {
	Raw        raw.Meta `json:"raw"`
	Backend    string   `json:"backend"`
	N          int      `json:"n"`
	Repeat     int      `json:"repeat"`
	Iterations int      `json:"iterations"`
	Warmup     int      `json:"warmup"`
	AllocIters int      `json:"alloc_iterations"`
	RawPerCall bool     `json:"raw_context_per_call"`
	// ReplayRounds is -replay-rounds, in the paired replay mode.
	ReplayRounds string `json:"replay_rounds,omitempty"`
	GoVersion    string `json:"go_version"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	GOGC         string `json:"gogc"`
}

// pairResult is one pair. Times are in µs, ratios are rocsync over raw.
type pairResult struct {
	Program    string `json:"program"`
	Policy     string `json:"policy"`
	RawProgram string `json:"raw_program"`
	Shape      string `json:"shape"`
	N          int    `json:"n"`
	Iterations int    `json:"iterations"`
	Warmup     int    `json:"warmup"`

	RawDispatchMedianUS float64 `json:"raw_dispatch_median_us"`
	RawDispatchP90US    float64 `json:"raw_dispatch_p90_us"`
	RawTotalMedianUS    float64 `json:"raw_total_median_us"`
	RawTotalP90US       float64 `json:"raw_total_p90_us"`
	RawTotalP99US       float64 `json:"raw_total_p99_us"`
	RawTotalMinUS       float64 `json:"raw_total_min_us"`

	RocDispatchMedianUS float64 `json:"rocsync_dispatch_median_us"`
	RocDispatchP90US    float64 `json:"rocsync_dispatch_p90_us"`
	RocTotalMedianUS    float64 `json:"rocsync_total_median_us"`
	RocTotalP90US       float64 `json:"rocsync_total_p90_us"`
	RocTotalP99US       float64 `json:"rocsync_total_p99_us"`
	RocTotalMinUS       float64 `json:"rocsync_total_min_us"`

	// TotalRatio is the ratio of the total medians (the target);
	// PairRatioMedian the median over iterations of rocsync's total over
	// the raw total just before it; DiffMedianUS the median of their
	// difference.
	TotalRatio      float64 `json:"total_ratio"`
	DispatchRatio   float64 `json:"dispatch_ratio"`
	PairRatioMedian float64 `json:"pair_ratio_median"`
	DiffMedianUS    float64 `json:"diff_median_us"`
	// OpsPerIter is the kernel launches and gemms of one iteration (the
	// same on both sides); PerOpUS is DiffMedianUS over them, rocsync's
	// host cost per op over the raw driver (the issue's ≤ 0.3 µs target),
	// and PerOpDispatchUS the same from the dispatch times (the median of
	// the per-pair dispatch differences over the ops).
	OpsPerIter       int     `json:"ops_per_iter"`
	PerOpUS          float64 `json:"per_op_over_raw_us"`
	PerOpDispatchUS  float64 `json:"per_op_dispatch_over_raw_us"`
	RawP90OverMedian float64 `json:"raw_p90_over_median"`
	RocP90OverMedian float64 `json:"rocsync_p90_over_median"`

	// LoopMallocsPerIter and LoopGCs cover the measured paired loop (one
	// raw and one rocsync iteration per pair iteration); the per-side
	// counts come from AllocIters more iterations of each side alone.
	LoopMallocsPerIter float64 `json:"loop_go_mallocs_per_iter"`
	LoopBytesPerIter   float64 `json:"loop_go_bytes_per_iter"`
	LoopGCs            uint32  `json:"loop_gcs"`
	RawMallocsPerIter  float64 `json:"raw_go_mallocs_per_iter"`
	RocMallocsPerIter  float64 `json:"rocsync_go_mallocs_per_iter"`
	RocBytesPerIter    float64 `json:"rocsync_go_bytes_per_iter"`

	RawHostWaitsPerIter float64 `json:"raw_host_waits_per_iter"`
	// rocsync's host waits per iteration before the final Synchronize,
	// those at the kernel↔cuBLAS boundary, and its device waits.
	RocHostWaitsPerIter   float64 `json:"rocsync_host_waits_per_iter"`
	RocBoundaryPerIter    float64 `json:"rocsync_boundary_waits_per_iter"`
	RocDeviceWaitsPerIter float64 `json:"rocsync_device_waits_per_iter"`
	RocEventsPerIter      float64 `json:"rocsync_events_recorded_per_iter"`

	// The raw result is checked against a float64 CPU reference (Verify);
	// rocsync's checksum is compared with it, not required to match bit
	// for bit (the two cuBLAS handles may pick different algorithms).
	RawChecksum  float64 `json:"raw_checksum"`
	RocChecksum  float64 `json:"rocsync_checksum"`
	SameChecksum bool    `json:"same_checksum"`
	RawMaxRelErr float64 `json:"raw_max_rel_err_vs_cpu"`

	// rocsync's start-up for this pair: Open, and the first iteration
	// (task creation, cuBLAS handle, the kernels' module load and JIT).
	RocOpenMS      float64 `json:"rocsync_open_ms"`
	RocFirstIterMS float64 `json:"rocsync_first_iteration_ms"`
}

type pairedOutput struct {
	// Run is the machine, build, time and device, as in the policy
	// table's JSON; Meta the raw baseline's details and start-up costs.
	Run   runMeta      `json:"run"`
	Meta  pairedMeta   `json:"meta"`
	Pairs []pairResult `json:"pairs"`
}

// rocSide is one rocsync program on a device opened for one policy.
type rocSide struct {
	d  *rocsync.Device
	t  *rocsync.Task
	st state
}

// openRocSide opens a device for pol, sets prog up on its default task
// and runs the first iteration (task creation, cuBLAS handle, the
// kernels' module load and JIT), timing the Open and that iteration in
// ms. The caller closes what it returns.
func openRocSide(cfg config, pol rocsync.Policy, prog program, openMS, firstIterMS *float64) (*rocSide, error) {
	t0 := time.Now()
	d, err := rocsync.Open(rocsync.Options{Backend: rocsync.CUDA, Policy: pol, LogLevel: rocsync.LogOff, WaitTimeout: cfg.waitTimeout})
	if err != nil {
		return nil, err
	}
	*openMS = sinceMS(t0)
	t := d.DefaultTask()
	st, err := prog.setup(d, t, cfg)
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	roc := &rocSide{d: d, t: t, st: st}
	t0 = time.Now()
	if _, _, _, err := roc.iterate(false); err != nil {
		return nil, errors.Join(err, roc.close())
	}
	*firstIterMS = sinceMS(t0)
	return roc, nil
}

// close frees the program's inputs and closes the device.
func (r *rocSide) close() error {
	r.st.free()
	return r.d.Close()
}

// sinceMS is the time since t0 in ms, for the start-up costs.
func sinceMS(t0 time.Time) float64 { return float64(time.Since(t0).Nanoseconds()) / 1e6 }

// iterate runs one rocsync iteration as runOne does: submit (dispatch),
// Synchronize (total), then free the temporaries. With readBack it also
// returns the checksum of the output.
func (r *rocSide) iterate(readBack bool) (dispatch, total time.Duration, sum float64, err error) {
	t0 := time.Now()
	res, temps, err := r.st.run(r.t)
	if err != nil {
		return 0, 0, 0, errors.Join(err, freeAll(temps))
	}
	t1 := time.Now()
	if err := r.t.Synchronize(); err != nil {
		return 0, 0, 0, errors.Join(err, freeAll(temps))
	}
	t2 := time.Now()
	if readBack {
		vals, err := res.Float32s()
		if err != nil {
			return 0, 0, 0, errors.Join(err, freeAll(temps))
		}
		sum = measure.Checksum(vals)
	}
	return t1.Sub(t0), t2.Sub(t0), sum, freeAll(temps)
}

func freeAll(as []*rocsync.Array) error {
	var err error
	for _, a := range as {
		if e := a.Free(); e != nil {
			err = errors.Join(err, e) // only on failure: no slice per iteration
		}
	}
	return err
}

// allocIters is how many iterations of each side alone count allocations.
func allocIters(cfg config) int { return min(cfg.iters, 500) }

// runPaired is the whole paired mode: print a table (or JSON) and save
// JSON as the flags ask.
func runPaired(cfg config, stdout io.Writer) error {
	if cfg.replay {
		return runPairedReplay(cfg, stdout)
	}
	out := &pairedOutput{}
	var err error
	out.Run, out.Meta, out.Pairs, err = eachPair(cfg, 2,
		fmt.Sprintf("%d pairs of raw CUDA and rocsync, %d+%d iterations each", len(cfg.pairs), cfg.warmup, cfg.iters),
		func(p pair) string { return fmt.Sprintf("%s %s against raw %s", p.program, p.policy, p.raw) },
		func(p pair) string { return fmt.Sprintf("%s under %s against raw %s", p.program, p.policy, p.raw) },
		runPair)
	if err != nil {
		return err
	}
	return emitPaired(cfg, stdout, out, printPaired)
}

// emitPaired prints out as a table (or JSON, with -json) and saves it as
// JSON where -json-file asks: the paired mode's and the paired replay
// mode's output.
func emitPaired[T any](cfg config, stdout io.Writer, out T, print func(io.Writer, T)) error {
	if cfg.json {
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else {
		print(stdout, out)
	}
	if cfg.jsonFile != "" {
		return saveJSON(cfg.jsonFile, out)
	}
	return nil
}

// eachPair runs run on every pair of cfg.pairs against one raw GPU, every
// call, raw and rocsync, from this goroutine on one OS thread: the raw
// side makes the primary context current once (raw.Open), and rocsync's
// calls (cuda.Ctx) find that same context current. Progress counts the
// warm-up and measured iterations and the allocation-counting iterations
// of each of the sidesAlone runs; running labels a pair in progress,
// failed an error.
func eachPair[R any](cfg config, sidesAlone int, what string, running, failed func(pair) string,
	run func(config, *raw.GPU, pair, *progress) (R, error)) (runMeta, pairedMeta, []R, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g, err := openRaw(cfg)
	if err != nil {
		return runMeta{}, pairedMeta{}, nil, err
	}
	rm, m := pairedMetaFor(cfg, g)
	perPair := cfg.warmup + cfg.iters + sidesAlone*allocIters(cfg)
	prog := newProgress(cfg.progress, cfg.tty, cfg.now, len(cfg.pairs)*perPair, what)
	defer prog.finish()
	var rs []R
	for _, p := range cfg.pairs {
		prog.running(running(p))
		r, err := run(cfg, g, p, prog)
		if err != nil {
			return rm, m, nil, errors.Join(fmt.Errorf("%s: %w", failed(p), err), g.Close())
		}
		rs = append(rs, r)
	}
	return rm, m, rs, g.Close()
}

// openRaw opens the raw baseline's GPU (the caller holds
// runtime.LockOSThread).
func openRaw(cfg config) (*raw.GPU, error) {
	g, err := raw.Open(0, cfg.rawPerCall)
	if err != nil {
		return nil, &rocsync.Error{Op: "Open", Kind: rocsync.ErrUnavailable, Detail: "-paired-raw: the raw CUDA baseline", Err: err}
	}
	return g, nil
}

// pairedMetaFor is the run's machine and settings, and the raw side's
// device and start-up costs.
func pairedMetaFor(cfg config, g *raw.GPU) (runMeta, pairedMeta) {
	m := pairedMeta{Raw: g.Meta(), Backend: "cuda", N: cfg.n, Repeat: cfg.repeat, Iterations: cfg.iters,
		Warmup: cfg.warmup, AllocIters: allocIters(cfg), RawPerCall: cfg.rawPerCall, GoVersion: runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), GOGC: os.Getenv("GOGC")}
	if cfg.replay {
		m.ReplayRounds = cfg.replayRounds.String()
	}
	run := newRunMeta(cfg, time.Now())
	run.Backend, run.Device, run.Target = "cuda", m.Raw.Device, "sm_"+strings.ReplaceAll(m.Raw.ComputeCap, ".", "")
	if v := m.Raw.DriverVersion; v > 0 {
		run.Driver = fmt.Sprintf("CUDA driver %d.%d", v/1000, v%1000/10) // as Device.DriverVersion
	}
	return run, m
}

func runPair(cfg config, g *raw.GPU, p pair, progress *progress) (r pairResult, err error) {
	prog, err := programByName(p.program)
	if err != nil {
		return r, err
	}
	r = pairResult{Program: p.program, Policy: p.policy.String(), RawProgram: p.raw, Shape: prog.shape(cfg), N: cfg.n,
		Iterations: cfg.iters, Warmup: cfg.warmup}

	rp, err := g.Prepare(p.raw, cfg.n, cfg.repeat, cfg.seed)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, rp.Close()) }()
	r.RawHostWaitsPerIter = rp.HostWaitsPerIter()

	roc, err := openRocSide(cfg, p.policy, prog, &r.RocOpenMS, &r.RocFirstIterMS)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, roc.close()) }()

	for i := 0; i < cfg.warmup; i++ {
		if _, _, err := rp.Iterate(); err != nil {
			return r, err
		}
		if _, _, _, err := roc.iterate(false); err != nil {
			return r, err
		}
		progress.step()
	}

	rawD := make([]float64, 0, cfg.iters)
	rawT := make([]float64, 0, cfg.iters)
	rocD := make([]float64, 0, cfg.iters)
	rocT := make([]float64, 0, cfg.iters)
	runtime.GC()
	var m0, m1 runtime.MemStats
	s0 := roc.d.Stats()
	runtime.ReadMemStats(&m0)
	for i := 0; i < cfg.iters; i++ {
		rd, rt, err := rp.Iterate()
		if err != nil {
			return r, err
		}
		od, ot, _, err := roc.iterate(false)
		if err != nil {
			return r, err
		}
		rawD, rawT = append(rawD, measure.Micros(rd)), append(rawT, measure.Micros(rt))
		rocD, rocT = append(rocD, measure.Micros(od)), append(rocT, measure.Micros(ot))
		progress.step()
	}
	runtime.ReadMemStats(&m1)
	st1 := roc.d.Stats().Sub(s0)
	it := float64(cfg.iters)
	r.LoopMallocsPerIter = float64(m1.Mallocs-m0.Mallocs) / it
	r.LoopBytesPerIter = float64(m1.TotalAlloc-m0.TotalAlloc) / it
	r.LoopGCs = m1.NumGC - m0.NumGC
	r.RocHostWaitsPerIter = float64(st1.HostWaitsTotal()-st1.HostWaitsFor(rocsync.ReasonSync)) / it
	r.RocBoundaryPerIter = float64(st1.HostWaitsFor(rocsync.ReasonBoundary)) / it
	r.RocDeviceWaitsPerIter = float64(st1.DeviceWaits) / it
	r.RocEventsPerIter = float64(st1.EventsRecorded) / it

	r.OpsPerIter = rp.Ops()
	fillPairStats(&r, rawD, rawT, rocD, rocT)

	// Allocations of each side alone.
	n := allocIters(cfg)
	var a0, a1, a2 runtime.MemStats
	runtime.ReadMemStats(&a0)
	for i := 0; i < n; i++ {
		if _, _, err := rp.Iterate(); err != nil {
			return r, err
		}
		progress.step()
	}
	runtime.ReadMemStats(&a1)
	for i := 0; i < n; i++ {
		if _, _, _, err := roc.iterate(false); err != nil {
			return r, err
		}
		progress.step()
	}
	runtime.ReadMemStats(&a2)
	r.RawMallocsPerIter = float64(a1.Mallocs-a0.Mallocs) / float64(n)
	r.RocMallocsPerIter = float64(a2.Mallocs-a1.Mallocs) / float64(n)
	r.RocBytesPerIter = float64(a2.TotalAlloc-a1.TotalAlloc) / float64(n)

	if _, _, r.RocChecksum, err = roc.iterate(true); err != nil {
		return r, err
	}
	r.RawChecksum, r.RawMaxRelErr, err = rp.Verify()
	r.SameChecksum = r.RawChecksum == r.RocChecksum
	return r, err
}

// fillPairStats computes the quantiles and ratios from the per-iteration
// times (µs); rawT[i] and rocT[i] ran one after the other.
func fillPairStats(r *pairResult, rawD, rawT, rocD, rocT []float64) {
	r.RawDispatchMedianUS, r.RawDispatchP90US = measure.Quantile(rawD, 0.5), measure.Quantile(rawD, 0.9)
	r.RawTotalMedianUS, r.RawTotalP90US, r.RawTotalP99US = measure.Quantile(rawT, 0.5), measure.Quantile(rawT, 0.9), measure.Quantile(rawT, 0.99)
	r.RawTotalMinUS = slices.Min(rawT)
	r.RocDispatchMedianUS, r.RocDispatchP90US = measure.Quantile(rocD, 0.5), measure.Quantile(rocD, 0.9)
	r.RocTotalMedianUS, r.RocTotalP90US, r.RocTotalP99US = measure.Quantile(rocT, 0.5), measure.Quantile(rocT, 0.9), measure.Quantile(rocT, 0.99)
	r.RocTotalMinUS = slices.Min(rocT)
	r.TotalRatio = r.RocTotalMedianUS / r.RawTotalMedianUS
	r.DispatchRatio = r.RocDispatchMedianUS / r.RawDispatchMedianUS
	r.PairRatioMedian, r.DiffMedianUS = pairMedian(rocT, rawT, over), pairMedian(rocT, rawT, minus)
	if r.OpsPerIter > 0 {
		r.PerOpUS = r.DiffMedianUS / float64(r.OpsPerIter)
		r.PerOpDispatchUS = pairMedian(rocD, rawD, minus) / float64(r.OpsPerIter)
	}
	r.RawP90OverMedian = r.RawTotalP90US / r.RawTotalMedianUS
	r.RocP90OverMedian = r.RocTotalP90US / r.RocTotalMedianUS
}

// pairMedian is the median over i of f(a[i], b[i]): a statistic of two
// runs within each round, a[i] and b[i] having run one after the other.
func pairMedian(a, b []float64, f func(x, y float64) float64) float64 {
	v := make([]float64, len(a))
	for i := range a {
		v[i] = f(a[i], b[i])
	}
	return measure.Quantile(v, 0.5)
}

func over(x, y float64) float64  { return x / y }
func minus(x, y float64) float64 { return x - y }

// printMachine is the paired modes' line on the GPU, the raw side's
// libraries and the Go run time.
func printMachine(w io.Writer, m pairedMeta) {
	fmt.Fprintf(w, "%s (cc %s), driver API %d, cuBLAS %s, %s PTX; raw context per call: %v; %s, GOMAXPROCS %d\n",
		m.Raw.Device, m.Raw.ComputeCap, m.Raw.DriverVersion, m.Raw.CUBLAS, m.Raw.PTX, m.RawPerCall, m.GoVersion, m.GOMAXPROCS)
}

func printPaired(w io.Writer, out *pairedOutput) {
	m := out.Meta
	fmt.Fprintf(w, "paired: rocsync (backend %s) against bench/rawcuda's raw driver API + cuBLAS, alternating one raw and one rocsync iteration\n", m.Backend)
	printMachine(w, m)
	fmt.Fprintf(w, "raw start-up: cuInit %.1f ms, primary context %.1f ms, first cuModuleLoadData %.1f ms (second %.1f ms), cublasCreate %.1f ms\n",
		m.Raw.InitMS, m.Raw.CtxRetainMS, m.Raw.ModuleLoadMS, m.Raw.ModuleLoad2MS, m.Raw.CUBLASCreateMS)
	fmt.Fprintf(w, "%dx%d float32 (mixed: repeat %d); %d measured pair iterations after %d warm-up; mallocs per side from %d iterations alone; times in µs, total = submit + final sync\n\n",
		m.N, m.N, m.Repeat, m.Iterations, m.Warmup, m.AllocIters)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tpolicy\traw shape\traw total med\tp90\trocsync total med\tp90\tratio\tpair ratio med\tdiff med\tops/it\tµs/op over raw\tdispatch µs/op over raw\traw dispatch med\trocsync dispatch med\traw p90/med\trocsync p90/med\t"+
		"raw mallocs/it\trocsync mallocs/it\tGCs in loop\trocsync host waits/it\tdevice waits/it\topen ms\tfirst it ms\tsame checksum\t")
	for _, r := range out.Pairs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.2f\t%d\t%.3f\t%.3f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.2f\t%.2f\t%.1f\t%.1f\t%v\t\n",
			r.Program, r.Policy, r.RawProgram, r.RawTotalMedianUS, r.RawTotalP90US, r.RocTotalMedianUS, r.RocTotalP90US, r.TotalRatio,
			r.PairRatioMedian, r.DiffMedianUS, r.OpsPerIter, r.PerOpUS, r.PerOpDispatchUS, r.RawDispatchMedianUS, r.RocDispatchMedianUS, r.RawP90OverMedian, r.RocP90OverMedian,
			r.RawMallocsPerIter, r.RocMallocsPerIter, r.LoopGCs, r.RocHostWaitsPerIter, r.RocDeviceWaitsPerIter, r.RocOpenMS, r.RocFirstIterMS, r.SameChecksum)
	}
	tw.Flush()
}

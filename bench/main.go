// Command bench runs the seed programs (and more) under every rocsync
// policy on the default device, the emulator when no AMD GPU is present,
// and reports dispatch time, total time, host waits and HSA↔HIP crossings
// per iteration.
//
//	go run ./bench                       # every program, every policy
//	go run ./bench -programs mixed -policies DeviceSide,Unified -iters 500
//	go run ./bench -programs mlp -batch 256 -hidden 512
//	go run ./bench -json > results.json
//	go run ./bench -plot bench.png       # the table, and a bar chart
//	go run ./bench -backend cuda -paired-raw -iters 2000
//	go run ./bench -backend cuda -paired-raw -replay -iters 3000
//
// Programs: matmul and elementwise (three chained ops each), mixed
// ((x∘x)·x, -repeat times) and mlp (one MLP training step with Adam; see
// mlp.go). It exits 1 if two policies computed different checksums.
//
// With -paired-raw (CUDA only; paired.go) it times rocsync against the
// same op sequences written directly on the driver API and cuBLAS
// (bench/rawcuda/raw), alternating one raw and one rocsync iteration in one
// process, and reports the ratios. With -paired-raw -replay
// (pairedreplay.go) it alternates four: raw eager, raw CUDA-graph replay,
// rocsync eager and rocsync replay.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rocsync/rocsync"
	_ "github.com/rocsync/rocsync/backends" // the ROCm, CUDA and emulator drivers
	"github.com/rocsync/rocsync/bench/internal/measure"
)

type config struct {
	n        int
	iters    int
	warmup   int
	repeat   int
	mlp      mlpSizes
	seed     uint64
	backend  rocsync.Backend
	emuDelay time.Duration
	// waitTimeout is Options.WaitTimeout (0: rocsync's default bound;
	// negative: unbounded host waits, one blocking runtime call each).
	waitTimeout time.Duration
	programs    []string
	policies    []rocsync.Policy
	json        bool
	jsonFile    string
	plot        string
	progress    io.Writer // nil: no progress reports
	tty         bool      // progress is a terminal: rewrite one line
	now         func() time.Time

	// -paired-raw
	paired     bool
	rawPerCall bool
	pairs      []pair
	// replayRounds is -replay-rounds: the order of the paired replay
	// mode's four runs (pairedreplay.go).
	replayRounds replayRounds

	interleave bool

	// dp-mlp: the device count, and the hazard checker (tests).
	devices int
	hazards bool
	// dpSkipAllReduce leaves the all-reduces out (the test's control).
	dpSkipAllReduce bool
	// -replay: every program and policy runs eagerly and as a replayed
	// recording (Task.Record, Recording.Replay).
	replay bool

	cpuProfile   string
	cpuProfileHz int

	// -trace: every program/policy run records into one trace, each run
	// a process named program/policy.
	traceFile string
	trace     *rocsync.Trace
}

// result is one program under one policy.
type result struct {
	Program          string  `json:"program"`
	Policy           string  `json:"policy"`
	Backend          string  `json:"backend"`
	Shape            string  `json:"shape"`
	N                int     `json:"n"`
	Iterations       int     `json:"iterations"`
	Warmup           int     `json:"warmup"`
	EmuMaxDelayUS    float64 `json:"emulator_max_delay_us"`
	DispatchMedianUS float64 `json:"dispatch_median_us"`
	DispatchP90US    float64 `json:"dispatch_p90_us"`
	TotalMedianUS    float64 `json:"total_median_us"`
	TotalP90US       float64 `json:"total_p90_us"`
	HostWaitsPerIter float64 `json:"host_waits_per_iter"`
	BoundaryPerIter  float64 `json:"boundary_waits_per_iter"`
	DeviceWaitsIter  float64 `json:"device_waits_per_iter"`
	Crossings        int     `json:"crossings_per_iter"`
	CrossDomainOps   int     `json:"cross_domain_ops_per_iter"`
	Checksum         float64 `json:"checksum"`
	DispatchRatio    float64 `json:"dispatch_ratio_to_wait_always"`
	TotalRatio       float64 `json:"total_ratio_to_wait_always"`
	// Interleaved: the policies ran at once, one iteration each in turn
	// (-interleave), rather than one after another.
	Interleaved bool `json:"interleaved,omitempty"`
	// Mode is "replay" for a replayed recording (-replay), "" for eager.
	Mode string `json:"mode,omitempty"`
	// ReplayOverEager (replayed runs) is this run's total median over the
	// eager run's of the same program and policy (for mlp, a replayed
	// training step against an eager one; the target is ≤ 0.5).
	ReplayOverEager float64 `json:"replay_total_over_eager,omitempty"`
}

// tablePolicy is the policy as the tables name it: "DeviceSide replay"
// for a replayed run.
func (r result) tablePolicy() string {
	if r.Mode != "" {
		return r.Policy + " " + r.Mode
	}
	return r.Policy
}

// modes are the ways each program and policy runs: eager, and with
// -replay also replayed.
func (cfg config) modes() []bool {
	if cfg.replay {
		return []bool{false, true}
	}
	return []bool{false}
}

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "bench:", err)
	var ue usageError
	if errors.As(err, &ue) {
		if !ue.usagePrinted {
			fmt.Fprintln(os.Stderr, "Run 'bench -h' for the programs, policies and flags.")
		}
		os.Exit(2)
	}
	os.Exit(1)
}

// usageError is a bad command line (exit status 2). usagePrinted says the
// flag package already printed the usage (an unknown or malformed flag).
type usageError struct {
	error
	usagePrinted bool
}

func (e usageError) Unwrap() error { return e.error }

// run is the whole command: parse, run every program under every policy,
// print, plot, and fail if the checksums differ.
func run(args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		// Asked for: the summary and the flags on stdout, exit status 0.
		printUsage(stdout, newFlagSet(&config{}, new(flagStrings)))
		return nil
	}
	if err != nil {
		var pe parseError
		return usageError{error: err, usagePrinted: errors.As(err, &pe)}
	}
	cfg.tty = isTerminal(stderr)
	if cfg.cpuProfile != "" {
		// The profile goes to a temporary file renamed over the named one
		// once it is whole: an interrupted run leaves an existing profile
		// as it was, not an empty file pprof cannot read.
		f, err := os.CreateTemp(filepath.Dir(cfg.cpuProfile), filepath.Base(cfg.cpuProfile)+".tmp-*")
		if err != nil {
			return err
		}
		if cfg.cpuProfileHz != 100 {
			// StartCPUProfile keeps a rate set before it (and prints a
			// warning that it could not set its own 100 Hz).
			runtime.SetCPUProfileRate(cfg.cpuProfileHz)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			os.Remove(f.Name())
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			cerr := f.Close()
			if cerr == nil {
				cerr = os.Rename(f.Name(), cfg.cpuProfile)
			}
			if cerr != nil {
				os.Remove(f.Name())
				err = errors.Join(err, fmt.Errorf("-cpuprofile: %w", cerr))
			}
		}()
	}
	if cfg.paired {
		return runPaired(cfg, stdout)
	}
	meta := newRunMeta(cfg, time.Now())
	if cfg.traceFile != "" {
		cfg.trace = rocsync.NewTraceFile(cfg.traceFile)
	}
	var dp []dpResult
	var hasDP bool
	if cfg.programs, hasDP = splitDP(cfg.programs); hasDP {
		if cfg.paired || cfg.interleave || cfg.plot != "" {
			return usageError{error: fmt.Errorf("%s does not combine with -paired-raw, -interleave or -plot", dpProgram)}
		}
		if dp, err = runDP(cfg); err != nil {
			return err
		}
	}
	var results []result
	var dev deviceInfo
	if len(cfg.programs) > 0 {
		if results, dev, err = runAll(cfg); err != nil {
			return err
		}
	}
	if err := cfg.trace.Flush(); err != nil {
		return err
	}
	meta.Backend, meta.Device, meta.Driver, meta.Target = dev.backend, dev.name, dev.driver, dev.target
	meta.Machine.LoadAfter = loadAverage()
	out := output{Meta: meta, Results: results, DataParallel: dp}
	if cfg.json {
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else {
		if len(results) > 0 {
			printTable(stdout, cfg, results)
		}
		if len(dp) > 0 {
			printDPTable(stdout, cfg, dp)
		}
	}
	if cfg.jsonFile != "" {
		if err := saveJSON(cfg.jsonFile, out); err != nil {
			return err
		}
	}
	if cfg.plot != "" {
		if err := writePlot(cfg.plot, cfg, results); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	return errors.Join(checkChecksums(results), checkDP(dp))
}

// writeJSON writes v as indented JSON; bench's results and the paired
// mode's output both go through it.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// saveJSON writes v as indented JSON to a new file at path.
func saveJSON(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeJSON(f, v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// flagStrings are the flags parsed further after flag.Parse.
type flagStrings struct{ programs, policies, backend string }

// newFlagSet defines bench's flags on cfg and fs; the usage it prints is
// the summary and the flags.
func newFlagSet(cfg *config, fl *flagStrings) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&cfg.n, "n", 128, "matmul, elementwise, mixed: matrix size (n×n float32)")
	fs.IntVar(&cfg.iters, "iters", 200, "measured iterations per program and policy")
	fs.IntVar(&cfg.warmup, "warmup", 20, "warm-up iterations, not measured")
	fs.IntVar(&cfg.repeat, "repeat", 3, "repetitions of (x∘x)·x per mixed iteration")
	fs.IntVar(&cfg.mlp.batch, "batch", 128, "mlp: batch size")
	fs.IntVar(&cfg.mlp.in, "in", 128, "mlp: input features")
	fs.IntVar(&cfg.mlp.hidden, "hidden", 128, "mlp: hidden units")
	fs.IntVar(&cfg.mlp.out, "out", 16, "mlp: outputs")
	fs.Uint64Var(&cfg.seed, "seed", 1, "input seed (also seeds the emulator's delays)")
	fs.StringVar(&fl.programs, "programs", "matmul,elementwise,mixed,mlp", "comma-separated programs: matmul, elementwise, mixed, mlp, chain99, dp-mlp")
	fs.IntVar(&cfg.devices, "devices", 2, "dp-mlp: devices to split the batch over (also run on 1, the reference)")
	fs.StringVar(&fl.policies, "policies", "WaitAlways,SkipSameQueue,DeviceSide,Unified,DeviceBridge", "comma-separated policies")
	fs.StringVar(&fl.backend, "backend", "auto", "auto, emulator, rocm or cuda")
	fs.DurationVar(&cfg.waitTimeout, "wait-timeout", 0,
		"Options.WaitTimeout of rocsync's devices: 0 for rocsync's default bound, negative for unbounded host waits (one blocking runtime call each)")
	fs.DurationVar(&cfg.emuDelay, "emu-delay", 0,
		"emulator only: each op starts after a seeded random delay of up to this much (EmulatorOptions.MaxDelay), "+
			"holding the device behind the host; Go's timers make any non-zero value ~0.1-1 ms in practice (docs/benchmarks.md)")
	fs.BoolVar(&cfg.json, "json", false, "print JSON (the run's machine, build, device and settings, then the results) instead of the tables")
	fs.StringVar(&cfg.jsonFile, "json-file", "", "also write the JSON to this file (with the tables on stdout)")
	fs.StringVar(&cfg.plot, "plot", "", "also write a bar chart of the results to this PNG file")
	fs.BoolVar(&cfg.paired, "paired-raw", false,
		"CUDA only: time rocsync against the same op sequences on the raw driver API and cuBLAS (bench/rawcuda), "+
			"one raw and one rocsync iteration in turn in this process; without -policies, DeviceSide on matmul, elementwise "+
			"and mixed, and DeviceBridge and Unified on mixed (chain99 too if named by -programs). With -replay: raw eager, "+
			"raw CUDA-graph replay, rocsync eager and rocsync replay in turn, on matmul, elementwise, chain99 and mixed")
	fs.Var(&cfg.replayRounds, "replay-rounds",
		"-paired-raw -replay: the runs' `order`, own (the default), crossed or apart. own: raw eager, raw graph, rocsync eager, rocsync replay (each replay after its own "+
			"side's eager iteration); crossed: raw eager, rocsync replay, rocsync eager, raw graph (each after the other side's); "+
			"apart: the two replays in turn, then the two eager runs in turn, so that no replay follows an eager iteration")
	fs.BoolVar(&cfg.rawPerCall, "raw-percall", false, "-paired-raw: the raw side sets the context on every call, as rocsync does (rawcuda -percall)")
	fs.BoolVar(&cfg.interleave, "interleave", false,
		"open every policy's device at once and run one iteration of each in turn, so that the policies' ratios "+
			"are not skewed by the machine's speed drifting between one policy's run and the next")
	fs.BoolVar(&cfg.replay, "replay", false,
		"run every program and policy twice: eagerly, and recorded once (Task.Record) and replayed each iteration "+
			"(Recording.Replay); the tables show both, the replayed runs as 'policy replay', and replay/eager; "+
			"with -paired-raw, against the raw driver's CUDA-graph replay (see -paired-raw)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	fs.IntVar(&cfg.cpuProfileHz, "cpuprofile-hz", 100, "-cpuprofile: samples per second (the runtime's default is 100)")
	fs.StringVar(&cfg.traceFile, "trace", "",
		"write a timeline trace (Chrome/Perfetto JSON, open it in ui.perfetto.dev) of every run to this file, one process "+
			"per program/policy; keep -iters small, the trace holds every op")
	return fs
}

// usageSummary is what bench -h prints before the flags.
const usageSummary = `Usage: bench [flags]

bench runs small programs through rocsync under each synchronization policy
on one device (the emulator when no AMD GPU is present) and reports, per
program and policy: the host time to submit one iteration (dispatch), the
time including the final Synchronize (total), the host and device waits made,
the program's HSA<->HIP crossings, and a checksum. It exits 1 if two policies
computed different checksums, 2 on a bad command line.

Programs (-programs):
  matmul       t1 = x·x, t2 = x·t1, t3 = x·t2 (rocBLAS sgemm), -n × -n float32
  elementwise  the same chain with x∘y (rocsync's kernels)
  mixed        (x∘x)·x, -repeat times: one HSA->HIP crossing each
  mlp          one training step of a two-layer MLP with Adam (-batch, -in,
               -hidden, -out)
  chain99      y = 1 + x, then t1 = y∘y, t(i+1) = y∘t(i): 99 chained
               multiplies, for per-op and replay costs (not in the default
               list; with -paired-raw -replay it is)
  dp-mlp       the mlp data-parallel: the batch split over -devices devices,
               gradients all-reduced before Adam; run on 1 and -devices
               devices, with host waits per step and scaling efficiency
               (not in the default list)

Policies (-policies):
  WaitAlways     the host waits after every op (the baseline)
  SkipSameQueue  no wait between ops of one queue or stream
  DeviceSide     waits on the device within a runtime, on the host across
  Unified        kernels go on the HIP stream too: one timeline
  DeviceBridge   crossings wait on the device as well

Progress goes to stderr; the tables or JSON to stdout.

Examples:
  bench                                   every program under every policy
  bench -programs mixed -policies DeviceSide,Unified -iters 500
  bench -backend emulator -json-file results.json -plot bench.png
  bench -backend cuda -paired-raw -iters 2000
  bench -replay -policies DeviceSide,Unified   eager against record and replay
  bench -backend cuda -paired-raw -replay -iters 3000
                                          raw eager, raw CUDA graph, rocsync
                                          eager and rocsync replay, in turn

Flags:
`

// printUsage writes the summary and the flags to w.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usageSummary)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseError is an error of the flag package, which has printed the usage
// already.
type parseError struct{ error }

func (e parseError) Unwrap() error { return e.error }

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	var fl flagStrings
	fs := newFlagSet(&cfg, &fl)
	fs.SetOutput(stderr)
	// -h is handled by run (stdout, exit 0); after a bad flag, whose
	// error the flag package prints, the whole usage goes to stderr.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		printUsage(stderr, newFlagSet(&config{}, new(flagStrings)))
		return cfg, parseError{err}
	}
	progs, pols, backend := fl.programs, fl.policies, fl.backend
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.paired {
		if backend != "cuda" {
			return cfg, fmt.Errorf("-paired-raw times rocsync against the CUDA driver API and cuBLAS called directly (bench/rawcuda): "+
				"it needs -backend cuda, not %q", backend)
		}
		if cfg.plot != "" {
			return cfg, errors.New("-plot draws the policy table; it does not combine with -paired-raw")
		}
		if !set["programs"] {
			progs = strings.Join(defaultPairedPrograms(cfg.replay), ",")
		}
		if cfg.interleave {
			return cfg, errors.New("-interleave is for the policy table; -paired-raw already alternates raw and rocsync")
		}
	} else if cfg.rawPerCall {
		return cfg, errors.New("-raw-percall only applies with -paired-raw")
	}
	if set["replay-rounds"] && !(cfg.paired && cfg.replay) {
		return cfg, errors.New("-replay-rounds only applies with -paired-raw -replay")
	}
	if cfg.cpuProfileHz <= 0 || cfg.cpuProfileHz > 10000 {
		return cfg, errors.New("-cpuprofile-hz must be in 1..10000")
	}
	var err error
	if cfg.backend, err = rocsync.ParseBackend(backend); err != nil {
		return cfg, err
	}
	if cfg.devices < 1 {
		return cfg, errors.New("-devices must be at least 1")
	}
	if cfg.n <= 0 || cfg.iters <= 0 || cfg.warmup < 0 || cfg.repeat <= 0 {
		return cfg, errors.New("-n, -iters and -repeat must be positive, -warmup not negative")
	}
	if cfg.mlp.batch <= 0 || cfg.mlp.in <= 0 || cfg.mlp.hidden <= 0 || cfg.mlp.out <= 0 {
		return cfg, errors.New("-batch, -in, -hidden and -out must be positive")
	}
	if cfg.emuDelay < 0 {
		return cfg, errors.New("-emu-delay must not be negative")
	}
	if cfg.plot != "" && !strings.HasSuffix(strings.ToLower(cfg.plot), ".png") {
		return cfg, fmt.Errorf("-plot %q: the chart is a PNG, name it *.png", cfg.plot)
	}
	for _, p := range strings.Split(progs, ",") {
		if _, err := programByName(p); err != nil && p != dpProgram {
			return cfg, err
		}
		if slices.Contains(cfg.programs, p) {
			return cfg, fmt.Errorf("-programs names %s twice", p)
		}
		cfg.programs = append(cfg.programs, p)
	}
	if slices.Contains(cfg.programs, dpProgram) && (cfg.traceFile != "" || cfg.replay) {
		// dp-mlp opens its devices itself, without the trace, and has no
		// replayed form: the flags would be ignored (and -trace's file
		// replaced by an empty trace).
		return cfg, fmt.Errorf("%s does not combine with -trace or -replay", dpProgram)
	}
	if err := distinctOutputs(map[string]string{"-json-file": cfg.jsonFile, "-plot": cfg.plot,
		"-trace": cfg.traceFile, "-cpuprofile": cfg.cpuProfile}); err != nil {
		return cfg, err
	}
	for _, p := range strings.Split(pols, ",") {
		pol, err := rocsync.ParsePolicy(p)
		if err != nil {
			return cfg, err
		}
		cfg.policies = append(cfg.policies, pol)
	}
	if cfg.paired {
		pairs, err := pairsFor(cfg.programs, cfg.policies, set["policies"], cfg.replay)
		if err != nil {
			return cfg, err
		}
		cfg.pairs = pairs
	}
	cfg.progress = stderr
	cfg.now = time.Now
	return cfg, nil
}

// distinctOutputs refuses two output flags naming one file (the second
// writer would replace the first's output), and an output whose folder
// is missing or that names a folder, before the run rather than after it.
func distinctOutputs(outs map[string]string) error {
	seen := map[string]string{}
	for _, flagName := range slices.Sorted(maps.Keys(outs)) {
		path := outs[flagName]
		if path == "" {
			continue
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return fmt.Errorf("%s %q: %w", flagName, path, err)
		}
		if other, ok := seen[abs]; ok {
			return fmt.Errorf("%s and %s name the same file %q", other, flagName, path)
		}
		seen[abs] = flagName
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			return fmt.Errorf("%s %q is a directory", flagName, path)
		}
		if fi, err := os.Stat(filepath.Dir(abs)); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s %q: its folder %s does not exist", flagName, path, filepath.Dir(abs))
		}
	}
	return nil
}

// deviceInfo is what the JSON records of the device the run used.
type deviceInfo struct{ backend, name, driver, target string }

func runAll(cfg config) ([]result, deviceInfo, error) {
	var out []result
	var dev deviceInfo
	runs := len(cfg.programs) * len(cfg.policies) * len(cfg.modes())
	what := fmt.Sprintf("%d programs × %d policies, %d+%d iterations each", len(cfg.programs), len(cfg.policies), cfg.warmup, cfg.iters)
	if cfg.interleave {
		what += ", interleaved"
	}
	prog := newProgress(cfg.progress, cfg.tty, cfg.now, runs*(cfg.warmup+cfg.iters), what)
	defer prog.finish()
	record := func(pr *policyRun) {
		if dev.backend == "" {
			dev = deviceInfo{pr.d.Backend(), pr.d.Name(), pr.d.DriverVersion(), pr.d.Target()}
		}
	}
	for _, name := range cfg.programs {
		p, _ := programByName(name)
		if cfg.interleave {
			prog.running(name + ", every policy")
			rs, err := runInterleaved(cfg, p, prog, record)
			if err != nil {
				return nil, dev, err
			}
			out = append(out, rs...)
			continue
		}
		for _, pol := range cfg.policies {
			for _, replay := range cfg.modes() {
				prog.running(name + " " + modeName(pol, replay))
				r, err := runOne(cfg, p, pol, replay, prog, record)
				if err != nil {
					return nil, dev, fmt.Errorf("%s under %s: %w", name, modeName(pol, replay), err)
				}
				out = append(out, r)
			}
		}
	}
	fillRatios(out)
	return out, dev, nil
}

// runOne runs prog under pol on its own device: warm-up, then the
// measured iterations.
func runOne(cfg config, prog program, pol rocsync.Policy, replay bool, progress *progress, record func(*policyRun)) (result, error) {
	pr, err := newPolicyRun(cfg, prog, pol, replay)
	if err != nil {
		return result{}, err
	}
	record(pr)
	for i := 0; i < cfg.warmup+cfg.iters; i++ {
		if err := pr.step(i); err != nil {
			return pr.r, errors.Join(err, pr.close())
		}
		progress.step()
	}
	return pr.finish(), pr.close()
}

// runInterleaved (-interleave) opens a device for every policy at once and
// runs one iteration of each in turn, round after round, so that all the
// policies see the same drift of the machine's speed.
func runInterleaved(cfg config, prog program, progress *progress, record func(*policyRun)) (rs []result, err error) {
	var prs []*policyRun
	defer func() {
		for _, pr := range prs {
			err = errors.Join(err, pr.close())
		}
	}()
	for _, pol := range cfg.policies {
		for _, replay := range cfg.modes() {
			pr, err := newPolicyRun(cfg, prog, pol, replay)
			if err != nil {
				return nil, fmt.Errorf("%s under %s: %w", prog.name, modeName(pol, replay), err)
			}
			prs = append(prs, pr)
			record(pr)
		}
	}
	for i := 0; i < cfg.warmup+cfg.iters; i++ {
		for _, pr := range prs {
			if err := pr.step(i); err != nil {
				return nil, fmt.Errorf("%s under %s: %w", prog.name, modeName(pr.pol, pr.rec != nil), err)
			}
			progress.step()
		}
	}
	for _, pr := range prs {
		rs = append(rs, pr.finish())
	}
	return rs, nil
}

// policyRun is one program under one policy on its own device.
type policyRun struct {
	cfg                     config
	pol                     rocsync.Policy
	d                       *rocsync.Device
	t                       *rocsync.Task
	st                      state
	r                       result
	dispatch, totals        []float64
	waits, boundary, device uint64

	// -replay: the recording of one iteration, its result and the arrays
	// its new-array forms made (freed with the recording).
	rec      *rocsync.Recording
	recOut   *rocsync.Array
	recTemps []*rocsync.Array
}

// modeName is a policy's name in the tables: "DeviceSide", or
// "DeviceSide replay" for a replayed run.
func modeName(pol rocsync.Policy, replay bool) string {
	if replay {
		return pol.String() + " replay"
	}
	return pol.String()
}

func newPolicyRun(cfg config, prog program, pol rocsync.Policy, replay bool) (*policyRun, error) {
	d, err := rocsync.Open(rocsync.Options{Backend: cfg.backend, Policy: pol, LogLevel: rocsync.LogOff, WaitTimeout: cfg.waitTimeout,
		Emulator: rocsync.EmulatorOptions{MaxDelay: cfg.emuDelay, Seed: cfg.seed},
		Trace:    cfg.trace, TraceName: prog.name + "/" + pol.String()})
	if err != nil {
		return nil, err
	}
	t := d.DefaultTask()
	st, err := prog.setup(d, t, cfg)
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	cc := prog.crossings(cfg)
	r := result{Program: prog.name, Policy: pol.String(), Backend: d.Backend(), Shape: prog.shape(cfg), N: cfg.n,
		Iterations: cfg.iters, Warmup: cfg.warmup, Crossings: cc.Crossings, CrossDomainOps: cc.CrossDomainOps,
		Interleaved: cfg.interleave}
	if d.Emulated() {
		r.EmuMaxDelayUS = measure.Micros(cfg.emuDelay)
	}
	pr := &policyRun{cfg: cfg, pol: pol, d: d, t: t, st: st, r: r,
		dispatch: make([]float64, 0, cfg.iters), totals: make([]float64, 0, cfg.iters)}
	if replay {
		pr.r.Mode = "replay"
		rec, err := t.Record(func() (err error) {
			pr.recOut, pr.recTemps, err = st.run(t)
			return err
		})
		if err != nil {
			st.free()
			return nil, errors.Join(fmt.Errorf("recording: %w", err), d.Close())
		}
		pr.rec = rec
	}
	return pr, nil
}

// step runs iteration i (a warm-up one while i < cfg.warmup).
func (p *policyRun) step(i int) error {
	d, t, cfg := p.d, p.t, p.cfg
	before := d.Stats()
	t0 := time.Now()
	var res *rocsync.Array
	var temps []*rocsync.Array
	var err error
	if p.rec != nil {
		res, err = p.recOut, p.rec.Replay()
	} else {
		res, temps, err = p.st.run(t)
	}
	if err != nil {
		return err
	}
	t1 := time.Now()
	mid := d.Stats().Sub(before)
	if err := t.Synchronize(); err != nil {
		return err
	}
	t2 := time.Now()
	if i == cfg.warmup+cfg.iters-1 {
		vals, err := res.Float32s()
		if err != nil {
			return err
		}
		p.r.Checksum = measure.Checksum(vals)
	}
	for _, a := range temps {
		if err := a.Free(); err != nil {
			return err
		}
	}
	if i < cfg.warmup {
		return nil
	}
	p.dispatch = append(p.dispatch, measure.Micros(t1.Sub(t0)))
	p.totals = append(p.totals, measure.Micros(t2.Sub(t0)))
	p.waits += mid.HostWaitsTotal()
	p.boundary += mid.HostWaitsFor(rocsync.ReasonBoundary)
	p.device += mid.DeviceWaits
	return nil
}

func (p *policyRun) finish() result {
	r := p.r
	r.DispatchMedianUS, r.DispatchP90US = measure.Quantile(p.dispatch, 0.5), measure.Quantile(p.dispatch, 0.9)
	r.TotalMedianUS, r.TotalP90US = measure.Quantile(p.totals, 0.5), measure.Quantile(p.totals, 0.9)
	it := float64(p.cfg.iters)
	r.HostWaitsPerIter, r.BoundaryPerIter, r.DeviceWaitsIter = float64(p.waits)/it, float64(p.boundary)/it, float64(p.device)/it
	return r
}

func (p *policyRun) close() error {
	if p.d == nil {
		return nil
	}
	var errs []error
	if p.rec != nil {
		errs = append(errs, p.rec.Close())
		for _, a := range p.recTemps {
			errs = append(errs, a.Free())
		}
	}
	p.st.free()
	err := errors.Join(append(errs, p.d.Close())...)
	p.d = nil
	return err
}

func fillRatios(rs []result) {
	base := map[string]result{}
	eager := map[[2]string]result{}
	for _, r := range rs {
		if r.Policy == rocsync.WaitAlways.String() && r.Mode == "" {
			base[r.Program] = r
		}
		if r.Mode == "" {
			eager[[2]string{r.Program, r.Policy}] = r
		}
	}
	for i := range rs {
		if e, ok := eager[[2]string{rs[i].Program, rs[i].Policy}]; ok && rs[i].Mode != "" && e.TotalMedianUS > 0 {
			rs[i].ReplayOverEager = rs[i].TotalMedianUS / e.TotalMedianUS
		}
	}
	for i := range rs {
		if b, ok := base[rs[i].Program]; ok && rs[i].DispatchMedianUS > 0 {
			rs[i].DispatchRatio = b.DispatchMedianUS / rs[i].DispatchMedianUS
			rs[i].TotalRatio = b.TotalMedianUS / rs[i].TotalMedianUS
		}
	}
}

// checkChecksums fails when two policies computed different results.
func checkChecksums(rs []result) error {
	first := map[string]result{}
	for _, r := range rs {
		key := r.Program
		if r.Program == "mlp" {
			// A replayed training step repeats the recorded step's Adam
			// bias corrections (host scalars baked into its ops), so it
			// computes something else than eager steps: replays are
			// compared with replays.
			key += "/" + r.Mode
		}
		f, ok := first[key]
		if !ok {
			first[key] = r
			continue
		}
		if f.Checksum != r.Checksum {
			return fmt.Errorf("%s: checksum %v under %s but %v under %s", r.Program, f.Checksum, f.Policy, r.Checksum, r.Policy)
		}
	}
	return nil
}

// printTable prints the run's settings and two tables, each under 100
// columns: times, and waits with checksums.
func printTable(out io.Writer, cfg config, rs []result) {
	// tabwriter pads the last cell of a line: trim it.
	w := &trimWriter{w: out}
	defer w.flush()
	if len(rs) > 0 {
		dev := rs[0].Backend
		if rs[0].Backend == "emulator" {
			dev = "emulator (no added device delay)"
			if cfg.emuDelay > 0 {
				dev = fmt.Sprintf("emulator (each op starts after a random delay of up to %v)", cfg.emuDelay)
			}
		}
		fmt.Fprintf(w, "backend: %s\n", dev)
		fmt.Fprintf(w, "sizes: matmul, elementwise, mixed %dx%d float32 (mixed repeats %d times)\n", cfg.n, cfg.n, cfg.repeat)
		fmt.Fprintf(w, "       mlp %s, float32\n", cfg.mlp)
		fmt.Fprintf(w, "%d measured iterations per program and policy (%d warm-up iterations excluded)\n", cfg.iters, cfg.warmup)
		if cfg.interleave {
			fmt.Fprintln(w, "the policies ran interleaved, one iteration of each in turn (-interleave)")
		}
		if rs[0].Backend == "emulator" {
			// docs/benchmarks.md, "-interleave and the millisecond dispatch medians".
			fmt.Fprintf(w, "note: the emulated device computes on this machine's %d CPUs, as the host does: when\n", runtime.NumCPU())
			fmt.Fprintln(w, "they are busy, a host wait can take as long as the device's queued gemms (docs/benchmarks.md)")
		}
	}

	// Names left-aligned, numbers right-aligned.
	pw, qw := len("program"), len("policy")
	for _, r := range rs {
		pw, qw = max(pw, len(r.Program)), max(qw, len(r.tablePolicy()))
	}
	names := func(prog, pol string) string { return fmt.Sprintf("%-*s  %-*s", pw, prog, qw, pol) }

	fmt.Fprintln(w, "\nTimes per iteration in µs: median and 90th percentile. Dispatch is the host's time to submit")
	fmt.Fprintln(w, "the iteration, total adds the final Synchronize. Speed-up is WaitAlways's median over this one's.")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tdispatch\t\ttotal\t\tspeed-up\t\t\n", names("", ""))
	fmt.Fprintf(tw, "%s\tmedian\tp90\tmedian\tp90\tdispatch\ttotal\t\n", names("program", "policy"))
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", names(r.Program, r.tablePolicy()),
			r.DispatchMedianUS, r.DispatchP90US, r.TotalMedianUS, r.TotalP90US, ratio(r.DispatchRatio), ratio(r.TotalRatio))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nWaits per iteration, counted while submitting: host waits (all, and those at HSA<->HIP")
	fmt.Fprintln(w, "crossings) and device waits; the program's crossings. Equal checksums mean equal results.")
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\thost waits\tat crossings\tdevice waits\tcrossings\tchecksum\t\n", names("program", "policy"))
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%d\t%.6g\t\n", names(r.Program, r.tablePolicy()),
			r.HostWaitsPerIter, r.BoundaryPerIter, r.DeviceWaitsIter, r.Crossings, r.Checksum)
	}
	tw.Flush()
	printReplayOverEager(w, names, rs)
}

// printReplayOverEager (-replay) prints each replayed run's total median
// against the eager run's of its program and policy.
func printReplayOverEager(w io.Writer, names func(prog, pol string) string, rs []result) {
	eager := map[[2]string]result{}
	replayed := false
	for _, r := range rs {
		if r.Mode == "" {
			eager[[2]string{r.Program, r.Policy}] = r
		}
		replayed = replayed || r.ReplayOverEager > 0
	}
	if !replayed {
		return
	}
	fmt.Fprintln(w, "\nReplayed against eager, total medians in µs (a ratio under 1 is replay's gain).")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\teager total\treplay total\treplay/eager\t\n", names("program", "policy"))
	for _, r := range rs {
		if r.ReplayOverEager == 0 {
			continue
		}
		e := eager[[2]string{r.Program, r.Policy}]
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t\n", names(r.Program, r.Policy), e.TotalMedianUS, r.TotalMedianUS, r.ReplayOverEager)
	}
	tw.Flush()
}

// trimWriter writes whole lines without their trailing spaces.
type trimWriter struct {
	w   io.Writer
	buf []byte
}

func (t *trimWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if _, err := fmt.Fprintf(t.w, "%s\n", bytes.TrimRight(t.buf[:i], " ")); err != nil {
			return 0, err
		}
		t.buf = t.buf[i+1:]
	}
}

func (t *trimWriter) flush() {
	if len(t.buf) > 0 {
		fmt.Fprint(t.w, string(bytes.TrimRight(t.buf, " ")))
	}
}

// ratio prints a speed-up ("1.00x"); "-" when there is no WaitAlways run to
// compare with.
func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/rawcuda/raw"
)

func TestPairedReplayFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-backend", "cuda", "-paired-raw", "-replay"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.paired || !cfg.replay {
		t.Errorf("parsed %+v", cfg)
	}
	if want := []string{"matmul", "elementwise", "chain99", "mixed"}; !slices.Equal(cfg.programs, want) {
		t.Errorf("programs %q, want %q", cfg.programs, want)
	}
	if !slices.Equal(cfg.pairs, defaultReplayPairs) {
		t.Errorf("pairs %v, want %v", cfg.pairs, defaultReplayPairs)
	}
	for _, p := range defaultReplayPairs {
		if !slices.Contains(raw.Programs, p.raw) || !slices.Contains(raw.Programs, rawGraphFor(p.program)) {
			t.Errorf("raw programs %q, %q are not all in %q", p.raw, rawGraphFor(p.program), raw.Programs)
		}
	}

	// The lead's command: every program under three policies.
	cfg, err = parseFlags([]string{"-backend", "cuda", "-paired-raw", "-replay", "-programs", "matmul,elementwise,chain99,mixed",
		"-policies", "DeviceSide,Unified,DeviceBridge"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.pairs) != 12 || cfg.pairs[6] != (pair{"chain99", rocsync.DeviceSide, "chain99"}) || cfg.pairs[11] != (pair{"mixed", rocsync.DeviceBridge, "mixed/event"}) {
		t.Errorf("pairs %v", cfg.pairs)
	}

	// Without -replay, chain99 is not in the default list, and named it
	// pairs with raw chain99 under DeviceSide.
	cfg, err = parseFlags([]string{"-backend", "cuda", "-paired-raw"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(cfg.programs, "chain99") {
		t.Errorf("-paired-raw runs chain99 by default: %q", cfg.programs)
	}
	cfg, err = parseFlags([]string{"-backend", "cuda", "-paired-raw", "-programs", "elementwise,chain99"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []pair{{"elementwise", rocsync.DeviceSide, "elementwise"}, {"chain99", rocsync.DeviceSide, "chain99"}}; !slices.Equal(cfg.pairs, want) {
		t.Errorf("pairs %v, want %v", cfg.pairs, want)
	}

	// Nor in bench's default list.
	cfg, err = parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(cfg.programs, "chain99") {
		t.Errorf("bench runs chain99 by default: %q", cfg.programs)
	}

	// -h names chain99 and the mode.
	var help bytes.Buffer
	if err := run([]string{"-h"}, &help, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"chain99      y = 1 + x", "bench -backend cuda -paired-raw -replay", "raw CUDA-graph replay, rocsync eager and rocsync replay"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("-h lacks %q:\n%s", want, help.String())
		}
	}

	for _, bad := range [][]string{
		{"-paired-raw", "-replay", "-backend", "cuda", "-programs", "mlp"},
		{"-paired-raw", "-replay", "-backend", "cuda", "-policies", "WaitAlways"},
		{"-paired-raw", "-replay", "-backend", "emulator"},
		{"-paired-raw", "-replay", "-backend", "cuda", "-replay-rounds", "sideways"},
		{"-paired-raw", "-backend", "cuda", "-replay-rounds", "apart"},
		{"-replay", "-replay-rounds", "crossed"},
	} {
		var ue usageError
		if err := run(bad, &bytes.Buffer{}, &bytes.Buffer{}); !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", bad, err)
		}
	}
}

// The whole paired replay mode, end to end, on the fake CUDA libraries:
// every default program and policy gives the four runs' times, the
// ratios and host costs computed from them, and equal checksums.
func TestPairedReplayOnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	dir := t.TempDir()
	saved := filepath.Join(dir, "replay.json")
	var out, errOut bytes.Buffer
	if err := run([]string{"-paired-raw", "-replay", "-backend", "cuda", "-n", "8", "-iters", "40", "-warmup", "1", "-json",
		"-json-file", saved}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if b, err := os.ReadFile(saved); err != nil || !bytes.Equal(b, out.Bytes()) {
		t.Errorf("-json-file differs from -json (%v)", err)
	}
	var po pairedReplayOutput
	if err := json.Unmarshal(out.Bytes(), &po); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if po.Meta.Raw.Device == "" || po.Meta.N != 8 || po.Meta.Iterations != 40 || po.Run.Backend != "cuda" {
		t.Errorf("meta %+v, run %+v", po.Meta, po.Run)
	}
	if len(po.Pairs) != len(defaultReplayPairs) {
		t.Fatalf("%d pairs, want %d", len(po.Pairs), len(defaultReplayPairs))
	}
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	for i, r := range po.Pairs {
		p := defaultReplayPairs[i]
		name := r.Program + "/" + r.Policy
		if r.Program != p.program || r.Policy != p.policy.String() || r.RawProgram != p.raw || r.RawGraphProgram != rawGraphFor(p.program) {
			t.Errorf("pair %d is %s against %s and %s, want %v", i, name, r.RawProgram, r.RawGraphProgram, p)
		}
		for what, v := range map[string]float64{"raw eager": r.RawEagerTotalMedianUS, "raw graph": r.RawGraphTotalMedianUS,
			"rocsync eager": r.RocEagerTotalMedianUS, "rocsync replay": r.RocReplayTotalMedianUS,
			"cuGraphLaunch": r.RawLaunchMedianUS, "Replay()": r.RocReplayCallMedUS} {
			if v <= 0 {
				t.Errorf("%s: %s median %v", name, what, v)
			}
		}
		if r.RawEagerTotalP90US < r.RawEagerTotalMedianUS || r.RawGraphTotalP90US < r.RawGraphTotalMedianUS ||
			r.RocEagerTotalP90US < r.RocEagerTotalMedianUS || r.RocReplayTotalP90US < r.RocReplayTotalMedianUS ||
			r.RawLaunchP90US < r.RawLaunchMedianUS || r.RocReplayCallP90US < r.RocReplayCallMedUS {
			t.Errorf("%s: a p90 under its median: %+v", name, r)
		}
		if !close(r.ReplayOverRawGraph, r.RocReplayTotalMedianUS/r.RawGraphTotalMedianUS) ||
			!close(r.ReplayOverEager, r.RocReplayTotalMedianUS/r.RocEagerTotalMedianUS) ||
			!close(r.RawGraphOverEager, r.RawGraphTotalMedianUS/r.RawEagerTotalMedianUS) ||
			!close(r.EagerOverRaw, r.RocEagerTotalMedianUS/r.RawEagerTotalMedianUS) ||
			!close(r.ReplayHostOverRawUS, r.RocReplayCallMedUS-r.RawLaunchMedianUS) || r.PairReplayOverRawGraph <= 0 {
			t.Errorf("%s: ratios do not follow from the medians: %+v", name, r)
		}
		wantOps := map[string]int{"matmul": 3, "elementwise": 3, "chain99": 99, "mixed": 6}[r.Program]
		if r.OpsPerIter != wantOps || r.RocRecordedOps != wantOps {
			t.Errorf("%s: %d raw ops and %d recorded, want %d", name, r.OpsPerIter, r.RocRecordedOps, wantOps)
		}
		// One stream, one graph; mixed across the kernel and cuBLAS
		// streams: a segment (a graph) per op, ordered by host waits
		// under DeviceSide and device waits under DeviceBridge.
		wantSegs, wantHostWaits, wantDevWaits := 1, 0.0, 0.0
		if r.Program == "mixed" && r.Policy != "Unified" {
			wantSegs = 6
			if r.Policy == "DeviceSide" {
				wantHostWaits = 3
			} else {
				wantDevWaits = 3
			}
		}
		if r.RocSegments != wantSegs || r.RocGraphs != wantSegs || len(r.RocGraphFallbacks) != 0 {
			t.Errorf("%s: %d segments, %d graphs (%q), want %d", name, r.RocSegments, r.RocGraphs, r.RocGraphFallbacks, wantSegs)
		}
		if r.RocReplayHostWaitsPerIter != wantHostWaits || r.RocReplayDeviceWaitsPerIter != wantDevWaits {
			t.Errorf("%s: %v host and %v device waits per replay, want %v and %v", name, r.RocReplayHostWaitsPerIter,
				r.RocReplayDeviceWaitsPerIter, wantHostWaits, wantDevWaits)
		}
		// The measured loop allocates what its four runs allocate alone:
		// counting rocsync's waits around its runs, and the harness,
		// allocate nothing per round (one allocation per round would
		// show as 1; a pool refill after the loop's collection, as a
		// few tenths).
		alone := r.RawEagerMallocsPerIter + r.RawGraphMallocsPerIter + r.RocEagerMallocsPerIter + r.RocReplayMallocsPerIter
		if !raceEnabled && r.LoopMallocsPerRound > alone+0.9 {
			t.Errorf("%s: the measured loop allocates %v per round, its runs alone %v", name, r.LoopMallocsPerRound, alone)
		}
		// 40 replays alone: one allocation per replay shows; a stray one
		// of the runtime's in the window does not fail the test.
		if !raceEnabled && (r.RocReplayMallocsPerIter >= 0.5 || r.RawGraphMallocsPerIter >= 0.5) {
			t.Errorf("%s: a replay allocates: rocsync %v, raw %v", name, r.RocReplayMallocsPerIter, r.RawGraphMallocsPerIter)
		}
		if r.RawChecksum == 0 || r.RawMaxRelErr > 1e-5 || r.RawGraphChecksum != r.RawChecksum || r.RocChecksum != r.RawChecksum {
			t.Errorf("%s: checksums raw %v, raw graph %v, rocsync %v; raw error %g", name, r.RawChecksum, r.RawGraphChecksum, r.RocChecksum, r.RawMaxRelErr)
		}
		// The fake cuBLAS computes a gemm at the call even while its
		// stream captures, so a recorded gemm whose input a recorded
		// kernel writes (mixed's) computed on the array before the
		// kernel ran: mixed's replay is checked on the GPU only.
		if (r.Program == "mixed") == r.SameChecksum || (r.Program != "mixed" && r.RocReplayChecksum != r.RawChecksum) {
			t.Errorf("%s: replay checksum %v, raw %v, same %v", name, r.RocReplayChecksum, r.RawChecksum, r.SameChecksum)
		}
	}

	// The JSON's names, as the H100 batch's scripts read them.
	var generic struct {
		Pairs []map[string]any `json:"replay_pairs"`
	}
	if err := json.Unmarshal(out.Bytes(), &generic); err != nil || len(generic.Pairs) == 0 {
		t.Fatalf("%v", err)
	}
	for _, k := range []string{"raw_eager_total_median_us", "raw_graph_total_median_us", "rocsync_eager_total_median_us",
		"rocsync_replay_total_median_us", "rocsync_replay_total_p90_us", "replay_over_raw_graph", "rocsync_replay_over_eager",
		"raw_graph_launch_median_us", "rocsync_replay_call_median_us", "replay_host_over_raw_launch_us", "same_checksum"} {
		if _, ok := generic.Pairs[0][k]; !ok {
			t.Errorf("JSON lacks %q: %v", k, generic.Pairs[0])
		}
	}

	// The tables.
	out.Reset()
	if err := run([]string{"-paired-raw", "-replay", "-backend", "cuda", "-n", "8", "-iters", "2", "-warmup", "0",
		"-programs", "chain99,elementwise", "-policies", "Unified"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Logf("\n%s", s)
	for _, want := range []string{"paired replay", "replay/raw graph", "replay/eager", "cuGraphLaunch med", "Replay() - launch"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	// Two rows for each program: the times, and the host costs.
	rows := map[string]int{}
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[1] == "Unified" {
			rows[f[0]]++
			if f[0] == "chain99" && f[2] == "99" && f[len(f)-1] != "true" {
				t.Errorf("chain99's host-cost row: %q", l)
			}
		}
	}
	if rows["chain99"] != 2 || rows["elementwise"] != 2 {
		t.Errorf("rows %v:\n%s", rows, s)
	}
	if strings.Contains(s, "checksums differ") {
		t.Errorf("checksums differ:\n%s", s)
	}
}

// chain99 in the eager paired mode: raw's chain99 against rocsync's,
// equal results (the same kernel, 99 times), 99 ops per iteration.
func TestPairedChain99OnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	var out, errOut bytes.Buffer
	if err := run([]string{"-paired-raw", "-backend", "cuda", "-programs", "chain99", "-n", "8", "-iters", "3", "-warmup", "1", "-json"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var po pairedOutput
	if err := json.Unmarshal(out.Bytes(), &po); err != nil {
		t.Fatal(err)
	}
	if len(po.Pairs) != 1 {
		t.Fatalf("%d pairs", len(po.Pairs))
	}
	r := po.Pairs[0]
	if r.RawProgram != "chain99" || r.Policy != "DeviceSide" || r.OpsPerIter != 99 || !r.SameChecksum || r.RawChecksum == 0 || r.RawMaxRelErr > 1e-5 {
		t.Errorf("%+v", r)
	}
}

// bench's chain99 runs raw's chain99 on rocsync: on the emulator its
// checksum is the float32 product y^100 elementwise (y = 1 + x), and its
// replay computes the same.
func TestChain99(t *testing.T) {
	rs := runJSON(t, "-programs", "chain99", "-policies", "DeviceSide,Unified", "-replay")
	if len(rs) != 4 {
		t.Fatalf("%d results", len(rs))
	}
	for _, r := range rs {
		if r.Checksum != rs[0].Checksum || r.Checksum == 0 || math.IsNaN(r.Checksum) || math.IsInf(r.Checksum, 0) {
			t.Errorf("%s %s: checksum %v, first %v", r.Program, r.tablePolicy(), r.Checksum, rs[0].Checksum)
		}
	}
}

// Each -replay-rounds order puts each replay after the run it names: its
// own side's eager iteration (own), the other side's (crossed), or the
// other replay (apart, where no replay follows an eager iteration), and
// every order runs each of the four runs once a round.
func TestReplayRoundsOrder(t *testing.T) {
	const rawEager, rawGraph, rocEager, rocReplay = 0, 1, 2, 3
	for _, c := range []struct {
		rounds                    replayRounds
		beforeGraph, beforeReplay int
	}{
		{roundsOwn, rawEager, rocEager},
		{"", rawEager, rocEager},
		{roundsCrossed, rocEager, rawEager},
		{roundsApart, rocReplay, rawGraph},
	} {
		// Two rounds of the measured loop, as it runs them.
		var seq []int
		for _, ph := range c.rounds.phases() {
			for range 2 {
				seq = append(seq, ph...)
			}
		}
		counts := map[int]int{}
		before := map[int]map[int]bool{rawGraph: {}, rocReplay: {}}
		for i, k := range seq {
			counts[k]++
			if i > 0 && (k == rawGraph || k == rocReplay) {
				before[k][seq[i-1]] = true
			}
		}
		for k := range 4 {
			if counts[k] != 2 {
				t.Errorf("%q: run %d ran %d times in two rounds (%v)", c.rounds, k, counts[k], seq)
			}
		}
		for k, want := range map[int]int{rawGraph: c.beforeGraph, rocReplay: c.beforeReplay} {
			if len(before[k]) != 1 || !before[k][want] {
				t.Errorf("%q: run %d follows %v, want only %d (%v)", c.rounds, k, before[k], want, seq)
			}
		}
	}
}

// Every order gives the four runs' times and equal checksums, and the
// JSON and the table say which order ran.
func TestPairedReplayRoundsOnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	for _, rounds := range []replayRounds{roundsCrossed, roundsApart} {
		var out, errOut bytes.Buffer
		if err := run([]string{"-paired-raw", "-replay", "-backend", "cuda", "-n", "8", "-iters", "6", "-warmup", "1", "-json",
			"-programs", "chain99", "-policies", "DeviceSide", "-replay-rounds", string(rounds)}, &out, &errOut); err != nil {
			t.Fatalf("%s: %v\n%s", rounds, err, errOut.String())
		}
		var po pairedReplayOutput
		if err := json.Unmarshal(out.Bytes(), &po); err != nil {
			t.Fatalf("%s: %v", rounds, err)
		}
		if po.Meta.ReplayRounds != string(rounds) || len(po.Pairs) != 1 {
			t.Fatalf("%s: meta says %q, %d pairs", rounds, po.Meta.ReplayRounds, len(po.Pairs))
		}
		r := po.Pairs[0]
		if r.RawEagerTotalMedianUS <= 0 || r.RawGraphTotalMedianUS <= 0 || r.RocEagerTotalMedianUS <= 0 || r.RocReplayTotalMedianUS <= 0 ||
			r.RawLaunchMedianUS <= 0 || r.RocReplayCallMedUS <= 0 || !r.SameChecksum {
			t.Errorf("%s: %+v", rounds, r)
		}
		out.Reset()
		if err := run([]string{"-paired-raw", "-replay", "-backend", "cuda", "-n", "8", "-iters", "2", "-warmup", "0",
			"-programs", "elementwise", "-policies", "DeviceSide", "-replay-rounds", string(rounds)}, &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if want := "rounds " + string(rounds) + ":"; !strings.Contains(out.String(), want) {
			t.Errorf("the table does not say %q:\n%s", want, out.String())
		}
	}
}

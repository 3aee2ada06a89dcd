package rocsync

// The differential fuzz harness's tests: a bounded, deterministic run for
// CI, a go test -fuzz target for longer runs, and the proof that the
// harness fails when rocsync's waits are removed.
//
// Replay a CI seed:      ROCSYNC_FUZZ_SEED=17 go test -run 'TestFuzzPrograms$' -v .
// Run more CI seeds:     ROCSYNC_FUZZ_SEEDS=500 go test -run 'TestFuzzPrograms$' .
// Fuzz:                  go test -run '^$' -fuzz FuzzPrograms -fuzztime 10m .

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rocsync/rocsync/syncstate"
)

// fuzzSeedInputLen is the length of a CI seed's input: enough for about
// 60 ops.
const fuzzSeedInputLen = 400

// fuzzCISeeds is how many seeds the bounded run checks under every
// policy: about a minute under -race on a 2-core machine, a couple of
// seconds with -short. ROCSYNC_FUZZ_SEED replays one seed and
// ROCSYNC_FUZZ_SEEDS runs more.
func fuzzCISeeds() (first, n uint64) {
	if s := os.Getenv("ROCSYNC_FUZZ_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err == nil {
			return v, 1
		}
	}
	if s := os.Getenv("ROCSYNC_FUZZ_SEEDS"); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return 1, v
		}
	}
	if testing.Short() {
		return 1, 20
	}
	// Measured on the shared 2-core development machine under -race:
	// 800 seeds took 55–66 s, so 700 is about a minute (without -race,
	// 100 seeds take about 7 s).
	return 1, 700
}

// checkProgram runs one program under every policy and fails t with the
// program, the seed and the replay command on any difference.
func checkProgram(t *testing.T, in []byte, replay string) {
	t.Helper()
	p := decodeProgram(in)
	want := runModel(p, 0)
	for _, pol := range syncstate.Policies {
		rep := runFuzzProgram(p, want, fuzzConfig{policy: pol, seed: uint64(len(in)) ^ uint64(pol), maxDelay: 20 * time.Microsecond, hazards: true})
		if !rep.ok() {
			t.Fatalf("%s under %v:\n%v\n%v", replay, pol, rep, p)
		}
	}
}

// TestFuzzPrograms is the bounded CI run: random multi-task programs,
// decoded from seeded inputs, under every policy with the hazard checker
// and random delays, compared with the CPU model.
func TestFuzzPrograms(t *testing.T) {
	if gpuRun() {
		t.Skip("needs the emulator: the hazard checker")
	}
	first, n := fuzzCISeeds()
	start := time.Now()
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			checkProgram(t, seedInput(seed, fuzzSeedInputLen),
				fmt.Sprintf("seed %d (replay: ROCSYNC_FUZZ_SEED=%d go test -run 'TestFuzzPrograms$' -v .)", seed, seed))
		})
	}
	t.Logf("%d seeds × %d policies in %v", n, len(syncstate.Policies), time.Since(start))
}

// FuzzPrograms is the long-running form: the fuzz input encodes the
// program (see decodeProgram); every input decodes to a valid one.
func FuzzPrograms(f *testing.F) {
	for seed := uint64(1); seed <= 6; seed++ {
		f.Add(seedInput(seed, fuzzSeedInputLen))
	}
	f.Add([]byte{})                       // two tasks, no ops
	f.Add([]byte{2, 0, 3, 3, 0, 0, 1, 1}) // four tasks, 4×4
	f.Fuzz(func(t *testing.T, in []byte) {
		checkProgram(t, in, fmt.Sprintf("fuzz input %q", in))
	})
}

// The harness must be able to fail: with rocsync's waits disabled, the
// same programs must produce a hazard report (serial submission keeps Go's
// race detector out of it: each op runs to completion before the next is
// submitted, unobserved by the host, so only the checker sees the missing
// order).
func TestFuzzHarnessFailsWithoutWaits(t *testing.T) {
	if gpuRun() {
		t.Skip("needs the emulator: the hazard checker")
	}
	for _, pol := range syncstate.Policies {
		t.Run(pol.String(), func(t *testing.T) {
			caught := 0
			const seeds = 3
			for seed := uint64(1); seed <= seeds; seed++ {
				p := decodeProgram(seedInput(seed, fuzzSeedInputLen))
				want := runModel(p, 0)
				cfg := fuzzConfig{policy: pol, seed: seed, hazards: true, serial: true}
				// With waits on, the serial form passes...
				require := runFuzzProgram(p, want, cfg)
				if !require.ok() {
					t.Fatalf("seed %d with waits: %v\n%v", seed, require, p)
				}
				// ...and without them the harness reports it.
				cfg.disableWaits = true
				rep := runFuzzProgram(p, want, cfg)
				if rep.hung {
					t.Fatalf("seed %d without waits hung: %v", seed, rep)
				}
				if len(rep.hazards) > 0 || len(rep.mismatches) > 0 {
					caught++
				} else {
					t.Logf("seed %d without waits: %v", seed, rep)
				}
			}
			if caught != seeds {
				t.Fatalf("the harness missed the disabled waits in %d of %d programs", seeds-caught, seeds)
			}
		})
	}
}

// Without the race detector, the concurrent form must also fail on values
// alone (hazard checker off): the model comparison itself can fail.
func TestFuzzHarnessFailsWithoutWaitsOnValues(t *testing.T) {
	if gpuRun() {
		t.Skip("needs the emulator's test-only switch")
	}
	if raceEnabled {
		t.Skip("unordered device work is a Go data race; TestFuzzHarnessFailsWithoutWaits covers -race")
	}
	for _, pol := range []Policy{SkipSameQueue, DeviceSide, DeviceBridge} {
		t.Run(pol.String(), func(t *testing.T) {
			for seed := uint64(1); seed <= 40; seed++ {
				p := decodeProgram(seedInput(seed, fuzzSeedInputLen))
				rep := runFuzzProgram(p, runModel(p, 0), fuzzConfig{policy: pol, seed: seed,
					maxDelay: 200 * time.Microsecond, disableWaits: true})
				if rep.hung {
					t.Fatalf("seed %d hung: %v", seed, rep)
				}
				if len(rep.mismatches) > 0 {
					t.Logf("seed %d: %s", seed, rep.mismatches[0])
					return
				}
			}
			t.Fatal("no program produced a wrong value with the waits disabled")
		})
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/internal/measure"
)

// The data-parallel mlp on 2 and 4 emulated devices, with the hazard
// checker and random delays: every device ends with the parameters of the
// 1-device run on the whole batch, within float tolerance, the
// collectives add no host wait, and the harness computes the efficiency.
func TestDataParallelMLPEqualsOneDevice(t *testing.T) {
	for _, n := range []int{2, 4} {
		cfg := config{iters: 3, warmup: 1, seed: 3, backend: rocsync.Emulator, devices: n, hazards: true,
			emuDelay: 20 * time.Microsecond, mlp: mlpSizes{batch: 32, in: 12, hidden: 16, out: 4},
			policies: []rocsync.Policy{rocsync.DeviceSide, rocsync.Unified}, now: time.Now}
		rs, err := runDP(cfg)
		if err != nil {
			t.Fatalf("%d devices: %v", n, err)
		}
		if len(rs) != 4 {
			t.Fatalf("%d results, want 4", len(rs))
		}
		if err := checkDP(rs); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(rs); i += 2 {
			one, many := rs[i], rs[i+1]
			if one.Devices != 1 || many.Devices != n || one.Policy != many.Policy {
				t.Fatalf("results out of order: %+v %+v", one, many)
			}
			if one.MaxDiffW1 != 0 || many.MaxDiffW1 > 1e-6 || many.RelDiffW1 > 1e-3 {
				t.Fatalf("%s: |ΔW1| %g (1 device), %g (%d devices)", one.Policy, one.MaxDiffW1, many.MaxDiffW1, n)
			}
			// Each device makes at most the crossings of the 1-device step:
			// the all-reduces on the library stream add none. (Fewer is
			// fine: a crossing whose producer already completed is no
			// wait, which the emulator's timing decides.)
			if many.HostWaitsPerStep > float64(n)*math.Ceil(one.HostWaitsPerStep) {
				t.Fatalf("%s: %g host waits per step on %d devices, %g on 1", one.Policy, many.HostWaitsPerStep, n, one.HostWaitsPerStep)
			}
			if one.Efficiency != 1 || many.Efficiency <= 0 || many.StepMedian <= 0 || many.SamplesPerSecond <= 0 {
				t.Fatalf("%s: efficiency %g, step %g µs, %g samples/s", one.Policy, many.Efficiency, many.StepMedian, many.SamplesPerSecond)
			}
		}
	}
}

// The control: without the all-reduces each device trains on its shard
// alone, and the comparison catches it.
func TestDataParallelMLPWithoutAllReduceDiffers(t *testing.T) {
	cfg := config{iters: 3, warmup: 0, seed: 3, backend: rocsync.Emulator, devices: 2, dpSkipAllReduce: true,
		mlp: mlpSizes{batch: 32, in: 12, hidden: 16, out: 4}, policies: []rocsync.Policy{rocsync.DeviceSide}, now: time.Now}
	rs, err := runDP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDP(rs); err == nil || !strings.Contains(err.Error(), "differs from the 1-device run") || rs[1].MaxDiffW1 < 1e-4 {
		t.Fatalf("checkDP: %v (|ΔW1| %g, %g of the movement)", err, rs[1].MaxDiffW1, rs[1].RelDiffW1)
	}
	require.Greater(t, rs[1].FirstStepRelMeanDiffW1, 0.1, "the first step alone shows the missing all-reduce")
	t.Logf("without the all-reduce: |ΔW1| %g, %g of the movement, %g on average, %g after the first step",
		rs[1].MaxDiffW1, rs[1].RelDiffW1, rs[1].RelMeanDiffW1, rs[1].FirstStepRelMeanDiffW1)
}

// A shard's parameters start as the whole MLP's, and its data are the
// whole batch's rows.
func TestMLPShardsSplitTheBatch(t *testing.T) {
	sz := mlpSizes{batch: 8, in: 3, hidden: 4, out: 2}
	whole := newMLP(sz, 5)
	for k := range 2 {
		s := newMLPShard(sz, 5, 2, k)
		if s.sizes.batch != 4 || len(s.specs) != len(whole.specs) || s.backwardEnd != whole.backwardEnd {
			t.Fatalf("shard %d: %v, %d arrays, backward ends at %d", k, s.sizes, len(s.specs), s.backwardEnd)
		}
		for i, sp := range s.specs {
			w := whole.specs[i]
			switch sp.name {
			case "X", "Y":
				n := len(sp.init)
				if !slicesEqual(sp.init, w.init[k*n:(k+1)*n]) {
					t.Fatalf("shard %d: %s is not rows %d..%d", k, sp.name, k*4, k*4+4)
				}
			case "W1", "b1", "W2", "b2":
				if !slicesEqual(sp.init, w.init) {
					t.Fatalf("shard %d: %s differs", k, sp.name)
				}
			}
		}
	}
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// bench -programs dp-mlp prints its table and records the runs in the JSON.
func TestDataParallelCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"-backend", "emulator", "-programs", "dp-mlp", "-devices", "2", "-iters", "2", "-warmup", "0",
		"-policies", "DeviceSide", "-batch", "8", "-in", "4", "-hidden", "4", "-out", "2", "-json"}
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var o output
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	if len(o.DataParallel) != 2 || o.DataParallel[1].Devices != 2 || len(o.Results) != 0 {
		t.Fatalf("%s", out.String())
	}
	out.Reset()
	if err := run(args[:len(args)-1], &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "efficiency") {
		t.Fatalf("no table:\n%s", out.String())
	}
	if err := run(append(args[:len(args):len(args)], "-devices", "0"), &out, &errOut); err == nil {
		t.Fatal("-devices 0 accepted")
	}
	if err := run([]string{"-backend", "emulator", "-programs", "dp-mlp", "-devices", "3", "-batch", "8", "-iters", "1"}, &out, &errOut); err == nil ||
		!strings.Contains(err.Error(), "does not split") {
		t.Fatalf("batch 8 over 3 devices: %v", err)
	}
}

// checkDP bounds the mean difference after the first step, not the
// largest: a few elements whose Adam update flipped sign (a gradient
// within float32 rounding of zero, which a realistic W1's millions of
// elements always have) pass; a large fraction of them, as without the
// all-reduce, does not. Two policies that end at different parameters
// fail whatever the 1-device run says.
func TestCheckDPBoundsTheFirstStepAndComparesPolicies(t *testing.T) {
	const n, lr = 1 << 16, 1e-3
	start := make([]float32, n)
	one := make([]float32, n)
	for i := range one {
		one[i] = lr // every element moved by lr in its first step
	}
	flip := func(every int) []float32 {
		w := slices.Clone(one)
		for i := 0; i < n; i += every {
			w[i] = -w[i] // moved the other way
		}
		return w
	}
	result := func(policy string, w []float32) dpResult {
		return dpResult{Program: dpProgram, Devices: 2, Policy: policy, MaxDiffW1: maxAbsDiff(one, w),
			RelDiffW1:              maxAbsDiff(one, w) / maxAbsDiff(start, one),
			FirstStepRelMeanDiffW1: meanAbsDiff(one, w) / meanAbsDiff(start, one),
			Checksum:               measure.Checksum(w)}
	}
	noise := result("DeviceSide", flip(10_000)) // 7 of 65,536 elements
	require.Greater(t, noise.RelDiffW1, float64(dpRelTolerance), "the largest difference is over the tolerance")
	require.NoError(t, checkDP([]dpResult{noise, result("Unified", flip(10_000))}))
	wrong := result("DeviceSide", flip(4)) // a quarter of them
	require.ErrorContains(t, checkDP([]dpResult{wrong}), "after the first step differs")
	other := result("Unified", flip(5_000)) // within the bound, but not what DeviceSide computed
	require.ErrorContains(t, checkDP([]dpResult{noise, other}), "W1 under Unified")
	nan := noise
	nan.FirstStepRelMeanDiffW1 = math.NaN()
	require.Error(t, checkDP([]dpResult{nan}))
}

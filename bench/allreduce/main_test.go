package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testcheck"
)

// Both shapes on the emulator: one result per size, checked sums (run
// fails otherwise), and no host wait while the all-reduces are submitted.
func TestAllReduceShapesOnEmulator(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		submit string // in the results: one process only
	}{
		{[]string{"-devices", "4"}, "threads"},
		{[]string{"-devices", "4", "-submit", "group"}, "group"},
		{[]string{"-devices", "2", "-procs"}, ""},
		{[]string{"-devices", "4", "-procs", "-policy", "DeviceSide"}, ""},
	} {
		args := tc.args
		var out bytes.Buffer
		all := append([]string{"-backend", "emulator", "-sizes", "4KiB,64KiB", "-rounds", "2", "-batch", "3", "-warmup", "1", "-json"}, args...)
		require.NoError(t, run(all, &out, io.Discard), "%v", args)
		var rs []result
		require.NoError(t, json.Unmarshal(out.Bytes(), &rs))
		require.Len(t, rs, 2, "%v", args)
		for i, r := range rs {
			require.Equal(t, []int{4 << 10, 64 << 10}[i], r.Bytes)
			require.Positive(t, r.MedianUS)
			require.Zero(t, r.HostWaits, "%v: host waits while submitting", args)
			require.Equal(t, tc.submit, r.Submit, "%v", args)
		}
	}
}

func TestAllReduceBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-sizes", "3B"}, {"-sizes", "-1MiB"}, {"-sizes", "x"}, {"-devices", "0"}, {"-backend", "tpu"}, {"-policy", "Often"},
		{"-submit", "both"},
	} {
		require.Error(t, run(args, io.Discard, io.Discard), "%v", args)
	}
}

// -raw is one process on CUDA: parse refuses it elsewhere and with -procs
// (run would fail too on a machine without CUDA, but only when it tried
// to open libcuda).
func TestAllReduceRawFlags(t *testing.T) {
	for _, args := range [][]string{{"-raw"}, {"-raw", "-backend", "emulator"}, {"-raw", "-backend", "cuda", "-procs"}} {
		_, err := parse(args, io.Discard)
		require.Error(t, err, "%v", args)
	}
	cfg, err := parse([]string{"-raw", "-backend", "cuda", "-submit", "group"}, io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.raw)
}

// -lockstep is a variant of -raw's threads: parse refuses it anywhere else.
func TestAllReduceLockstepFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-lockstep", "-backend", "cuda"},
		{"-lockstep", "-raw", "-backend", "cuda", "-submit", "group"},
		{"-lockstep", "-backend", "cuda", "-procs"},
	} {
		_, err := parse(args, io.Discard)
		require.Error(t, err, "%v", args)
	}
	cfg, err := parse([]string{"-raw", "-lockstep", "-backend", "cuda"}, io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.lockstep)
}

// The lock-step barrier holds every thread until all have reached it, and
// once broken holds none.
func TestSpinBarrier(t *testing.T) {
	const n, steps = 3, 100
	b := &spinBarrier{n: n}
	var reached [n]atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for s := range int64(steps) {
				reached[i].Store(s + 1)
				if !b.wait() {
					t.Error("the barrier broke unbroken")
					return
				}
				for j := range n { // nobody is behind this step
					if reached[j].Load() < s+1 {
						t.Errorf("thread %d passed step %d before thread %d reached it", i, s, j)
					}
				}
			}
		})
	}
	wg.Wait()
	b.breakAll()
	// One thread alone: unbroken, it would wait for ever.
	require.False(t, testcheck.Within(t, "a broken barrier's wait", b.wait))
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int{"4": 4, "1KiB": 1024, "1MiB": 1 << 20, "2GiB": 2 << 30, "8B": 8} {
		got, err := parseSize(s)
		require.NoError(t, err)
		require.Equal(t, want, got, s)
	} // A product past the int range wrapped round and ran as a small size.
	for _, s := range []string{"17592186044417MiB", "9223372036854775807GiB", "0", "-4", "3", "x"} {
		_, err := parseSize(s)
		require.Error(t, err, s)
	}
}

// A bad command line is a usage error (exit status 2; every one was 1),
// -h is no failure, and arguments or flags that would be ignored are
// refused.
func TestCommandLineErrors(t *testing.T) {
	require.ErrorIs(t, run([]string{"-h"}, io.Discard, io.Discard), flag.ErrHelp)
	for _, args := range [][]string{
		{"-devices", "0"}, {"-sizes", "17592186044417MiB"}, {"-no-such-flag"}, {"extra"},
		{"-procs", "-submit", "group"}, {"-policy", "Sometimes"},
	} {
		var ue usageError
		require.ErrorAs(t, run(args, io.Discard, io.Discard), &ue, "%q", args)
	}
}

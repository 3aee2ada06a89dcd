//go:build !rocsync_notrace

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/tracecheck"
)

// bench -trace records the mixed and mlp programs under every policy into
// one file, a process per program/policy, and each process shows what the
// run's counters count: its tracks, an op slice per dispatch, a host-wait
// slice per host wait by reason, and a flow to every wait from its
// producer.
func TestTraceOfMixedAndMLP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	cfg := config{n: 16, iters: 3, warmup: 1, repeat: 3, mlp: mlpSizes{8, 8, 8, 4}, seed: 1,
		backend: rocsync.Emulator, emuDelay: 20 * time.Microsecond, trace: rocsync.NewTraceFile(path)}
	want := map[string]rocsync.Stats{}
	for _, name := range []string{"mixed", "mlp"} {
		prog, err := programByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, pol := range []rocsync.Policy{rocsync.WaitAlways, rocsync.SkipSameQueue, rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge} {
			pr, err := newPolicyRun(cfg, prog, pol, false)
			if err != nil {
				t.Fatal(err)
			}
			d := pr.d
			for i := 0; i < cfg.warmup+cfg.iters; i++ {
				if err := pr.step(i); err != nil {
					t.Fatal(err)
				}
			}
			if err := pr.close(); err != nil {
				t.Fatal(err)
			}
			want[name+"/"+pol.String()] = d.Stats()
		}
	}
	if err := cfg.trace.Flush(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracecheck.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Processes) != len(want) {
		t.Fatalf("%d processes, want %d: %v", len(tr.Processes), len(want), tr.Processes)
	}
	for process, st := range want {
		// On the emulator every op's queue or stream times it on the
		// device (its 100 MHz clock ticks every 10 ns).
		c := tracecheck.Counts{Dispatches: st.Dispatches, DeviceWaits: st.DeviceWaits, HostWaits: map[string]uint64{},
			GPUSpans: st.Dispatches, ClockSkew: 0.01}
		for _, r := range []rocsync.Reason{rocsync.ReasonBoundary, rocsync.ReasonCrossQueue, rocsync.ReasonReadBack, rocsync.ReasonSync,
			rocsync.ReasonFree, rocsync.ReasonThrottle, rocsync.ReasonWaitAlways, rocsync.ReasonLaunchBlocking} {
			c.HostWaits[r.String()] = st.HostWaits[r]
		}
		if err := tr.Check(process, c); err != nil {
			t.Errorf("%s (%v): %v", process, st, err)
		}
		// The tracks: the host's, and the task's queue and stream (one
		// stream under Unified), each with its GPU track.
		pid, _ := tr.ProcessByName(process)
		names := tr.TrackNames(pid)
		wantTracks := 5
		if strings.HasSuffix(process, "/Unified") {
			wantTracks = 3
		}
		if len(names) != wantTracks || names[len(names)-1] != "host" {
			t.Errorf("%s: tracks %v, want %d with host", process, names, wantTracks)
		}
		for _, n := range names[:len(names)-1] {
			if !strings.HasPrefix(n, "gpu0/hsa-q") && !strings.HasPrefix(n, "gpu0/hip-s") || strings.Count(n, tracecheck.GPUSuffix) > 1 {
				t.Errorf("%s: track %q", process, n)
			}
		}
	}
}

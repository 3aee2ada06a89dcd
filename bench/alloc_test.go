package main

import (
	"testing"

	"github.com/rocsync/rocsync"
)

// One iteration of a seed program, as the harness runs it (submit,
// Synchronize, free the temporaries), allocates exactly its new arrays'
// Go values: nothing in rocsync's op path or in the harness allocates per
// iteration, so the allocation counts that -paired-raw reports are the
// arrays'. matmul and elementwise make 3 arrays, chain99 99, mixed 2 per
// repetition, the mlp step none.
func TestSeedIterationAllocatesOnlyItsArrays(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	cfg := config{n: 16, repeat: 3, seed: 1, mlp: mlpSizes{16, 16, 16, 16}}
	want := map[string]float64{"matmul": 3, "elementwise": 3, "mixed": 6, "mlp": 0, "chain99": 99}
	for _, pol := range []rocsync.Policy{rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge} {
		for _, p := range programs {
			t.Run(pol.String()+"/"+p.name, func(t *testing.T) {
				d, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, Policy: pol, LogLevel: rocsync.LogOff})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				r := &rocSide{t: d.DefaultTask()}
				if r.st, err = p.setup(d, r.t, cfg); err != nil {
					t.Fatal(err)
				}
				defer r.st.free()
				var iterErr error
				iterate := func() {
					if _, _, _, err := r.iterate(false); err != nil && iterErr == nil {
						iterErr = err
					}
				}
				for range 200 {
					iterate()
				}
				before := d.Stats().EventsRecorded
				const runs = 300
				got := testing.AllocsPerRun(runs, iterate)
				if iterErr != nil {
					t.Fatal(iterErr)
				}
				// The emulator's hipEventRecord allocates its record (a
				// C call on a GPU): a host wait for an older op on a HIP
				// stream records one (mlp's crossings under DeviceSide).
				events := float64((d.Stats().EventsRecorded - before) / (runs + 1))
				if got != want[p.name]+events {
					t.Fatalf("%v allocations per iteration, want %v (the new arrays) + %v (the emulator's event records)", got, want[p.name], events)
				}
			})
		}
	}
}

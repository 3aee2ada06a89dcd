package main

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/internal/measure"
)

// BenchmarkMixedDispatchInterleave measures, in one process, mixed's
// DeviceSide dispatch time the way bench runs it one policy after another
// (sequential) and the way -interleave runs it (a WaitAlways iteration on
// a second device between two DeviceSide iterations), alternating the two
// modes in blocks of 10 iterations so that both see the same machine load.
// It reports each mode's median and p90 dispatch and the share of
// iterations whose dispatch exceeded 500 µs (on the emulator, a 128³ sgemm
// takes about 1.2 ms: such an iteration waited behind the HIP stream's
// gemm). Run with GOMAXPROCS 1 and 2:
//
//	go test -run '^$' -bench MixedDispatchInterleave -benchtime 1x ./bench
//
// docs/benchmarks.md ("-interleave and the 1 ms dispatch medians") has
// the results and the explanation.
func BenchmarkMixedDispatchInterleave(b *testing.B) {
	for _, procs := range []int{1, 2} {
		b.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			cfg, err := parseFlags([]string{"-backend", "emulator", "-programs", "mixed"}, nil)
			if err != nil {
				b.Fatal(err)
			}
			prog, _ := programByName("mixed")
			ds, err := newPolicyRun(cfg, prog, rocsync.DeviceSide, false)
			if err != nil {
				b.Fatal(err)
			}
			defer ds.close()
			wa, err := newPolicyRun(cfg, prog, rocsync.WaitAlways, false)
			if err != nil {
				b.Fatal(err)
			}
			defer wa.close()
			const rounds, block = 20, 10
			var seq, inter []float64

			for n := 0; n < b.N; n++ {
				for i := 0; i < cfg.warmup; i++ {
					if err := errorsOf(ds.step(i), wa.step(i)); err != nil {
						b.Fatal(err)
					}
				}
				for r := 0; r < rounds; r++ {
					for _, interleaved := range []bool{r%2 == 0, r%2 != 0} {
						for i := 0; i < block; i++ {
							ds.dispatch = ds.dispatch[:0]
							if err := ds.step(cfg.warmup); err != nil {
								b.Fatal(err)
							}

							if interleaved {
								if err := wa.step(cfg.warmup); err != nil {
									b.Fatal(err)
								}
								inter = append(inter, ds.dispatch[0])
							} else {
								seq = append(seq, ds.dispatch[0])
							}
						}
					}
				}
			}
			report := func(name string, xs []float64) {
				b.ReportMetric(measure.Quantile(xs, 0.5), name+"-median-µs")
				b.ReportMetric(measure.Quantile(xs, 0.9), name+"-p90-µs")
				slow := 0
				for _, x := range xs {
					if x > 500 {
						slow++
					}
				}
				b.ReportMetric(100*float64(slow)/float64(len(xs)), name+"-over-500µs-%")
			}
			report("sequential", seq)
			report("interleaved", inter)

		})
	}
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

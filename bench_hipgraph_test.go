package rocsync

import (
	"testing"
)

// BenchmarkUnifiedChain99 times the host's cost of the 99-op chain under
// Unified on the emulator (checker and delays off), all of it on the HIP
// stream: eager (99 stream submissions, each one hipModuleLaunchKernel),
// replayed as a hipGraph (one op, one hipGraphLaunch), and replayed as the
// in-order re-issue of the recorded calls (one op, one stream submission
// that makes the 99 hipModuleLaunchKernel calls; forced by making the
// emulated HIP lack the hipGraph API). As in BenchmarkReplayChain99 the
// timer runs only while the emulated GPU is held, ten iterations at a
// time, so ns/op is the host's cost per chain.
func BenchmarkUnifiedChain99(b *testing.B) {
	for _, mode := range []string{"eager", "reissue", "hipgraph"} {
		b.Run(mode, func(b *testing.B) {
			d := benchDevice(b, Unified)
			t := d.DefaultTask()
			x, err := d.FromFloat32(1, 64, make([]float32, 64))
			must(b, err)
			hp := d.machine().HIP()
			hp.SetGraphsUnavailable(mode == "reissue")
			step := func() error { return scaleChain(t, x) }
			if mode != "eager" {
				rec, err := t.Record(step)
				must(b, err)
				defer func() { must(b, rec.Close()) }()
				if graphs, _ := rec.Graphs(); graphs != map[string]int{"reissue": 0, "hipgraph": 1}[mode] {
					b.Fatalf("%s: %d graphs", mode, graphs)
				}
				step = rec.Replay
			}
			for range 64 {
				must(b, step())
			}
			must(b, t.Synchronize())
			launches := hp.GraphLaunches()
			const batch = 10
			benchHeld(b, d, t, batch, step)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chainLen), "ns/chained-op")
			b.ReportMetric(float64(hp.GraphLaunches()-launches)/float64(b.N), "graph-launches/iter")
			must(b, t.Synchronize())
		})
	}
}

package rocsync

import (
	"io"
	"testing"
)

// BenchmarkTraceOverhead is BenchmarkSameQueueSubmit with the trace off
// and on, as sub-benchmarks that alternate under -count: "off" is the
// path every untraced program takes (a nil check per step of an op), "on"
// records every op, its decisions and its device times (written to
// io.Discard at Close). Besides wall time it reports cpu-ns/op, the
// process's CPU time (every thread, the emulated device's included) per
// op, which other processes on a shared host inflate less.
// bench/tracecost compares "off" with a build without the trace
// (rocsync_notrace).
func BenchmarkTraceOverhead(b *testing.B) {
	for _, v := range []struct {
		name  string
		trace bool
	}{{"off", false}, {"on", true}} {
		b.Run(v.name, func(b *testing.B) {
			o := Options{Backend: Emulator, Policy: DeviceSide, LogLevel: LogOff, QueueSize: benchQueue}
			if v.trace {
				o.Trace = NewTrace(io.Discard)
			}
			d, err := Open(o)
			must(b, err)
			b.Cleanup(func() { _ = d.Close() })
			t := d.DefaultTask()
			x, err := d.FromFloat32(1, 64, make([]float32, 64))
			must(b, err)
			for i := 0; i < warmup(b); i++ {
				must(b, t.ScaleInto(x, 1, x))
			}
			must(b, t.Synchronize())
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				must(b, t.ScaleInto(x, 1, x))
			}
			must(b, t.Synchronize())
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

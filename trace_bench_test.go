package rocsync

import (
	"io"
	"testing"

	"github.com/rs/zerolog"
)

// BenchmarkTraceOverhead is BenchmarkSameQueueSubmit with the trace off
// and on, as sub-benchmarks that alternate under -count: "off" is the
// path every untraced program takes (a nil check per step of an op), "on"
// records every op and its decisions (written to io.Discard at Close).
func BenchmarkTraceOverhead(b *testing.B) {
	for _, v := range []struct {
		name  string
		trace bool
	}{{"off", false}, {"on", true}} {
		b.Run(v.name, func(b *testing.B) {
			nop := zerolog.Nop()
			o := Options{Backend: Emulator, Policy: DeviceSide, Logger: &nop, QueueSize: benchQueue}
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
			for i := 0; i < b.N; i++ {
				must(b, t.ScaleInto(x, 1, x))
			}
			b.StopTimer()
			must(b, t.Synchronize())
		})
	}
}

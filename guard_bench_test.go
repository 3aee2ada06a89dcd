package rocsync

import (
	"sync/atomic"
	"testing"
)

// BenchmarkTaskUseCheck is the cost per op of detecting a Task used by two
// goroutines at once: the begin/end pair every op makes (one
// compare-and-swap of the interned op name and one store), uncontended.
// It needs no device: an open emulator's goroutines would share the CPU
// with the loop. cpu-ns/op is the process's CPU time per op, which unlike
// wall time does not grow while other processes hold the CPUs; the "bare"
// variant is the least any such check costs (a compare-and-swap and a
// store of a constant), for comparison in the same process.
func BenchmarkTaskUseCheck(b *testing.B) {
	b.Run("check", func(b *testing.B) {
		t := new(Task)
		name := "Scale"
		b.ReportAllocs()
		c0 := processCPU()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := t.begin(name); err != nil {
				b.Fatal(err)
			}
			t.end()
		}
		b.StopTimer()
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("bare", func(b *testing.B) {
		var w atomic.Uint64
		c0 := processCPU()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if !w.CompareAndSwap(0, 1) {
				b.Fatal("taken")
			}
			w.Store(0)
		}
		b.StopTimer()
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

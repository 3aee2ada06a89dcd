package rocsync

import (
	"io"
	"testing"
)

// The hot-path benchmarks run on the emulator with the checker and delays
// off, so they measure rocsync's own submission path (sync decision, packet
// write, doorbell) and the emulator's cost to take the packet.

// benchQueue is the ring size; warm-ups submit several rings' worth so
// that the signal pool has reached the most work ever in flight.
const benchQueue = 1024

// warmup is as many ops as the measured run, and at least 16 rings: the
// signal pool grows to the most work ever in flight at once, which a run of
// the same length rarely exceeds again.
func warmup(b *testing.B) int { return max(b.N, 16*benchQueue) }

// benchDevice opens the emulator with logging at its default level, as a
// user's program would.
func benchDevice(b *testing.B, p Policy) *Device {
	b.Helper()
	d, err := Open(Options{Backend: Emulator, Policy: p, QueueSize: benchQueue})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSameQueueSubmit: x = 1·x on one task, over and over: the sync
// core skips every wait.
func BenchmarkSameQueueSubmit(b *testing.B) {
	d := benchDevice(b, DeviceSide)
	t := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	must(b, err)
	for i := 0; i < warmup(b); i++ { // warm the pools
		must(b, t.ScaleInto(x, 1, x))
	}
	must(b, t.Synchronize())
	sig, ev := d.SignalsCreated(), d.EventsCreated()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(b, t.ScaleInto(x, 1, x))
	}
	b.StopTimer()
	must(b, t.Synchronize())
	b.ReportMetric(float64(d.SignalsCreated()-sig)/float64(b.N), "signals/op")
	b.ReportMetric(float64(d.EventsCreated()-ev)/float64(b.N), "events/op")
}

// BenchmarkCrossQueueSubmit: two tasks take turns writing one array, so
// every op waits on the device (a barrier-AND packet) for the other queue.
func BenchmarkCrossQueueSubmit(b *testing.B) {
	d := benchDevice(b, DeviceSide)
	t1, err := d.NewTask()
	must(b, err)
	t2, err := d.NewTask()
	must(b, err)
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	must(b, err)
	tasks := [2]*Task{t1, t2}
	for i := 0; i < warmup(b); i++ {
		must(b, tasks[i&1].ScaleInto(x, 1, x))
	}
	must(b, d.Synchronize())
	sig, ev := d.SignalsCreated(), d.EventsCreated()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(b, tasks[i&1].ScaleInto(x, 1, x))
	}
	b.StopTimer()
	must(b, d.Synchronize())
	b.ReportMetric(float64(d.SignalsCreated()-sig)/float64(b.N), "signals/op")
	b.ReportMetric(float64(d.EventsCreated()-ev)/float64(b.N), "events/op")
}

// BenchmarkCrossQueueSubmitDebugLog is BenchmarkCrossQueueSubmit with
// every sync decision logged (LogDebug, to io.Discard): what debug
// logging costs per op.
func BenchmarkCrossQueueSubmitDebugLog(b *testing.B) {
	d, err := Open(Options{Backend: Emulator, QueueSize: benchQueue, LogLevel: LogDebug, LogWriter: io.Discard})
	must(b, err)
	b.Cleanup(func() { _ = d.Close() })
	t1, err := d.NewTask()
	must(b, err)
	t2, err := d.NewTask()
	must(b, err)
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	must(b, err)
	tasks := [2]*Task{t1, t2}
	for i := 0; i < warmup(b); i++ {
		must(b, tasks[i&1].ScaleInto(x, 1, x))
	}
	must(b, d.Synchronize())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(b, tasks[i&1].ScaleInto(x, 1, x))
	}
	b.StopTimer()
	must(b, d.Synchronize())
}

// BenchmarkBoundaryOp: a kernel then a gemm reading its result: one host
// wait at the HSA→HIP crossing per pair.
func BenchmarkBoundaryOp(b *testing.B) {
	d := benchDevice(b, DeviceSide)
	t := d.DefaultTask()
	x, err := d.FromFloat32(4, 4, make([]float32, 16))
	must(b, err)
	y, err := d.Empty(4, 4, Float32)
	must(b, err)
	c, err := d.Empty(4, 4, Float32)
	must(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(b, t.MulInto(y, x, x))
		must(b, t.MatMulInto(c, y, x, false, false))
	}
	b.StopTimer()
	must(b, t.Synchronize())
}

// BenchmarkReadBack: a kernel, then reading its result on the host.
func BenchmarkReadBack(b *testing.B) {
	d := benchDevice(b, DeviceSide)
	t := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	must(b, err)
	dst := make([]float32, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(b, t.ScaleInto(x, 1, x))
		must(b, x.CopyToFloat32(dst))
	}
}

// One iteration of the elementwise seed program, with its three new
// arrays, frees and the final Synchronize, allocates only the three Array
// values: the sync state is embedded in them, and device memory comes back
// from the cache.
func TestSeedIterationAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(128, 128, make([]float32, 128*128))
	if err != nil {
		t.Fatal(err)
	}
	run := func() {
		t1, _ := tk.Mul(x, x)
		t2, _ := tk.Mul(x, t1)
		t3, _ := tk.Mul(x, t2)
		_ = tk.Synchronize()
		_ = t1.Free()
		_ = t2.Free()
		_ = t3.Free()
	}
	for i := 0; i < 100; i++ {
		run()
	}
	if n := testing.AllocsPerRun(200, run); n > 3 {
		t.Fatalf("%v allocations per iteration, want at most 3 (the Array values)", n)
	}
}

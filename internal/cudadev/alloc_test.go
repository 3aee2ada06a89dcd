package cudadev

import (
	"runtime"
	"testing"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// realKinds are the backends on the real bindings (the Go emulation
// allocates by design: it keeps closures of the queued work).
var realKinds = backendKinds[1:]

// TestSteadyStateAllocations counts Go heap allocations (runtime.MemStats
// Mallocs) over a long run of the hot paths, after a warm-up, on the real
// bindings (the fake C libraries here, the GPU with ROCSYNC_GPU=1): first
// each driver call alone, then whole ops through syncstate the way the
// front package submits them, under every policy, with crossings between
// streams and tasks. The target is 0 per op: a per-call allocation would
// show as 1 or more; the threshold leaves room for the runtime's own stray
// allocations (sync.Pool refilling its blocks after a GC), which
// MemStats counts process-wide. GOMAXPROCS is 1 while measuring, as in
// testing.AllocsPerRun.
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, kind := range realKinds {
		t.Run(kind.name+"/calls", func(t *testing.T) {
			h := newHarness(t, kind, syncstate.DeviceBridge)
			a, b := h.task(), h.task()
			x := h.upload(randVals(1, side*side))
			y := h.alloc(side*side, kernels.F32)
			args := kernels.Args{Out: uint64(y.ptr), A: uint64(x.ptr), B: uint64(x.ptr), N: side * side}
			var tk uint64
			libOp := driver.LibraryCallOp{Call: func(uintptr) error { return nil }}
			copyOp := driver.CopyOp{Direction: driver.DeviceToDevice, Dst: y.ptr, Src: x.ptr, Size: 64}
			calls := []struct {
				name string
				f    func()
			}{
				{"Task.Launch", func() { tk, _ = a.tk.Launch(kernels.Mul, kernels.F32, args) }},
				{"Task.Gemm", func() {
					_, _ = a.tk.Gemm(kernels.F32, false, false, side, side, side, 1, x.ptr, side, x.ptr, side, 0, y.ptr, side)
				}},
				{"Timeline.WaitDevice (cuEventRecord + cuStreamWaitEvent)", func() {
					tk, _ = a.tk.Launch(kernels.Mul, kernels.F32, args)
					_ = b.tk.Kernel().WaitDevice([]syncstate.Fence{{TL: a.tk.Kernel(), Ticket: tk}})
				}},
				{"Timeline.WaitHost, newest op (cuStreamSynchronize)", func() {
					tk, _ = a.tk.Launch(kernels.Mul, kernels.F32, args)
					_ = a.tk.Kernel().WaitHost(tk)
				}},
				{"Timeline.WaitHost, older op (cuEventRecord + cuEventSynchronize)", func() {
					tk, _ = a.tk.Launch(kernels.Mul, kernels.F32, args)
					_, _ = a.tk.Launch(kernels.Mul, kernels.F32, args)
					_ = a.tk.Kernel().WaitHost(tk)
				}},
				{"Timeline.Completed", func() { _ = a.tk.Kernel().Completed() }},
				{"Task.Submit(LibraryCall)", func() { _, _ = a.tk.Submit(&libOp) }},
				{"Task.Submit(CopyDtoD)", func() { _, _ = a.tk.Submit(&copyOp) }},
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			for _, c := range calls {
				for i := 0; i < 100; i++ {
					c.f()
				}
				if err := errorsOf(a, b); err != nil {
					t.Fatal(err)
				}
				const n = 2000
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := 0; i < n; i++ {
					c.f()
					if i%256 == 255 {
						_ = a.tk.Kernel().Drain()
					}
				}
				runtime.ReadMemStats(&after)
				per := float64(after.Mallocs-before.Mallocs) / n
				t.Logf("%-60s %.3f allocations per call", c.name, per)
				if per >= 0.05 {
					t.Errorf("%s allocates: %.3f per call", c.name, per)
				}
			}
			if err := errorsOf(a, b); err != nil {
				t.Fatal(err)
			}
		})
		for _, p := range syncstate.Policies {
			t.Run(kind.name+"/ops/"+p.String(), func(t *testing.T) {
				h := newHarness(t, kind, p)
				a, b := h.task(), h.task()
				const n2 = 32 * 32 // small: the fake C library runs the gemms on the CPU
				x := h.upload(randVals(1, n2))
				t1, t2, t3 := h.alloc(n2, kernels.F32), h.alloc(n2, kernels.F32), h.alloc(n2, kernels.F32)
				iter := func() {
					a.mul(t1, x, x)      // kernel stream of a
					a.matmul(t2, t1, x)  // a's cuBLAS stream: kernel→library
					b.mul(t3, t2, x)     // b's kernel stream: a→b, library→kernel
					b.matmul(t1, t3, t3) // writes t1, which a's kernel wrote: b→a
				}
				for i := 0; i < 50; i++ {
					iter()
				}
				const n = 500
				var before, after runtime.MemStats
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
				runtime.ReadMemStats(&before)
				for i := 0; i < n; i++ {
					iter()
					if i%64 == 63 {
						_ = b.tk.Library().Drain()
					}
				}
				runtime.ReadMemStats(&after)
				per := float64(after.Mallocs-before.Mallocs) / (4 * n)
				st := h.stats.Snapshot()
				t.Logf("%s: %.3f allocations per op over %d ops (%v)", p, per, 4*n, st)
				if per >= 0.05 {
					t.Errorf("%s: %.3f allocations per op", p, per)
				}
			})
		}
	}
}

func errorsOf(tasks ...*htask) error {
	for _, tk := range tasks {
		if err := tk.tk.Kernel().Drain(); err != nil {
			return err
		}
		if err := tk.tk.Library().Drain(); err != nil {
			return err
		}
	}
	return nil
}

package cudadev

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// Benchmarks on the real bindings: "cfake" (the fake C libraries: what the
// Go side costs) and "gpu" (ROCSYNC_GPU=1). Run with -benchmem.

func benchKinds(b *testing.B, f func(b *testing.B, kind backendKind)) {
	for _, kind := range realKinds {
		b.Run(kind.name, func(b *testing.B) { f(b, kind) })
	}
}

func BenchmarkLaunch(b *testing.B) {
	benchKinds(b, func(b *testing.B, kind backendKind) {
		h := newHarness(b, kind, syncstate.DeviceSide)
		tk := h.task()
		x := h.upload(randVals(1, side*side))
		y := h.alloc(side*side, kernels.F32)
		args := kernels.Args{Out: uint64(y.ptr), A: uint64(x.ptr), B: uint64(x.ptr), N: side * side}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := tk.tk.Launch(kernels.Mul, kernels.F32, args); err != nil {
				b.Fatal(err)
			}
			if i++; i%1024 == 0 {
				_ = tk.tk.Kernel().Drain()
			}
		}
		_ = tk.tk.Kernel().Drain()
	})
}

func BenchmarkGemm(b *testing.B) {
	benchKinds(b, func(b *testing.B, kind backendKind) {
		n := side
		if kind.name == "cfake" {
			n = 8
		}
		h := newHarness(b, kind, syncstate.DeviceSide)
		tk := h.task()
		x := h.upload(randVals(1, n*n))
		y := h.alloc(n*n, kernels.F32)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := tk.tk.Gemm(kernels.F32, false, false, n, n, n, 1, x.ptr, n, x.ptr, n, 0, y.ptr, n); err != nil {
				b.Fatal(err)
			}
			if i++; i%1024 == 0 {
				_ = tk.tk.Library().Drain()
			}
		}
		_ = tk.tk.Library().Drain()
	})
}

// BenchmarkSeed runs the seed programs through syncstate the way the
// front package does, one iteration being the program plus a final host
// wait for its result: the driver-level counterpart of bench/rawcuda, with
// the same shapes (mixed is (x∘x)·x three times, on fresh buffers). Besides
// the mean (ns/op) it reports the median and p90 of the whole iteration
// and the median of its dispatch part (before the final wait), in µs.
func BenchmarkSeed(b *testing.B) {
	type prog struct {
		name string
		run  func(tk *htask, x *harr, t []*harr) *harr
	}
	progs := []prog{
		{"matmul", func(tk *htask, x *harr, t []*harr) *harr {
			tk.matmul(t[0], x, x)
			tk.matmul(t[1], x, t[0])
			tk.matmul(t[2], x, t[1])
			return t[2]
		}},
		{"elementwise", func(tk *htask, x *harr, t []*harr) *harr {
			tk.mul(t[0], x, x)
			tk.mul(t[1], x, t[0])
			tk.mul(t[2], x, t[1])
			return t[2]
		}},
		{"mixed", func(tk *htask, x *harr, t []*harr) *harr {
			for i := 0; i < 3; i++ {
				tk.mul(t[2*i], x, x)
				tk.matmul(t[2*i+1], t[2*i], x)
			}
			return t[5]
		}},
	}
	for _, kind := range realKinds {
		for _, p := range progs {
			for _, pol := range syncstate.Policies {
				b.Run(kind.name+"/"+p.name+"/"+pol.String(), func(b *testing.B) {
					n := side
					if kind.name == "cfake" {
						n = 8
					}
					h := newHarness(b, kind, pol)
					tk := h.task()
					x := h.upload(randVals(1, n*n))
					t := make([]*harr, 6)
					for i := range t {
						t[i] = h.alloc(n*n, kernels.F32)
					}
					p.run(tk, x, t) // loads the module
					totals := make([]float64, 0, 1<<16)
					dispatch := make([]float64, 0, 1<<16)
					b.ReportAllocs()
					for b.Loop() {
						t0 := time.Now()
						out := p.run(tk, x, t)
						t1 := time.Now()
						out.st.Lock()
						w := out.st.WriterLocked()
						out.st.Unlock()
						if err := w.TL.WaitHost(w.Ticket); err != nil {
							b.Fatal(err)
						}
						if len(totals) < cap(totals) {
							t2 := time.Now()
							totals = append(totals, float64(t2.Sub(t0).Nanoseconds())/1e3)
							dispatch = append(dispatch, float64(t1.Sub(t0).Nanoseconds())/1e3)
						}
					}
					st := h.stats.Snapshot()
					b.ReportMetric(float64(st.HostWaitsTotal())/float64(b.N+1), "hostwaits/op")
					b.ReportMetric(quantile(totals, 0.5), "med-µs")
					b.ReportMetric(quantile(totals, 0.9), "p90-µs")
					b.ReportMetric(quantile(dispatch, 0.5), "dispatch-med-µs")
				})
			}
		}
	}
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Round(q*float64(len(s)-1)))]
}

package cudadev

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// BenchmarkGPUWaitDetection (ROCSYNC_GPU=1) times how soon the host learns
// that a stream finished: each round launches three 128x128 multiplies and
// then waits, in turn in one process, by cuStreamSynchronize ("sync"), by
// spinning on cuStreamQuery ("query"), by cuStreamWriteValue64 of the
// round's number to mapped host memory and spinning on that word
// ("watch"), and by the stream's own bounded host wait ("stream", which
// is the watch's where the device supports it, else the query spin). It
// reports each one's median from the end of the last launch to the wait's
// return, and the median cost of one cuStreamQuery on a finished stream.
func BenchmarkGPUWaitDetection(b *testing.B) {
	if !gpuEnabled() {
		b.Skip("set ROCSYNC_GPU=1")
	}
	const n = 128
	// Bounded waits, as rocsync's devices make them by default: "stream"
	// is then the watched wait where the device supports it.
	h := newHarnessConfig(b, backendKinds[2], driver.DeviceConfig{Policy: syncstate.DeviceSide, WaitTimeout: time.Minute})
	tk := h.task()
	bk := h.d.b.(*cudaBackend)
	ctx := bk.ctx.Load()
	x := h.upload(randVals(1, n*n))
	y := h.alloc(n*n, kernels.F32)
	st := tk.tk.Kernel()
	s := st.Handle()
	host, dev, err := bk.mappedAlloc(8)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = bk.hostFree(host) }()
	word := (*atomic.Uint64)(host)
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	launch3 := func() {
		for range 3 {
			_, err := tk.tk.Launch(kernels.Mul, kernels.F32, kernels.Args{Out: uint64(y.ptr), A: uint64(x.ptr), B: uint64(x.ptr), N: n * n})
			must(err)
		}
	}
	var round uint64
	variants := []struct {
		name string
		wait func()
	}{
		{"sync", func() { must(bk.streamSynchronize(s)) }},
		{"query", func() {
			for {
				ok, err := bk.streamQuery(s)
				must(err)
				if ok {
					return
				}
			}
		}},
		{"watch", func() {
			round++
			must(ctx.StreamWriteValue64(cuda.Stream(s), cuda.DevicePtr(dev), round))
			for word.Load() < round {
			}
		}},
		{"stream", func() { must(st.WaitHost(st.LastTicket())) }},
	}
	times := make([][]float64, len(variants))
	var queryCost []float64
	for b.Loop() {
		for i, v := range variants {
			launch3()
			t0 := time.Now()
			v.wait()
			times[i] = append(times[i], float64(time.Since(t0).Nanoseconds())/1e3)
			must(st.Drain())
		}
		t0 := time.Now()
		_, err := bk.streamQuery(s)
		must(err)
		queryCost = append(queryCost, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	for i, v := range variants {
		slices.Sort(times[i])
		b.ReportMetric(times[i][len(times[i])/2], v.name+"-µs")
	}
	slices.Sort(queryCost)
	b.ReportMetric(queryCost[len(queryCost)/2], "query-done-µs")
}

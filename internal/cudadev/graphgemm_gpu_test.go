package cudadev

import (
	"slices"
	"testing"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// BenchmarkGPUGemmGraphCapture (ROCSYNC_GPU=1) replays three chained
// 128x128 sgemms captured into a CUDA graph in three ways, in turn in one
// process, and reports each one's median time from cuGraphLaunch to the
// end of cuStreamSynchronize: captured on the handle's own stream
// ("own"), on a stream of the capture's own with the handle rebound to it,
// as Task.Record does ("rebound"), and the task's recording itself
// ("record"); "eager" is the three gemms without a graph. On an H100 all
// three graphs replay in the same time (20-22 µs), also without a
// workspace set by the caller (cublasSetWorkspace, which PyTorch sets for
// captures; measured with it and without, no difference at 128x128), so
// the handle keeps cuBLAS's own workspace pool.
func BenchmarkGPUGemmGraphCapture(b *testing.B) {
	if !gpuEnabled() {
		b.Skip("set ROCSYNC_GPU=1")
	}
	const n = 128
	h := newHarness(b, backendKinds[2], syncstate.DeviceSide)
	tk := h.task()
	bk := h.d.b
	x := h.upload(randVals(1, n*n))
	t := []*harr{h.alloc(n*n, kernels.F32), h.alloc(n*n, kernels.F32), h.alloc(n*n, kernels.F32)}
	ls := tk.tk.Library().Handle()
	gemms := func() error {
		for i, c := range t {
			a := x
			if i > 0 {
				a = t[i-1]
			}
			if err := bk.gemm(tk.tk.blas, kernels.F32, false, false, n, n, n, 1, x.ptr, n, a.ptr, n, 0, c.ptr, n); err != nil {
				return err
			}
		}
		return nil
	}
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(gemms())
	must(bk.streamSynchronize(ls))
	capture := func(s uintptr) uintptr {
		must(bk.captureBegin(s))
		must(gemms())
		g, err := bk.captureEnd(s)
		must(err)
		exec, err := bk.graphInstantiate(g)
		must(err)
		return exec
	}
	own := capture(ls)
	cs, err := bk.streamCreate()
	must(err)
	must(bk.blasSetStream(tk.tk.blas, cs))
	rebound := capture(cs)
	must(bk.blasSetStream(tk.tk.blas, ls))
	var ops []driver.Op
	for i, c := range t {
		a := x
		if i > 0 {
			a = t[i-1]
		}
		ops = append(ops, &driver.GemmOp{DType: kernels.F32,
			M: n, N: n, K: n, Alpha: 1, A: x.ptr, LDA: n, B: a.ptr, LDB: n, C: c.ptr, LDC: n})
	}
	rec, err := tk.tk.Record(driver.LaneLibrary, ops)
	must(err)
	defer rec.Release()
	recExec := rec.(*recorded).exec
	if recExec == 0 {
		b.Fatal("the recording was not captured")
	}
	variants := []struct {
		name string
		run  func() error
	}{
		{"eager", gemms},
		{"own", func() error { return bk.graphLaunch(own, ls) }},
		{"rebound", func() error { return bk.graphLaunch(rebound, ls) }},
		{"record", func() error { return bk.graphLaunch(recExec, ls) }},
	}
	times := make([][]float64, len(variants))
	for b.Loop() {
		for i, v := range variants {
			t0 := time.Now()
			must(v.run())
			must(bk.streamSynchronize(ls))
			times[i] = append(times[i], float64(time.Since(t0).Nanoseconds())/1e3)
		}
	}
	for i, v := range variants {
		slices.Sort(times[i])
		b.ReportMetric(times[i][len(times[i])/2], v.name+"-µs")
	}
	must(bk.graphExecDestroy(own))
	must(bk.graphExecDestroy(rebound))
	must(bk.streamDestroy(cs))
}

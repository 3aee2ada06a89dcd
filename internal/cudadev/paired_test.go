package cudadev

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// TestGPUPairedOverhead measures what the driver layer (syncstate ordering,
// the timelines, per-call contexts) adds to the seed programs, against
// the same op sequences written directly against the driver API and cuBLAS
// (bench/rawcuda's shapes), alternating one raw and one layered iteration
// so that both see the same machine state: on a VM whose speed drifts by
// tens of percent between runs, only a paired comparison resolves a 10%
// overhead. Each iteration ends with one host wait for the result.
func TestGPUPairedOverhead(t *testing.T) {
	if !gpuEnabled() {
		t.Skip("set ROCSYNC_GPU=1 to run on an NVIDIA GPU")
	}
	const iters = 3000
	var report strings.Builder
	fmt.Fprintf(&report, "\n%-12s %-13s %-17s %9s %9s %7s %9s %9s\n", "program", "policy", "raw shape", "raw med", "layer med", "ratio", "raw p90", "layer p90")
	for _, prog := range []string{"matmul", "elementwise", "mixed"} {
		for _, pol := range syncstate.Policies {
			raw := "one-stream"
			switch {
			case pol == syncstate.WaitAlways:
				raw = "sync-each-op"
			case prog == "mixed" && (pol == syncstate.DeviceSide || pol == syncstate.SkipSameQueue):
				raw = "host-wait"
			case prog == "mixed" && pol == syncstate.DeviceBridge:
				raw = "event"
			}
			h := newHarness(t, backendKinds[2], pol)
			tk := h.task()
			x := h.upload(randVals(1, side*side))
			tmp := make([]*harr, 6)
			for i := range tmp {
				tmp[i] = h.alloc(side*side, kernels.F32)
			}
			layer := func() {
				var out *harr
				switch prog {
				case "matmul":
					tk.matmul(tmp[0], x, x)
					tk.matmul(tmp[1], x, tmp[0])
					tk.matmul(tmp[2], x, tmp[1])
					out = tmp[2]
				case "elementwise":
					tk.mul(tmp[0], x, x)
					tk.mul(tmp[1], x, tmp[0])
					tk.mul(tmp[2], x, tmp[1])
					out = tmp[2]
				case "mixed":
					for i := 0; i < 3; i++ {
						tk.mul(tmp[2*i], x, x)
						tk.matmul(tmp[2*i+1], tmp[2*i], x)
					}
					out = tmp[5]
				}
				out.st.Lock()
				w := out.st.WriterLocked()
				out.st.Unlock()
				if err := w.TL.WaitHost(w.Ticket); err != nil {
					t.Fatal(err)
				}
			}
			rawRun, done := rawSequence(t, h.d, prog, raw, x, tmp)
			layer() // loads the kernels
			var rt, lt []float64
			runtime.LockOSThread()
			for i := 0; i < iters; i++ {
				t0 := time.Now()
				rawRun()
				t1 := time.Now()
				layer()
				t2 := time.Now()
				rt = append(rt, float64(t1.Sub(t0).Nanoseconds())/1e3)
				lt = append(lt, float64(t2.Sub(t1).Nanoseconds())/1e3)
			}
			runtime.UnlockOSThread()
			done()
			rm, lm := quantile(rt, 0.5), quantile(lt, 0.5)
			fmt.Fprintf(&report, "%-12s %-13s %-17s %9.2f %9.2f %7.3f %9.2f %9.2f\n", prog, pol, raw, rm, lm, lm/rm, quantile(rt, 0.9), quantile(lt, 0.9))
		}
	}
	t.Log(report.String())
}

// rawSequence returns one iteration of prog written against the bindings
// directly, in the given shape, on its own streams and cuBLAS handle, with
// the context made current once (the caller holds the OS thread).
func rawSequence(t *testing.T, d *Device, prog, shape string, x *harr, tmp []*harr) (func(), func()) {
	b := d.b.(*cudaBackend)
	c, lib, bl := b.ctx.Load(), b.lib, b.blas
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.MakeCurrent(); err != nil {
		t.Fatal(err)
	}
	k, err1 := lib.StreamCreate(cuda.StreamNonBlocking)
	l, err2 := lib.StreamCreate(cuda.StreamNonBlocking)
	ev, err3 := lib.EventCreate(cuda.EventDisableTiming)
	h, err4 := bl.Create()
	if err := errors.Join(err1, err2, err3, err4, bl.SetStream(h, l)); err != nil {
		t.Fatal(err)
	}
	f, err := d.function(kernels.Mul, kernels.F32)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := cuda.NewParamBlock(kernels.KernargSize, d.offsets)
	if err != nil {
		t.Fatal(err)
	}
	n := side
	ks := k
	if shape == "one-stream" || shape == "sync-each-op" {
		ks = l
	}
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	mul := func(out, a, bb *harr) {
		args := kernels.Args{Out: uint64(out.ptr), A: uint64(a.ptr), B: uint64(bb.ptr), N: uint64(out.n)}
		args.Encode(pb.Bytes(), kernels.F32)
		check(lib.LaunchKernel(cuda.Function(f), cuda.Dim3{X: uint32((out.n + 255) / 256), Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, ks, pb.Params()))
		if shape == "sync-each-op" {
			check(lib.StreamSynchronize(ks))
		}
	}
	gemm := func(cc, a, bb *harr) {
		check(bl.Sgemm(h, cublas.OpN, cublas.OpN, n, n, n, 1, cuda.DevicePtr(bb.ptr), n, cuda.DevicePtr(a.ptr), n, 0, cuda.DevicePtr(cc.ptr), n))
		if shape == "sync-each-op" {
			check(lib.StreamSynchronize(l))
		}
	}
	run := func() {
		check(c.MakeCurrent())
		switch prog {
		case "matmul":
			gemm(tmp[0], x, x)
			gemm(tmp[1], x, tmp[0])
			gemm(tmp[2], x, tmp[1])
			check(lib.StreamSynchronize(l))
		case "elementwise":
			mul(tmp[0], x, x)
			mul(tmp[1], x, tmp[0])
			mul(tmp[2], x, tmp[1])
			check(lib.StreamSynchronize(ks))
		case "mixed":
			for i := 0; i < 3; i++ {
				mul(tmp[2*i], x, x)
				switch shape {
				case "event":
					check(errors.Join(lib.EventRecord(ev, k), lib.StreamWaitEvent(l, ev)))
				case "host-wait":
					check(errors.Join(lib.EventRecord(ev, k), lib.EventSynchronize(ev)))
				}
				gemm(tmp[2*i+1], tmp[2*i], x)
			}
			check(lib.StreamSynchronize(l))
		}
	}
	done := func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		check(c.MakeCurrent())
		pb.Free()
		check(errors.Join(bl.Destroy(h), lib.EventDestroy(ev), lib.StreamDestroy(k), lib.StreamDestroy(l)))
	}
	return run, done
}

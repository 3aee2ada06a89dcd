package cudadev

import (
	"testing"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// A recorded chain of launches and a recorded gemm, replayed on their
// streams, give what the eager ops gave, on the Go emulation, the real
// bindings over the fake C library, and the GPU (ROCSYNC_GPU=1).
func TestRecordReplayStreams(t *testing.T) {
	for _, kind := range backendKinds {
		for _, p := range []syncstate.Policy{syncstate.DeviceSide, syncstate.Unified} {
			t.Run(kind.name+"/"+p.String(), func(t *testing.T) {
				h := newHarness(t, kind, p)
				tk := h.task()
				const side = 16
				x := h.upload(randVals(1, side*side))
				eager, replayed := h.alloc(side*side, kernels.F32), h.alloc(side*side, kernels.F32)
				tmp := h.alloc(side*side, kernels.F32)
				tk.mul(tmp, x, x)
				tk.mul(eager, tmp, x)
				want := h.read(eager)

				k, err := h.d.Builtin(kernels.Mul, kernels.F32)
				if err != nil {
					t.Fatal(err)
				}
				ops := make([]driver.Op, 2)
				ops[0].SetBuiltin(k, kernels.F32, &kernels.Args{Out: uint64(tmp.ptr), A: uint64(x.ptr), B: uint64(x.ptr), N: side * side})
				ops[1].SetBuiltin(k, kernels.F32, &kernels.Args{Out: uint64(replayed.ptr), A: uint64(tmp.ptr), B: uint64(x.ptr), N: side * side})
				rec, err := tk.tk.Record(driver.LaneKernel, ops)
				if err != nil {
					t.Fatal(err)
				}
				defer rec.Release()
				if rec.Ops() != 2 {
					t.Fatalf("Ops() = %d", rec.Ops())
				}
				for range 3 {
					ticket, err := tk.tk.Submit(&driver.Op{Kind: driver.Replay, Lane: driver.LaneKernel, Recorded: rec})
					if err != nil {
						t.Fatal(err)
					}
					if err := tk.tk.Timeline(driver.LaneKernel).WaitHost(ticket); err != nil {
						t.Fatal(err)
					}
					got := h.read(replayed)
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("element %d: replay %g, eager %g", i, got[i], want[i])
						}
					}
				}
				// A recording of another task is refused.
				other := h.task()
				if _, err := other.tk.Submit(&driver.Op{Kind: driver.Replay, Lane: driver.LaneKernel, Recorded: rec}); err == nil {
					t.Fatal("replayed another task's recording")
				}
			})
		}
	}
}

package cudadev

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// hostFunc runs fn on the task's host lane, reading and writing the
// arrays given, through the same Begin/Submit/Commit as every op.
func (tk *htask) hostFunc(reads, writes []*harr, fn func() error) {
	h := tk.h
	var sop syncstate.Op
	for _, a := range reads {
		sop.Read(a.st)
	}
	for _, a := range writes {
		sop.Write(a.st)
	}
	if err := sop.Begin(&h.eng, tk.tk.Timeline(driver.LaneHost), tk.sinks); err != nil {
		h.t.Fatal(err)
	}
	ticket, err := tk.tk.Submit(&driver.Op{Kind: driver.HostFunc, Lane: driver.LaneHost, Func: fn})
	if err != nil {
		sop.Abort()
		h.t.Fatal(err)
	}
	if err := sop.Commit(ticket, tk.sinks); err != nil {
		h.t.Fatal(err)
	}
}

// A host function between two kernels on every CUDA backend and policy:
// the kernel before it writes x, the function computes y = x + 1 on the
// host (synchronous copies from the lane's goroutine, with the context
// made current there), and the kernel after it reads y. CUDA streams wait
// for the host lane on the host (a boundary wait): there is no device-side
// wait for it on this backend yet.
func TestHostFuncOnCUDA(t *testing.T) {
	for _, kind := range backendKinds {
		for _, p := range syncstate.Policies {
			t.Run(fmt.Sprintf("%s/%s", kind.name, p), func(t *testing.T) {
				h := newHarness(t, kind, p)
				tk := h.task()
				host := randVals(3, side*side)
				a := h.upload(host)
				x := h.alloc(side*side, kernels.F32)
				y := h.alloc(side*side, kernels.F32)
				z := h.alloc(side*side, kernels.F32)
				tk.mul(x, a, a)
				size := uint64(4 * side * side)
				tk.hostFunc([]*harr{x}, []*harr{y}, func() error {
					v := make([]float32, side*side)
					if err := h.d.CopyDtoH(unsafe.Pointer(&v[0]), x.ptr, size); err != nil {
						return err
					}
					for i := range v {
						v[i]++
					}
					return h.d.CopyHtoD(y.ptr, unsafe.Pointer(&v[0]), size)
				})
				before := h.stats.Snapshot()
				tk.mul(z, y, y)
				mid := h.stats.Snapshot().Sub(before)
				// One boundary wait, unless the function had already run.
				if mid.DeviceWaits != 0 || mid.HostWaitsFor(syncstate.ReasonBoundary)+mid.SkippedWaits != 1 {
					t.Errorf("the kernel after the host function: %v, want one boundary wait or a skipped one", mid)
				}
				got := h.read(z)
				for i, v := range host {
					want := (v*v + 1) * (v*v + 1)
					if d := got[i] - want; d > 1e-5 || d < -1e-5 {
						t.Fatalf("element %d: got %g, want %g", i, got[i], want)
					}
				}
			})
		}
	}
}

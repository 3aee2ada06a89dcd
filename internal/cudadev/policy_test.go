package cudadev

import (
	"fmt"
	"github.com/rocsync/rocsync/driver"
	"testing"

	"github.com/rocsync/rocsync/internal/reference"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

const side = 128

// A program runs on one or two tasks and returns its result array and the
// CPU reference of it. waits are the host waits it must make before the
// result is read back, by policy, in the order of syncstate.Policies
// (WaitAlways, SkipSameQueue, DeviceSide, Unified, DeviceBridge); reason is
// the reason of those waits under SkipSameQueue and DeviceSide.
type program struct {
	name   string
	run    func(h *harness, x *harr) *harr
	ref    func(x []float64) []float64
	waits  [5]uint64
	reason syncstate.Reason
}

var programs = []program{
	{
		// The three seed programs: the waits match the emulator's
		// (conformance.SeedPrograms), and Unified and DeviceBridge
		// never wait on the host.
		name: "matmul",
		run: func(h *harness, x *harr) *harr {
			tk := h.task()
			t1, t2, t3 := h.alloc(x.n, x.dt), h.alloc(x.n, x.dt), h.alloc(x.n, x.dt)
			tk.matmul(t1, x, x)
			tk.matmul(t2, x, t1)
			tk.matmul(t3, x, t2)
			return t3
		},
		ref: func(x []float64) []float64 {
			return reference.MatMul(x, reference.MatMul(x, reference.MatMul(x, x, side), side), side)
		},
		waits: [5]uint64{3, 0, 0, 0, 0},
	},
	{
		name: "elementwise",
		run: func(h *harness, x *harr) *harr {
			tk := h.task()
			t1, t2, t3 := h.alloc(x.n, x.dt), h.alloc(x.n, x.dt), h.alloc(x.n, x.dt)
			tk.mul(t1, x, x)
			tk.mul(t2, x, t1)
			tk.mul(t3, x, t2)
			return t3
		},
		ref:   func(x []float64) []float64 { return reference.Mul(x, reference.Mul(x, reference.Mul(x, x))) },
		waits: [5]uint64{3, 0, 0, 0, 0},
	},
	{
		name: "mixed",
		run: func(h *harness, x *harr) *harr {
			tk := h.task()
			t1, t2 := h.alloc(x.n, x.dt), h.alloc(x.n, x.dt)
			tk.mul(t1, x, x)     // kernel stream
			tk.matmul(t2, t1, x) // cuBLAS stream: the boundary
			return t2
		},
		ref:    func(x []float64) []float64 { return reference.MatMul(reference.Mul(x, x), x, side) },
		waits:  [5]uint64{2, 1, 1, 0, 0},
		reason: syncstate.ReasonBoundary,
	},
	{
		// A kernel on task A, read by a kernel on task B.
		name: "kernel-A-to-kernel-B",
		run: func(h *harness, x *harr) *harr {
			a, b := h.task(), h.task()
			y, z := h.alloc(x.n, x.dt), h.alloc(x.n, x.dt)
			a.mul(y, x, x)
			b.mul(z, y, x)
			return z
		},
		ref:    func(x []float64) []float64 { return reference.Mul(reference.Mul(x, x), x) },
		waits:  [5]uint64{2, 1, 0, 0, 0},
		reason: syncstate.ReasonCrossQueue,
	},
	{
		// cuBLAS on task A, read by cuBLAS on task B.
		name: "gemm-A-to-gemm-B",
		run: func(h *harness, x *harr) *harr {
			a, b := h.task(), h.task()
			y, z := h.alloc(x.n, x.dt), h.alloc(x.n, x.dt)
			a.matmul(y, x, x)
			b.matmul(z, y, x)
			return z
		},
		ref:    func(x []float64) []float64 { return reference.MatMul(reference.MatMul(x, x, side), x, side) },
		waits:  [5]uint64{2, 1, 0, 0, 0},
		reason: syncstate.ReasonCrossQueue,
	},
	{
		// Write after read across tasks and domains: task B's gemm
		// overwrites x while task A's kernel may still be reading it.
		name: "write-after-read",
		run: func(h *harness, x *harr) *harr {
			a, b := h.task(), h.task()
			y, w := h.alloc(x.n, x.dt), h.alloc(x.n, x.dt)
			a.mul(y, x, x)    // reads x
			b.matmul(w, x, x) // reads x: no wait needed
			b.matmul(x, w, w) // writes x: must wait for a's read
			// y = x0², x = (x0·x0)·(x0·x0); return y+x by reading y
			// through a kernel on b, which must see a's write.
			b.elementwise(kernels.Add, w, y, x, 0)
			return w
		},
		ref: func(x []float64) []float64 {
			x2 := reference.MatMul(x, x, side)
			sum := reference.Mul(x, x)
			xx := reference.MatMul(x2, x2, side)
			for i := range sum {
				sum[i] += xx[i]
			}
			return sum
		},
		// SkipSameQueue: b's second gemm waits for a's kernel (boundary),
		// then b's add crosses from b's cuBLAS stream to b's kernel
		// stream (boundary) and needs a's kernel, already waited for.
		// DeviceSide: the same two boundary crossings. WaitAlways: one
		// per op.
		waits:  [5]uint64{4, 2, 2, 0, 0},
		reason: syncstate.ReasonBoundary,
	},
	{
		// Aliasing: x = x*x twice in place, then a gemm reads it.
		name: "aliasing",
		run: func(h *harness, x *harr) *harr {
			tk := h.task()
			out := h.alloc(x.n, x.dt)
			tk.mul(x, x, x)
			tk.mul(x, x, x)
			tk.matmul(out, x, x)
			return out
		},
		ref: func(x []float64) []float64 {
			x4 := reference.Mul(reference.Mul(x, x), reference.Mul(x, x))
			return reference.MatMul(x4, x4, side)
		},
		waits:  [5]uint64{3, 1, 1, 0, 0},
		reason: syncstate.ReasonBoundary,
	},
}

func policyIndex(p syncstate.Policy) int {
	for i, q := range syncstate.Policies {
		if q == p {
			return i
		}
	}
	panic("unknown policy")
}

// TestPrograms runs every program under every policy on every backend,
// checks the result against the CPU reference and the host waits against
// the table, and, on the emulated device, that nothing ran out of order and
// nothing is left pending.
func TestPrograms(t *testing.T) {
	for _, kind := range backendKinds {
		for _, prog := range programs {
			for _, p := range syncstate.Policies {
				t.Run(fmt.Sprintf("%s/%s/%s", kind.name, prog.name, p), func(t *testing.T) {
					h := newHarness(t, kind, p)
					host := randVals(1, side*side)
					x := h.upload(host)
					before := h.stats.Snapshot()
					out := prog.run(h, x)
					mid := h.stats.Snapshot().Sub(before)
					want := prog.waits[policyIndex(p)]
					if mid.HostWaitsTotal() != want {
						t.Errorf("host waits before read-back: %d, want %d (%v)", mid.HostWaitsTotal(), want, mid)
					}
					switch p {
					case syncstate.WaitAlways:
						if mid.HostWaitsFor(syncstate.ReasonWaitAlways) != want {
							t.Errorf("wait-always waits: %v", mid)
						}
					case syncstate.SkipSameQueue, syncstate.DeviceSide:
						if mid.HostWaitsFor(prog.reason) != want {
							t.Errorf("want %d %s waits: %v", want, prog.reason, mid)
						}
					}
					if p == syncstate.Unified {
						for _, tk := range h.tasks {
							if tk.tk.Timeline(driver.LaneKernel) != tk.tk.Timeline(driver.LaneLibrary) {
								t.Fatal("Unified: the task has two streams")
							}
						}
					}
					got := h.read(out)
					if i := closeTo(prog.ref(reference.Widen(host)), got, 1e-4); i >= 0 {
						t.Fatalf("element %d: got %g, want %g", i, got[i], prog.ref(reference.Widen(host))[i])
					}
					t.Logf("%v; events created %d", mid, h.d.EventsCreated())
				})
			}
		}
	}
}

// TestMissingWaitsAreCaught proves the emulated device can fail the tests
// above: with every wait removed (Engine.Test.DisableWaits), the adversarial
// scheduler runs consumers before their producers and the results are
// wrong.
func TestMissingWaitsAreCaught(t *testing.T) {
	for _, prog := range programs {
		if prog.name == "matmul" || prog.name == "elementwise" {
			continue // one stream: in-order execution needs no wait
		}
		t.Run(prog.name, func(t *testing.T) {
			h := newHarness(t, backendKinds[0], syncstate.DeviceBridge)
			h.eng.Test.DisableWaits = true
			host := randVals(1, side*side)
			x := h.upload(host)
			out := prog.run(h, x)
			got := h.read(out)
			if closeTo(prog.ref(reference.Widen(host)), got, 1e-4) < 0 {
				t.Fatal("the result is right without the waits: the emulated device does not catch missing waits")
			}
		})
	}
}

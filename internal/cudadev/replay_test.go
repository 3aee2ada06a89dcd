package cudadev

import (
	"errors"
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
				ops := []driver.Op{new(driver.DispatchOp), new(driver.DispatchOp)}
				ops[0].(*driver.DispatchOp).SetBuiltin(k, kernels.F32, &kernels.Args{Out: uint64(tmp.ptr), A: uint64(x.ptr), B: uint64(x.ptr), N: side * side})
				ops[1].(*driver.DispatchOp).SetBuiltin(k, kernels.F32, &kernels.Args{Out: uint64(replayed.ptr), A: uint64(tmp.ptr), B: uint64(x.ptr), N: side * side})
				rec, err := tk.tk.Record(driver.LaneKernel, ops)
				if err != nil {
					t.Fatal(err)
				}
				defer rec.Release()
				if rec.Ops() != 2 {
					t.Fatalf("Ops() = %d", rec.Ops())
				}
				if ok, why := rec.(*recorded).Graph(); !ok {
					t.Fatalf("not captured into a graph: %v", why)
				}
				for range 3 {
					ticket, err := tk.tk.Submit(&driver.ReplayOp{Recorded: rec})
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
				if _, err := other.tk.Submit(&driver.ReplayOp{Recorded: rec}); err == nil {
					t.Fatal("replayed another task's recording")
				}
			})
		}
	}
}

// A recorded gemm (cuBLAS on the library stream) is captured into a graph
// too: the task's handle is bound to the capture stream meanwhile and back
// to the library stream after. The replay reads the inputs as they are at
// replay (changed between replays). The fake C cuBLAS does not model
// capture (it computes at the call), so this runs on the Go emulation and
// on the GPU.
func TestRecordReplayGemmGraph(t *testing.T) {
	for _, kind := range []backendKind{backendKinds[0], backendKinds[2]} {
		t.Run(kind.name, func(t *testing.T) {
			h := newHarness(t, kind, syncstate.DeviceSide)
			tk := h.task()
			const side = 8
			a, b := h.upload(randVals(1, side*side)), h.upload(randVals(2, side*side))
			eager, replayed := h.alloc(side*side, kernels.F32), h.alloc(side*side, kernels.F32)
			op := &driver.GemmOp{DType: kernels.F32,
				M: side, N: side, K: side, Alpha: 1, A: b.ptr, LDA: side, B: a.ptr, LDB: side, C: replayed.ptr, LDC: side}
			rec, err := tk.tk.Record(driver.LaneLibrary, []driver.Op{op})
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			if ok, why := rec.(*recorded).Graph(); !ok {
				t.Fatalf("not captured: %v", why)
			}
			for i := range 3 {
				tk.mul(a, a, b) // change the input: the graph must read it at replay
				tk.matmul(eager, a, b)
				want := h.read(eager)
				ticket, err := tk.tk.Submit(&driver.ReplayOp{Recorded: rec})
				if err != nil {
					t.Fatal(err)
				}
				if err := tk.tk.Timeline(driver.LaneLibrary).WaitHost(ticket); err != nil {
					t.Fatal(err)
				}
				got := h.read(replayed)
				for j := range want {
					if got[j] != want[j] {
						t.Fatalf("replay %d, element %d: %g, eager %g", i, j, got[j], want[j])
					}
				}
			}
			// The handle is back on the library stream: an eager gemm runs there.
			tk.matmul(eager, b, a)
			_ = h.read(eager)
		})
	}
}

// A library call that synchronizes its stream cannot be captured: the
// recording keeps the calls and replays them in order on the stream.
func TestRecordReplayFallsBackWithoutCapture(t *testing.T) {
	for _, kind := range backendKinds[:2] {
		t.Run(kind.name, func(t *testing.T) {
			h := newHarness(t, kind, syncstate.DeviceSide)
			tk := h.task()
			calls := 0
			op := &driver.LibraryCallOp{Call: func(s uintptr) error {
				calls++
				return h.d.b.streamSynchronize(s)
			}}
			rec, err := tk.tk.Record(driver.LaneLibrary, []driver.Op{op})
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			if ok, why := rec.(*recorded).Graph(); ok || why == nil {
				t.Fatalf("captured a stream synchronization (graph %v, %v)", ok, why)
			}
			before := calls
			ticket, err := tk.tk.Submit(&driver.ReplayOp{Recorded: rec})
			if err != nil {
				t.Fatal(err)
			}
			if err := tk.tk.Timeline(driver.LaneLibrary).WaitHost(ticket); err != nil {
				t.Fatal(err)
			}
			if calls != before+1 {
				t.Fatalf("the call ran %d times on replay", calls-before)
			}
		})
	}
}

// A capture whose recorded call fails without invalidating the capture
// still ends with a graph: falling back to the in-order calls must destroy
// it rather than leak one graph per such recording.
func TestFailedCaptureDestroysItsGraph(t *testing.T) {
	h := newHarness(t, backendKinds[0], syncstate.DeviceSide)
	tk := h.task()
	boom := errors.New("the library refused")
	op := &driver.LibraryCallOp{Call: func(uintptr) error { return boom }}
	rec, err := tk.tk.Record(driver.LaneLibrary, []driver.Op{op})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if ok, why := rec.(*recorded).Graph(); ok || !errors.Is(why, boom) {
		t.Fatalf("graph %v, %v; want the call's error", ok, why)
	}
	h.emu.mu.Lock()
	live := len(h.emu.graphs)
	h.emu.mu.Unlock()
	if live != 0 {
		t.Fatalf("%d graphs left after the failed capture", live)
	}
}

package rocmdev

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/rocblas"
)

var (
	_ driver.Recorder      = (*Task)(nil)
	_ driver.GraphRecorded = (*recorded)(nil)
)

// recorded is a sequence prebuilt for one of the task's timelines: AQL
// packets with their own kernargs for the HSA queue, or, for the HIP
// stream (library ops, and kernels too under Unified), a hipGraph
// captured from the ops' calls, launched with one hipGraphLaunch per
// replay. The calls are captured in relaxed mode on a stream of the
// recording's own (no other task's event record lands in the graph, and
// other threads' hipMalloc and stream synchronizations stay allowed),
// with the task's rocBLAS handle bound to it for the capture. Where
// capture fails or HIP would not capture every call (a library call that
// synchronizes its stream, a HIP without the hipGraph API, HIP before 5.3,
// which does not capture kernel launches), the recording keeps the calls
// themselves, run in order by one stream submission; captureErr says why.
type recorded struct {
	t          *Task
	ops        int
	lane       driver.Lane
	q          *queue.Recording
	calls      []func(stream uintptr) error
	call       func(stream uintptr) error
	exec       hip.GraphExec // the instantiated graph, 0 without one
	captureErr error
	// workspace is the rocBLAS workspace the graph's library calls use,
	// owned by the recording (see captureCalls); 0 without one.
	workspace driver.DevicePtr
}

// CaptureWorkspace is the rocBLAS workspace a captured recording gives
// its task's handle for the capture, in bytes: rocBLAS must not grow the
// handle's own workspace inside a capture (rocblas.WorkspaceSetter), so
// the capture runs with one of the recording's that is never grown. A
// call needing more fails the capture (rocblas_status_memory_error), and
// the recording replays its calls instead.
var CaptureWorkspace uint64 = 32 << 20

func (r *recorded) Ops() int { return r.ops }

// Lane implements driver.Recorded.
func (r *recorded) Lane() driver.Lane { return r.lane }

// Tickets implements driver.TicketsRecorded: an HSA queue segment takes a
// ticket per packet; a stream segment takes one.
func (r *recorded) Tickets() uint64 {
	if r.q != nil {
		return uint64(r.q.Packets())
	}
	return 1
}

func (r *recorded) Release() error {
	if r.q != nil {
		return r.q.Release()
	}
	var err error
	if r.exec != 0 {
		err = r.t.d.rt.HIP.(hip.GraphRuntime).GraphExecDestroy(r.exec)
		r.exec = 0
	}
	if r.workspace != 0 {
		err = errors.Join(err, r.t.d.Free(r.workspace))
		r.workspace = 0
	}
	return err
}

// Graph implements driver.GraphRecorded: whether the recording replays
// as a hipGraph and, for a stream recording that does not, why capture
// failed. HSA queue recordings are prebuilt packets, not graphs.
func (r *recorded) Graph() (bool, error) { return r.exec != 0, r.captureErr }

// ErrNotCaptured is the capture error of a stream recording that replays
// its calls in order instead of as a hipGraph because HIP would not
// capture all of them.
var ErrNotCaptured = errors.New("rocmdev: not captured into a hipGraph")

// captureCalls records calls into a hipGraph on a stream of its own and
// instantiates it; on success r.call launches the graph. A library call's
// function runs here once (what it enqueues is captured, not run), and
// again at every replay only if capture failed.
func (t *Task) captureCalls(r *recorded, calls []func(uintptr) error) (err error) {
	hp := t.d.rt.HIP
	if testhooks.SkipHIPCapture.Load() {
		return fmt.Errorf("%w: testhooks.SkipHIPCapture", ErrNotCaptured)
	}
	gr, ok := hp.(hip.GraphRuntime)
	if !ok {
		return fmt.Errorf("%w: %w", ErrNotCaptured, hip.ErrGraphsUnavailable)
	}
	if rv, ok := hp.(hipVersionReporter); ok && !testhooks.ForceHIPCapture.Load() {
		// HIP before 5.3 runs hipModuleLaunchKernel at capture instead of
		// capturing it (the graph would lack rocsync's kernels and
		// rocBLAS's), and its graphs of copies, which it does capture,
		// cost more host time per replay than the calls themselves
		// (docs/benchmarks.md, measured on HIP 5.2.3): no graphs there.
		if v, err := rv.RuntimeVersion(); err == nil && v > 0 && v < hip.HIPVersionModuleLaunchCaptured {
			return fmt.Errorf("%w: HIP %d does not capture hipModuleLaunchKernel (HIP 5.3 does), "+
				"and its graphs of copies replay slower than the calls", ErrNotCaptured, v)
		}
	}
	cs, err := hp.StreamCreate(t.d.hipIndex, hip.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, hp.StreamDestroy(cs)) }()
	if t.st.BLAS != 0 {
		blas := t.d.rt.BLAS
		if err := blas.SetStream(t.st.BLAS, cs); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, blas.SetStream(t.st.BLAS, hip.Stream(t.st.Stream.Handle()))) }()
		// A workspace sized before the capture, which rocBLAS never grows
		// (its own would be freed and reallocated inside the capture, and
		// the nodes captured before would use freed memory: rocBLAS
		// documentation, "Graph support for rocBLAS"). It is the
		// recording's, for the graph's life; the handle gets its own back
		// after the capture.
		if ws, ok := blas.(rocblas.WorkspaceSetter); ok {
			p, err := hp.Malloc(t.d.hipIndex, CaptureWorkspace)
			if err != nil {
				return fmt.Errorf("rocmdev: the capture's rocBLAS workspace: %w", err)
			}
			if err := ws.SetWorkspace(t.st.BLAS, p, CaptureWorkspace); err != nil {
				return errors.Join(fmt.Errorf("rocmdev: rocblas_set_workspace: %w", err), hp.Free(t.d.hipIndex, p))
			}
			defer func() {
				err = errors.Join(err, ws.SetWorkspace(t.st.BLAS, 0, 0))
				if err != nil || r.exec == 0 {
					err = errors.Join(err, hp.Free(t.d.hipIndex, p))
					return
				}
				r.workspace = driver.DevicePtr(p)
			}()
		}
	}
	if err := gr.StreamBeginCapture(cs, hip.StreamCaptureModeRelaxed); err != nil {
		return err
	}
	callErr := driver.RunCalls(calls, uintptr(cs))
	g, endErr := gr.StreamEndCapture(cs)
	if err := errors.Join(callErr, endErr); err != nil {
		if g != 0 {
			err = errors.Join(err, gr.GraphDestroy(g))
		}
		return err
	}
	exec, err := gr.GraphInstantiate(g)
	err = errors.Join(err, gr.GraphDestroy(g))
	if err != nil {
		if exec != 0 {
			err = errors.Join(err, gr.GraphExecDestroy(exec))
		}
		return err
	}
	r.exec = exec
	r.call = func(s uintptr) error { return gr.GraphLaunch(exec, hip.Stream(s)) }
	return nil
}

// Record implements driver.Recorder.
func (t *Task) Record(lane driver.Lane, ops []driver.Op) (driver.Recorded, error) {
	if len(ops) == 0 {
		return nil, errors.New("rocmdev: empty recording")
	}
	r := &recorded{t: t, ops: len(ops), lane: lane}
	if lane == driver.LaneKernel && t.st.Queue != nil {
		ds := make([]queue.Dispatch, len(ops))
		for i, o := range ops {
			op, ok := o.(*driver.DispatchOp)
			if !ok || op.Kernel == nil || op.Kernel.Object == 0 {
				return nil, fmt.Errorf("%w: %v in a kernel-queue recording", driver.ErrUnsupported, o.Kind())
			}
			k := op.Kernel
			g := &op.Geometry
			ds[i] = queue.Dispatch{KernelObject: k.Object, Grid: g.Grid[0], Workgroup: uint16(g.Workgroup[0]),
				Dims: uint16(g.Dims), GridYZ: [2]uint32{g.Grid[1], g.Grid[2]}, WorkgroupYZ: [2]uint16{uint16(g.Workgroup[1]), uint16(g.Workgroup[2])},
				PrivateSegmentSize: k.PrivateSegmentSize, GroupSegmentSize: k.GroupSegmentSize, Kernarg: op.Args[:k.ArgsSize]}
		}
		q, err := t.st.Queue.NewRecording(ds)
		if err != nil {
			return nil, err
		}
		r.q = q
		return r, nil
	}
	if lane == driver.LaneHost {
		return nil, fmt.Errorf("%w: host functions are replayed by the front package", driver.ErrUnsupported)
	}
	for i := range ops {
		c, err := t.streamCall(ops[i])
		if err != nil {
			return nil, err
		}
		r.calls = append(r.calls, c)
	}
	if r.captureErr = t.captureCalls(r, r.calls); r.captureErr != nil {
		r.call = driver.InOrder(r.calls)
	}
	return r, nil
}

// streamCall is the HIP call an op makes on the task's stream, with its
// arguments copied (the op is the front package's and changes).
func (t *Task) streamCall(o driver.Op) (func(uintptr) error, error) {
	hp := t.d.rt.HIP
	switch op := o.(type) {
	case *driver.DispatchOp:
		k := op.Kernel
		if k == nil || k.Function == 0 {
			return nil, fmt.Errorf("%w: dispatch of no HIP function on the stream", driver.ErrUnsupported)
		}
		kernarg := append([]byte(nil), op.Args[:k.ExplicitArgsSize]...)
		g := op.Geometry
		var grid, block [3]uint32
		for i := range grid {
			block[i] = max(g.Workgroup[i], 1)
			grid[i] = (max(g.Grid[i], 1) + block[i] - 1) / block[i]
		}
		fn := hip.Function(k.Function)
		return func(s uintptr) error { return hp.ModuleLaunchKernel(fn, grid, block, 0, hip.Stream(s), kernarg) }, nil
	case *driver.GemmOp:
		return t.gemmCall(*op)
	case *driver.LibraryCallOp:
		if op.Call == nil {
			return nil, fmt.Errorf("%w: library call of no function", driver.ErrUnsupported)
		}
		return op.Call, nil
	case *driver.CopyOp:
		switch op.Direction {
		case driver.HostToDevice:
			dst, src, n := hip.DevicePtr(op.Dst), op.Host, op.Size
			return func(s uintptr) error { return hp.MemcpyHtoDAsync(dst, src, n, hip.Stream(s)) }, nil
		case driver.DeviceToDevice:
			dst, src, n := hip.DevicePtr(op.Dst), hip.DevicePtr(op.Src), op.Size
			return func(s uintptr) error { return hp.MemcpyDtoDAsync(dst, src, n, hip.Stream(s)) }, nil
		}
	}
	return nil, fmt.Errorf("%w: %v in a stream recording", driver.ErrUnsupported, o.Kind())
}

// gemmCall is gemm's rocBLAS call as a function of the stream.
func (t *Task) gemmCall(g driver.GemmOp) (func(uintptr) error, error) {
	c, err := t.rocGemm(&g)
	if err != nil {
		return nil, err
	}
	return c.run, nil
}

// replay submits a recorded sequence: one Replay of the queue's packets,
// or one stream submission: a hipGraphLaunch, or the recorded calls.
func (t *Task) replay(op *driver.ReplayOp) (uint64, error) {
	r, ok := op.Recorded.(*recorded)
	if !ok || r.t != t {
		return 0, fmt.Errorf("%w: a replay recorded on another task or driver", driver.ErrUnsupported)
	}
	if r.q != nil {
		if t.st.Queue == nil {
			return 0, fmt.Errorf("rocmdev: the task has no HSA queue for its recording")
		}
		return t.st.Queue.Replay(r.q)
	}
	return t.st.Stream.Submit(r.call)
}

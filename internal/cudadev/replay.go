package cudadev

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
)

var (
	_ driver.Recorder      = (*Task)(nil)
	_ driver.GraphRecorded = (*recorded)(nil)
)

// recorded is a sequence prebuilt for one of the task's streams: a CUDA
// graph captured from the driver calls of its ops, launched with one
// cuGraphLaunch per replay. The calls are captured on a stream of the
// recording's own (so that no other task's event record on the task's
// streams lands in the graph), with the task's cuBLAS handle bound to it
// for the capture; cross-stream order is the front package's (one graph
// per segment, the segments ordered like ops). Where capture fails (a
// library call that does what capture forbids), the recording keeps the
// calls themselves, run in order by one stream submission; captureErr says
// why. A launch's parameter block is the recording's either way.
type recorded struct {
	t          *Task
	ops        int
	lane       driver.Lane
	params     []*cuda.ParamBlock
	call       func(stream uintptr) error
	exec       uintptr // the instantiated graph, 0 without one
	captureErr error
}

func (r *recorded) Ops() int { return r.ops }

// Lane implements driver.Recorded.
func (r *recorded) Lane() driver.Lane { return r.lane }

func (r *recorded) Release() error {
	var err error
	if r.exec != 0 {
		err = r.t.d.b.graphExecDestroy(r.exec)
		r.exec = 0
	}
	for _, pb := range r.params {
		pb.Free()
	}
	r.params = nil
	return err
}

// Graph reports whether the recording replays as a CUDA graph, and if not
// why capture failed.
func (r *recorded) Graph() (bool, error) { return r.exec != 0, r.captureErr }

// capture records calls into a CUDA graph on a stream of its own and
// instantiates it.
func (t *Task) capture(r *recorded, calls []func(uintptr) error) (err error) {
	b := t.d.b
	cs, err := b.streamCreate()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.streamDestroy(cs)) }()
	if t.blas != 0 {
		if err := b.blasSetStream(t.blas, cs); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, b.blasSetStream(t.blas, t.library.Handle())) }()
	}
	if err := b.captureBegin(cs); err != nil {
		return err
	}
	callErr := driver.RunCalls(calls, cs)
	g, endErr := b.captureEnd(cs)
	if err := errors.Join(callErr, endErr); err != nil {
		if g != 0 {
			// A call that failed without invalidating the capture still
			// leaves a graph, which the fallback does not use.
			err = errors.Join(err, b.graphDestroy(g))
		}
		return err
	}
	exec, err := b.graphInstantiate(g)
	if err != nil {
		return err
	}
	r.exec = exec
	r.call = func(s uintptr) error { return b.graphLaunch(exec, s) }
	return nil
}

// Record implements driver.Recorder.
func (t *Task) Record(lane driver.Lane, ops []driver.Op) (driver.Recorded, error) {
	if len(ops) == 0 {
		return nil, errors.New("cudadev: empty recording")
	}
	if lane == driver.LaneHost {
		return nil, fmt.Errorf("%w: host functions are replayed by the front package", driver.ErrUnsupported)
	}
	r := &recorded{t: t, ops: len(ops), lane: lane}
	calls := make([]func(uintptr) error, 0, len(ops))
	for i := range ops {
		c, err := t.recordCall(r, ops[i])
		if err != nil {
			_ = r.Release()
			return nil, err
		}
		calls = append(calls, c)
	}
	if r.captureErr = t.capture(r, calls); r.captureErr != nil {
		r.call = driver.InOrder(calls)
	}
	return r, nil
}

// recordCall is the driver call an op makes on its stream, made once.
func (t *Task) recordCall(r *recorded, o driver.Op) (func(uintptr) error, error) {
	b := t.d.b
	switch op := o.(type) {
	case *driver.DispatchOp:
		k := op.Kernel
		if k == nil || k.Object == 0 {
			return nil, fmt.Errorf("%w: dispatch of no kernel", driver.ErrUnsupported)
		}
		pb, err := cuda.NewParamBlock(int(max(k.ArgsSize, 1)), k.ParamOffsets)
		if err != nil {
			return nil, err
		}
		r.params = append(r.params, pb)
		copy(pb.Bytes(), op.Args[:k.ArgsSize])
		g := op.Geometry
		var grid, block [3]uint32
		for i := range grid {
			block[i] = max(g.Workgroup[i], 1)
			grid[i] = (max(g.Grid[i], 1) + block[i] - 1) / block[i]
		}
		fn := uintptr(k.Object)
		return func(s uintptr) error { return b.launch(fn, grid, block, s, pb) }, nil
	case *driver.GemmOp:
		if t.blas == 0 {
			if err := b.blasError(); err != nil {
				return nil, err
			}
			return nil, ErrNoBLAS
		}
		a, h := *op, t.blas
		return func(uintptr) error {
			return b.gemm(h, a.DType, a.TransA, a.TransB, a.M, a.N, a.K, a.Alpha, a.A, a.LDA, a.B, a.LDB, a.Beta, a.C, a.LDC)
		}, nil
	case *driver.LibraryCallOp:
		call := op.Call
		if call == nil {
			return nil, fmt.Errorf("%w: library call of no function", driver.ErrUnsupported)
		}
		return func(s uintptr) error { return b.call(call, s) }, nil
	case *driver.CopyOp:
		// A download is no part of a recording: the front package
		// refuses it (its result is read on the host).
		if op.Direction == driver.HostToDevice || op.Direction == driver.DeviceToDevice {
			dir, dst, src, host, n := op.Direction, op.Dst, op.Src, op.Host, op.Size
			return func(s uintptr) error { return b.copyAsync(dir, dst, src, host, n, s) }, nil
		}
	}
	return nil, fmt.Errorf("%w: %v in a recording", driver.ErrUnsupported, o.Kind())
}

// replay submits a recorded sequence on its stream.
func (t *Task) replay(op *driver.ReplayOp) (uint64, error) {
	r, ok := op.Recorded.(*recorded)
	if !ok || r.t != t {
		return 0, fmt.Errorf("%w: a replay recorded on another task or driver", driver.ErrUnsupported)
	}
	return t.lane(r.lane).Submit(r.call)
}

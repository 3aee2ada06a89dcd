package driver

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

type laneRecorded struct{ lane Lane }

func (r laneRecorded) Ops() int       { return 1 }
func (r laneRecorded) Lane() Lane     { return r.lane }
func (r laneRecorded) Release() error { return nil }

// Every op type, with the kind and lane it has.
func TestOpKindAndLaneFollowFromItsType(t *testing.T) {
	for _, c := range []struct {
		op   Op
		kind Kind
		lane Lane
	}{
		{&DispatchOp{}, Dispatch, LaneKernel},
		{&SignalOp{}, SignalExport, LaneKernel},
		{&SignalOp{Import: true}, SignalImport, LaneKernel},
		{&GemmOp{}, Gemm, LaneLibrary},
		{&LibraryCallOp{}, LibraryCall, LaneLibrary},
		{&CopyOp{Direction: HostToDevice}, CopyHtoD, LaneLibrary},
		{&CopyOp{Direction: DeviceToHost}, CopyDtoH, LaneLibrary},
		{&CopyOp{Direction: DeviceToDevice}, CopyDtoD, LaneLibrary},
		{&CopyOp{}, KindInvalid, LaneLibrary},
		{&PeerCopyOp{}, CopyPeer, LaneLibrary},
		{&HostFuncOp{}, HostFunc, LaneHost},
		{&ReplayOp{}, Replay, LaneKernel},
		{&ReplayOp{Recorded: laneRecorded{LaneLibrary}}, Replay, LaneLibrary},
		{&ReplayOp{Recorded: laneRecorded{LaneHost}}, Replay, LaneHost},
	} {
		require.Equal(t, c.kind, c.op.Kind(), "%T", c.op)
		require.Equal(t, c.lane, c.op.Lane(), "%T %v", c.op, c.kind)
	}
}

// A clone is equal to the op and shares none of its storage: a recording
// keeps its clone while the task reuses the op.
func TestOpCloneSharesNothingTheTaskReuses(t *testing.T) {
	var x byte
	d := &DispatchOp{Kernel: &LoadedKernel{Name: "k"}}
	d.Args[0] = 7
	c := &CopyOp{Direction: DeviceToHost, Src: 1, Host: unsafe.Pointer(&x), Size: 4}
	for _, op := range []Op{d, c, &GemmOp{M: 3}, &LibraryCallOp{}, &PeerCopyOp{Size: 2}, &HostFuncOp{},
		&ReplayOp{Recorded: laneRecorded{LaneLibrary}}, &SignalOp{Signal: 5, Import: true}} {
		cl := op.Clone()
		require.Equal(t, op, cl, "%T", op)
		require.NotSame(t, op, cl, "%T", op)
	}
	cl := d.Clone().(*DispatchOp)
	d.Args[0] = 8
	require.Equal(t, byte(7), cl.Args[0], "the clone's argument block is its own")
}

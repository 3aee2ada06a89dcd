package driver

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/userkernel"
)

type laneRecorded struct{ lane Lane }

func (r laneRecorded) Ops() int       { return 1 }
func (r laneRecorded) Lane() Lane     { return r.lane }
func (r laneRecorded) Release() error { return nil }

// An op's lane is its kind's; a replay's is its recording's.
func TestOpLaneIsItsKinds(t *testing.T) {
	want := map[Kind]Lane{Dispatch: LaneKernel, SignalExport: LaneKernel, SignalImport: LaneKernel,
		Gemm: LaneLibrary, LibraryCall: LaneLibrary, CopyHtoD: LaneLibrary, CopyDtoH: LaneLibrary,
		CopyDtoD: LaneLibrary, CopyPeer: LaneLibrary, HostFunc: LaneHost}
	for k, l := range want {
		op := Op{Kind: k}
		require.Equal(t, l, op.Lane(), "%v", k)
	}
	for _, l := range []Lane{LaneKernel, LaneLibrary} {
		op := Op{Kind: Replay, Recorded: laneRecorded{l}}
		require.Equal(t, l, op.Lane())
	}
}

// Reset leaves nothing of the op before but its argument block.
func TestOpResetClearsEveryField(t *testing.T) {
	var x byte
	op := Op{Kind: Gemm, Kernel: &LoadedKernel{}, Geometry: userkernel.Geometry{Dims: 2}, Gemm: GemmArgs{M: 3},
		Call: func(uintptr) error { return nil }, Dst: 1, Src: 2, Host: unsafe.Pointer(&x), Size: 4,
		Func: func() error { return nil }, Recorded: laneRecorded{}, Signal: 5}
	op.Args[0] = 7
	op.Reset(CopyDtoD)
	want := Op{Kind: CopyDtoD}
	want.Args[0] = 7
	require.Nil(t, op.Call)
	require.Nil(t, op.Func)
	op.Call, op.Func = nil, nil
	require.Equal(t, want, op)
}

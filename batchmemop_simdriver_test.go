package rocsync

import (
	"encoding/binary"
	"math"
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/dl"
)

// HIP 6.4's hipStreamBatchMemOp runs HIP's blit kernel
// __amd_rocclr_batchMemOp, which the simulated GPU runs by name with its
// real argument layout: a user's batch of stream memory operations, made
// on the task's library stream, writes the array rocsync then reads back.
func TestHIPBatchMemOpOnSimulatedDriver(t *testing.T) {
	if !kfdsim.InChild(t) && simRelease(t).HIPMajor < 6 {
		t.Skipf("hipStreamBatchMemOp is HIP 6.4's; this release's HIP is %d.x", simRelease(t).HIPMajor)
	}
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		d := openSimulatedROCm(t, DeviceSide)[0]
		defer func() { require.NoError(t, d.Close()) }()
		_, v := simulatedRuntimeVersions(t)
		require.GreaterOrEqual(t, v, 60400000, "hipStreamBatchMemOp is HIP 6.4's")
		lib, err := dl.Open("libamdhip64", hip.Sonames, dl.SearchDirs())
		require.NoError(t, err)
		syms, err := lib.Symbols([]string{"hipStreamBatchMemOp"})
		require.NoError(t, err)
		tk := d.DefaultTask()
		x, err := d.FromFloat32(1, 4, []float32{0, 0, 0, 9})
		require.NoError(t, err)
		// hipStreamBatchMemOpParams: 48 bytes each; the operation at 0,
		// the address at 8, the value at 16 (hip_runtime_api.h).
		const writeValue32, writeValue64 = 0x2, 0x5
		params := make([]byte, 2*48)
		le := binary.LittleEndian
		ptr := uint64(x.Buffer().Pointer())
		le.PutUint32(params[0:], writeValue64)
		le.PutUint64(params[8:], ptr)
		le.PutUint64(params[16:], uint64(math.Float32bits(1.5))|uint64(math.Float32bits(2.5))<<32)
		le.PutUint32(params[48:], writeValue32)
		le.PutUint64(params[56:], ptr+8)
		le.PutUint64(params[64:], uint64(math.Float32bits(3.5)))
		require.NoError(t, tk.LibraryCall([]Arg{InOut(x)}, func(stream uintptr) error {
			r, _, _ := purego.SyscallN(syms[0], stream, 2, uintptr(unsafe.Pointer(&params[0])), 0)
			if r != 0 {
				return &hip.Error{Func: "hipStreamBatchMemOp", Code: hip.ErrorCode(r)}
			}
			return nil
		}))
		got, err := x.Float32s()
		require.NoError(t, err)
		runtime.KeepAlive(params)
		require.Equal(t, []float32{1.5, 2.5, 3.5, 9}, got)
	})
}

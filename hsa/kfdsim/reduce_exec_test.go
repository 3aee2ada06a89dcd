//go:build linux && (amd64 || arm64)

package kfdsim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/kernels"
)

// reduction sets up one rocsync reduction dispatch through the Go executor.
type reduction struct {
	hs                *harness
	e                 *Executor
	kd                uint64
	in, out, ws, karg uint64
	inIdx, wsIdx      int
	red               kernels.Reduction
	dt                kernels.DType
	rows, cols        uint64
	inBytes, outBytes uint64
	wsBytes           uint64
}

func newReduction(t *testing.T, red kernels.Reduction, dt kernels.DType, rows, cols uint64) *reduction {
	hs := buildHarness(t)
	e, err := RegisterExecutor(hs.path)
	if err != nil {
		t.Fatal(err)
	}
	e.logUnknown = false
	t.Cleanup(func() { e.Close() })
	co, _ := kernels.CodeObject("gfx90a")
	base, _, kds := hs.loadImage(co, nodeMask)
	s, err := red.Shape(rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	w := &reduction{hs: hs, e: e, kd: base + kds[red.KernelName(dt)], red: red, dt: dt, rows: rows, cols: cols}
	es := uint64(dt.Size())
	w.inBytes, w.outBytes, w.wsBytes = rows*cols*es, s.Outputs*es, s.WorkspaceSize(dt)
	w.in, w.inIdx = hs.mem(max(w.inBytes, 8), nodeMask)
	w.out, _ = hs.mem(max(w.outBytes, 8), nodeMask)
	w.ws, w.wsIdx = hs.mem(max(w.wsBytes, 8), nodeMask)
	w.karg, _ = hs.mem(kernels.ReduceKernargSize, nodeMask)
	in := bytesAt(w.in, w.inBytes)
	for i := uint64(0); i < rows*cols; i++ {
		x := (float64(i%37) - 18.3) * math.Pow(2, float64(i%11)-5)
		if dt == kernels.F32 {
			binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(x)))
		} else {
			binary.LittleEndian.PutUint64(in[8*i:], math.Float64bits(x))
		}
	}
	copy(bytesAt(w.out, w.outBytes), bytes.Repeat([]byte{0xAB}, int(w.outBytes)))
	args := kernels.ReduceArgs{Out: w.out, In: w.in, Workspace: w.ws, Rows: rows, Cols: cols}
	args.Encode(bytesAt(w.karg, kernels.ReduceKernargSize))
	return w
}

func (w *reduction) run(groups uint32, wg uint16) int {
	return w.hs.dispatch(w.kd, w.karg, [3]uint32{groups * uint32(wg), 1, 1}, [3]uint16{wg, 1, 1})
}

func (w *reduction) want(t *testing.T) []byte {
	out := make([]byte, w.outBytes)
	if err := kernels.ReduceBytes(w.red, w.dt, out, bytesAt(w.in, w.inBytes), make([]byte, w.wsBytes), w.rows, w.cols); err != nil {
		t.Fatal(err)
	}
	return out
}

// The simulated GPU's executor runs every reduction kernel by name, with
// the layout checked against the metadata, equal to the reference bit for
// bit, and leaves the workspace zero, launch after launch.
func TestExecutorRunsReductions(t *testing.T) {
	for _, tc := range []struct {
		red        kernels.Reduction
		dt         kernels.DType
		rows, cols uint64
	}{
		{kernels.SumAll, kernels.F32, 1, 1}, {kernels.SumAll, kernels.F64, 3, 4099},
		{kernels.SumRows, kernels.F32, 5, 9000}, {kernels.SumRows, kernels.F64, 7, 300},
		{kernels.SumCols, kernels.F32, 9000, 5}, {kernels.SumCols, kernels.F64, 257, 3},
	} {
		w := newReduction(t, tc.red, tc.dt, tc.rows, tc.cols)
		for i := range 3 {
			if r := w.run(uint32(1+i*7), kernels.ReduceWorkgroupSize); r != execOK {
				t.Fatalf("%v %v %dx%d: dispatch = %d (%v)", tc.red, tc.dt, tc.rows, tc.cols, r, w.e.LastRefusal())
			}
			if got := bytesAt(w.out, w.outBytes); !bytes.Equal(got, w.want(t)) {
				t.Errorf("%v %v %dx%d: result differs from kernels.ReduceBytes", tc.red, tc.dt, tc.rows, tc.cols)
			}
			if err := kernels.CheckZeroed(bytesAt(w.ws, w.wsBytes)); err != nil {
				t.Errorf("%v %v %dx%d launch %d: %v", tc.red, tc.dt, tc.rows, tc.cols, i, err)
			}
		}
		if st := w.e.Stats(); st.Runs != 3 || st.Refused != 0 {
			t.Errorf("%v %v: stats %+v", tc.red, tc.dt, st)
		}
	}
}

// A dirty workspace is refused (the queue faults), the output is untouched,
// and LastRefusal says why.
func TestExecutorRefusesDirtyReductionWorkspace(t *testing.T) {
	w := newReduction(t, kernels.SumRows, kernels.F32, 3, 9000)
	bytesAt(w.ws, w.wsBytes)[w.wsBytes-1] = 0x10 // the last partial
	if r := w.run(4, kernels.ReduceWorkgroupSize); r != execUnknownKernel {
		t.Fatalf("dirty workspace: dispatch = %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
	var nz *kernels.WorkspaceNotZeroError
	if err := w.e.LastRefusal(); !errors.As(err, &nz) || nz.Offset != w.wsBytes-1 {
		t.Errorf("LastRefusal = %v", err)
	}
	if st := w.e.Stats(); st.Refused != 1 || st.Runs != 0 {
		t.Errorf("stats %+v", st)
	}
	if !bytes.Equal(bytesAt(w.out, w.outBytes), bytes.Repeat([]byte{0xAB}, int(w.outBytes))) {
		t.Error("a refused reduction wrote its output")
	}
}

// Other workgroup shapes are refused; a workspace not mapped to the GPU
// faults at its address.
func TestExecutorReductionShapeAndMapping(t *testing.T) {
	w := newReduction(t, kernels.SumAll, kernels.F32, 1, 9000)
	if r := w.run(4, 64); r != execUnknownKernel {
		t.Errorf("64-wide workgroups: %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
	if r := w.hs.dispatch(w.kd, w.karg, [3]uint32{300, 1, 1}, [3]uint16{256, 1, 1}); r != execUnknownKernel {
		t.Errorf("partial workgroup: %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
	if st := w.e.Stats(); st.Refused != 2 {
		t.Errorf("stats %+v", st)
	}
	w.hs.call("harness_set_mapped", uintptr(w.wsIdx), 0)
	before := w.hs.faults()
	if r := w.run(2, kernels.ReduceWorkgroupSize); r != execFault {
		t.Fatalf("unmapped workspace: %d, want KFDSIM_FAULT", r)
	}
	if w.hs.faults() != before+1 || uint64(w.hs.call("harness_last_fault")) != w.ws {
		t.Errorf("fault not raised at the workspace address")
	}
}

// A reduction dispatch allocates nothing in the executor once its plan is
// made (the per-dispatch path of every launch).
func TestExecutorReductionHotPathAllocatesNothing(t *testing.T) {
	if execRaceEnabled {
		t.Skip("sync.Pool drops items under -race, so allocations reappear there")
	}
	w := newReduction(t, kernels.SumRows, kernels.F64, 4, 9000)
	co, _ := kernels.CodeObject("gfx90a")
	base, extent, _ := w.hs.loadImage(co, nodeMask)
	mem := cmem.Alloc(256)
	defer cmem.Free(mem)
	clear(unsafe.Slice((*byte)(mem), 256))
	name := w.red.KernelName(w.dt)
	copy(unsafe.Slice((*byte)(unsafe.Add(mem, 128)), len(name)+1), name+"\x00")
	call, disp := uintptr(mem), uintptr(mem)+64
	*(*uint64)(cmem.Ptr(call + callName)) = uint64(call + 128)
	*(*uint64)(cmem.Ptr(call + callImageBase)) = base
	*(*uint64)(cmem.Ptr(call + callImageSize)) = extent
	*(*uint64)(cmem.Ptr(call + callDispatch)) = uint64(disp)
	*(*uint32)(cmem.Ptr(disp + dispGPUNode)) = gpuNode
	*(*uint64)(cmem.Ptr(disp + dispKernarg)) = w.karg
	*(*uint32)(cmem.Ptr(disp + dispGrid)) = 4 * kernels.ReduceWorkgroupSize
	*(*uint32)(cmem.Ptr(disp + dispGrid + 4)) = 1
	*(*uint32)(cmem.Ptr(disp + dispGrid + 8)) = 1
	*(*uint16)(cmem.Ptr(disp + dispWorkgroup)) = kernels.ReduceWorkgroupSize
	*(*uint16)(cmem.Ptr(disp + dispWorkgroup + 2)) = 1
	*(*uint16)(cmem.Ptr(disp + dispWorkgroup + 4)) = 1
	if r := w.e.run(call); r != execOK {
		t.Fatalf("first run = %d (%v)", r, w.e.LastRefusal())
	}
	allocs := testing.AllocsPerRun(20, func() {
		if r := w.e.run(call); r != execOK {
			t.Fatalf("run = %d", r)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per dispatch, want 0", allocs)
	}
}

// A kernel with a reduction's name but another signature, or without the
// required 256-wide workgroup, is refused: the executor runs only what the
// loaded code object's metadata says it can.
func TestExecutorRefusesReductionLayoutOtherThanMetadata(t *testing.T) {
	for name, src := range map[string]string{
		"uint rows": "kernel __attribute__((reqd_work_group_size(256, 1, 1))) void rocsync_sum_all_f32(global float* out, " +
			"global const float* in, global uint* workspace, uint rows, ulong cols) {}\n",
		"no reqd_work_group_size": "kernel void rocsync_sum_all_f32(global float* out, " +
			"global const float* in, global uint* workspace, ulong rows, ulong cols) {}\n",
	} {
		path := filepath.Join(t.TempDir(), "wrong.cl")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		co := buildCL(t, path)
		hs := buildHarness(t)
		e, err := RegisterExecutor(hs.path)
		if err != nil {
			t.Fatal(err)
		}
		e.logUnknown = false
		base, _, kds := hs.loadImage(co, nodeMask)
		karg, _ := hs.mem(64, nodeMask)
		if r := hs.dispatch(base+kds["rocsync_sum_all_f32"], karg, [3]uint32{256, 1, 1}, [3]uint16{256, 1, 1}); r != execUnknownKernel {
			t.Errorf("%s: dispatch = %d, want KFDSIM_UNKNOWN_KERNEL", name, r)
		}
		if st := e.Stats(); st.Unknown != 1 || st.Runs != 0 {
			t.Errorf("%s: stats %+v, want one unknown", name, st)
		}
		e.Close()
	}
}

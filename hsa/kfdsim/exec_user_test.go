//go:build linux && (amd64 || arm64)

package kfdsim

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/rocsync/rocsync/userkernel"
)

// saxpyCL has SAXPY's signature; its body uses a compiler builtin for the
// index since buildCL links no device library (the executor runs the
// reference, not the code).
const saxpyCL = `kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	uint i = __builtin_amdgcn_workitem_id_x();
	if (i < n) y[i] = a * x[i] + y[i];
}`

// saxpyRef is SAXPY's Go reference, as a user would register it.
func saxpyRef(g userkernel.Geometry, args []userkernel.Arg, mem userkernel.Memory) error {
	n := min(args[3].Uint64(), uint64(g.Grid[0]))
	y, err := mem.Bytes(args[0].Ptr(), 4*n, true)
	if err != nil {
		return err
	}
	x, err := mem.Bytes(args[1].Ptr(), 4*n, false)
	if err != nil {
		return err
	}
	a := float32(args[2].Float64())
	le := binary.LittleEndian
	for i := uint64(0); i < n; i++ {
		le.PutUint32(y[4*i:], math.Float32bits(a*math.Float32frombits(le.Uint32(x[4*i:]))+math.Float32frombits(le.Uint32(y[4*i:]))))
	}
	return nil
}

// A kernel the executor does not know runs through the References given
// to UseReferences, its signature read from the loaded image: without
// them it is refused (the queue faults), with them it computes; an
// operand not mapped to the GPU is a VM fault before the reference
// touches it, and a reference's own error refuses the launch.
func TestExecutorRunsUserKernelsByReference(t *testing.T) {
	src := filepath.Join(t.TempDir(), "saxpy.cl")
	if err := os.WriteFile(src, []byte(saxpyCL), 0o600); err != nil {
		t.Fatal(err)
	}
	co := buildCL(t, src)
	hs := buildHarness(t)
	e, err := RegisterExecutor(hs.path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.logUnknown = false
	base, _, kds := hs.loadImage(co, nodeMask)
	const n = 100
	y, _ := hs.mem(4*n, nodeMask)
	x, xIdx := hs.mem(4*n, nodeMask)
	karg, _ := hs.mem(256, nodeMask)
	yv, xv := bytesAt(y, 4*n), bytesAt(x, 4*n)
	le := binary.LittleEndian
	for i := range n {
		le.PutUint32(xv[4*i:], math.Float32bits(float32(i)))
		le.PutUint32(yv[4*i:], math.Float32bits(1))
	}
	kk := bytesAt(karg, 24)
	le.PutUint64(kk[0:], y)
	le.PutUint64(kk[8:], x)
	le.PutUint32(kk[16:], math.Float32bits(2))
	le.PutUint32(kk[20:], n)
	run := func() int { return hs.dispatch(base+kds["saxpy"], karg, [3]uint32{128, 1, 1}, [3]uint16{64, 1, 1}) }

	if r := run(); r != execUnknownKernel {
		t.Fatalf("without references: %d, want KFDSIM_UNKNOWN_KERNEL", r)
	}
	refs := &userkernel.References{}
	if err := refs.Register("saxpy", saxpyRef); err != nil {
		t.Fatal(err)
	}
	e.UseReferences(refs)
	if r := run(); r != execOK {
		t.Fatalf("with a reference: %d", r)
	}
	for i := range n {
		if got := math.Float32frombits(le.Uint32(yv[4*i:])); got != 2*float32(i)+1 {
			t.Fatalf("y[%d] = %v, want %v", i, got, 2*float32(i)+1)
		}
	}
	hs.call("harness_set_mapped", uintptr(xIdx), 0)
	if r := run(); r != execFault {
		t.Errorf("x unmapped: %d, want KFDSIM_FAULT", r)
	}
	hs.call("harness_set_mapped", uintptr(xIdx), nodeMask)

	broken := &userkernel.References{}
	cause := errors.New("the reference refuses")
	if err := broken.Register("saxpy", func(userkernel.Geometry, []userkernel.Arg, userkernel.Memory) error { return cause }); err != nil {
		t.Fatal(err)
	}
	e.UseReferences(broken)
	if r := run(); r != execUnknownKernel || !errors.Is(e.LastRefusal(), cause) {
		t.Errorf("a failing reference: %d (%v), want a refusal", r, e.LastRefusal())
	}
	if st := e.Stats(); st.Runs != 1 || st.Faults != 1 || st.Unknown != 2 || st.Refused != 1 {
		t.Errorf("stats %+v, want 1 run, 1 fault, 2 unknown of which 1 refused", st)
	}
}

package cudadev

import (
	"runtime"
	"testing"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// A caller that locked its thread with its own context current (another
// GPU's) finds that context current again after every kind of op: a
// kernel, a gemm (cuBLAS, with the context bound around it), a library
// call. The ops left device 0's context there, so the caller's next
// driver call ran silently on the other GPU.
func TestOpsPutTheCallersContextBack(t *testing.T) {
	cfakeEnv(t)
	d := openFirst(t, driver.DeviceConfig{Policy: syncstate.DeviceSide})
	tk := newTask(t, d, syncstate.Sinks{})
	defer func() {
		if err := tk.Close(); err != nil {
			t.Error(err)
		}
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	lib, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	other, err := lib.PrimaryCtxRetain(1)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	const side = 4
	bufs := make([]driver.DevicePtr, 3)
	for i := range bufs {
		if bufs[i], err = d.Malloc(side * side * 4); err != nil {
			t.Fatal(err)
		}
		defer d.Free(bufs[i])
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mine := other.Handle()
	for name, op := range map[string]func() error{
		"kernel": func() error {
			_, err := tk.Launch(kernels.Fill, kernels.F32, kernels.Args{Out: uint64(bufs[0]), Alpha: 1, N: side * side})
			return err
		},
		"gemm": func() error {
			_, err := tk.Submit(&driver.GemmOp{DType: kernels.F32, M: side, N: side, K: side, Alpha: 1,
				A: bufs[0], LDA: side, B: bufs[1], LDB: side, C: bufs[2], LDC: side})
			return err
		},
		"library call": func() error {
			_, err := tk.Submit(&driver.LibraryCallOp{Call: func(uintptr) error { return nil }})
			return err
		},
	} {
		if err := lib.CtxSetCurrent(mine); err != nil {
			t.Fatal(err)
		}
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cur, err := lib.CtxGetCurrent(); err != nil || cur != mine {
			t.Errorf("%s: the thread's context is %#x after the op, the caller's was %#x (%v)", name, cur, mine, err)
		}
	}
}

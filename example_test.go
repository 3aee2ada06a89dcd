package rocsync_test

import (
	"fmt"

	"github.com/rocsync/rocsync"
	_ "github.com/rocsync/rocsync/backends" // the ROCm, CUDA and emulator drivers
)

// The README's example: a kernel, a gemm that reads its result (at most
// one host wait, at the HSA→HIP boundary), and a read-back.
func Example() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()

	x, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	sq, _ := t.Mul(x, x)                  // HSA kernel: [1 4; 9 16]
	y, _ := t.MatMul(sq, x, false, false) // rocBLAS on the HIP stream
	vals, _ := y.Float32s()
	fmt.Println(vals)
	st := dev.Stats()
	fmt.Println("dispatches:", st.Dispatches, "boundary waits ≤ 1:", st.HostWaitsFor(rocsync.ReasonBoundary) <= 1)
	// Output:
	// [13 18 57 82]
	// dispatches: 2 boundary waits ≤ 1: true
}

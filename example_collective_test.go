package rocsync_test

import (
	"fmt"

	"github.com/rocsync/rocsync"
)

// Collectives are ops: here two emulated GPUs each scale their part with a
// kernel, all-reduce it (the emulated RCCL on each GPU's library stream,
// ordered after the kernel on the device) and read the sum.
func Example_collectives() {
	devs, err := rocsync.OpenAll(rocsync.Options{Backend: rocsync.Emulator,
		Emulator: rocsync.EmulatorOptions{Devices: 2, HazardChecker: true}})
	if err != nil {
		panic(err)
	}
	tasks := make([]*rocsync.Task, len(devs))
	grads := make([]*rocsync.Array, len(devs))
	for i, d := range devs {
		defer d.Close()
		tasks[i] = d.DefaultTask()
		x, _ := d.FromFloat32(1, 3, []float32{1, 2, 3})
		grads[i], _ = tasks[i].Scale(float64(i+1), x) // gpu0: x, gpu1: 2x
	}
	comm, err := rocsync.NewCommunicator(tasks...) // ncclCommInitAll
	if err != nil {
		panic(err)
	}
	defer comm.Close()
	if err := comm.AllReduce(rocsync.ReduceSum, grads...); err != nil {
		panic(err)
	}
	for i := range devs {
		v, _ := grads[i].Float32s()
		fmt.Printf("gpu%d %v\n", devs[i].Index(), v)
	}
	fmt.Println("hazards:", len(devs[0].Hazards()))
	// Output:
	// gpu0 [3 6 9]
	// gpu1 [3 6 9]
	// hazards: 0
}

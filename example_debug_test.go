package rocsync_test

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync"
)

// Launch-blocking mode (Options.LaunchBlocking, or
// ROCSYNC_LAUNCH_BLOCKING=1) waits for every op, so a fault is reported by
// the op that caused it. Here the emulator's fault injector makes the
// multiply fault.
func Example_launchBlocking() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff, LaunchBlocking: true,
		Emulator: rocsync.EmulatorOptions{FaultInjector: func(op string) bool { return op == "rocsync_mul_f32" }}})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	x, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	_, err = t.Mul(x, x)
	fmt.Println("Mul failed:", errors.Is(err, rocsync.ErrFault))
	_, err = t.Add(x, x)
	fmt.Println("the task's queue is broken:", errors.Is(err, rocsync.ErrFault))
	other, _ := dev.NewTask()
	y, _ := other.Add(x, x)
	vals, err := y.Float32s()
	fmt.Println("another task still works:", vals, err)
	// Output:
	// Mul failed: true
	// the task's queue is broken: true
	// another task still works: [2 4 6 8] <nil>
}

// Sync-debug mode reports host waits other than read-backs and explicit
// Synchronize calls. SyncDebugFail refuses them: here the gemm would wait
// on the host for the kernel (an HSA→HIP boundary under DeviceSide).
func Example_syncDebug() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff, SyncDebug: rocsync.SyncDebugFail,
		Emulator: rocsync.EmulatorOptions{MaxDelay: 20_000_000}}) // 20 ms: the kernel is still running
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	x, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	sq, _ := t.Mul(x, x)
	_, err = t.MatMul(sq, x, false, false)
	fmt.Println("refused:", errors.Is(err, rocsync.ErrHostWait))
	fmt.Println(err)
	// Output:
	// refused: true
	// rocsync: MatMul: implicit host wait refused by sync-debug mode: boundary host wait for gpu0/hsa-q0#1 -> gpu0/hip-s1: syncstate: host wait refused
}

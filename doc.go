// Package rocsync runs Go programs' GPU work through two runtimes at once
// and keeps it correctly ordered with as few host waits as possible.
//
// On AMD GPUs, rocsync's own elementwise kernels are dispatched as AQL
// packets on HSA queues and library calls (rocBLAS gemm) run on HIP
// streams; on NVIDIA GPUs the same roles are a kernel stream and a cuBLAS
// stream. Every Array carries a sync state (the fence of its last writer and
// of its newest reader per queue), and before each op the sync core decides
// what the op must wait for: nothing on its own queue or for work already
// done, a device-side wait across queues of one runtime, and a host wait
// only where the device cannot wait (the HSA↔HIP boundary) and when the host
// reads data back. The Policy chooses how crossings are handled, so the
// designs can be compared on the same work.
//
// Without an AMD GPU, Open's Auto backend uses the embedded emulated AMD
// device, which runs the same code above the hsa, hip and rocblas
// interfaces and can check every access for unordered conflicts.
//
// Open finds the backends among the drivers registered with package
// driver, as database/sql finds its drivers: this package imports none of
// them, and a program imports package backends once, for its side effect
// (without it, Open fails with ErrUnavailable saying so).
//
//	import _ "github.com/rocsync/rocsync/backends" // ROCm, CUDA and the emulator
//
//	dev, _ := rocsync.Open(rocsync.Options{})
//	defer dev.Close()
//	t := dev.DefaultTask()
//	x, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
//	y, _ := t.Mul(x, x)                  // a kernel on the task's HSA queue
//	z, _ := t.MatMul(y, x, false, false) // rocBLAS on its HIP stream
//	vals, _ := z.Float32s()              // waits for z's writer only
//
// Several GPUs open together with OpenAll. An array belongs to one device;
// data moves between devices with Task.CopyPeer (peer to peer where the
// GPUs reach each other, staged through pinned host memory otherwise),
// ordered across devices on the device where the runtimes allow it (events
// and HSA signals reach across devices) and otherwise by a host wait
// counted as ReasonCrossDevice.
//
// Failures travel with fences: an op whose device work fails (ErrFault)
// poisons the arrays it writes, every op and wait that depends on it
// returns an error wrapping the cause, and no wait hangs behind it. After a
// fault the other tasks and untouched arrays remain usable, a poisoned
// array is recovered by overwriting it completely, the task whose queue or
// stream broke is not, and the device can be closed and opened again.
// Host waits are bounded by Options.WaitTimeout (ErrTimeout), and
// Options.MaxInFlight bounds how far a task runs ahead.
//
// Every error an exported function returns is an *Error naming the
// function the program called and its operands as the program wrote them;
// its Kind (ErrShape, ErrOutOfMemory, ErrFault, ...) works with errors.Is.
// Stats counts what the sync core did: ops, host waits by Reason, waits
// skipped and waits made on the device.
//
// Logging needs no logging package: rocsync is quiet while all goes well,
// Options.LogLevel and LogWriter, or a log/slog LogHandler, configure it,
// and at LogDebug (or ROCSYNC_LOG=debug) every sync decision is logged.
// The README's Debugging section covers launch-blocking and sync-debug
// modes, debug logging and the emulator's hazard checker.
package rocsync

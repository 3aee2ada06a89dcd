package rocsync

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/userkernel"
)

// Policy chooses how rocsync orders work across queues and streams.
type Policy = syncstate.Policy

// The policies; see the README for what each one does.
const (
	WaitAlways    = syncstate.WaitAlways
	SkipSameQueue = syncstate.SkipSameQueue
	DeviceSide    = syncstate.DeviceSide
	Unified       = syncstate.Unified
	DeviceBridge  = syncstate.DeviceBridge
)

// ParsePolicy parses a policy name such as "DeviceSide" (as Policy's
// String prints it); an unknown name is an ErrInvalid error.
func ParsePolicy(s string) (Policy, error) {
	p, err := syncstate.ParsePolicy(s)
	if err != nil {
		return 0, &Error{Op: "ParsePolicy", Kind: ErrInvalid, Detail: fmt.Sprintf("%q", s), Err: err}
	}
	return p, nil
}

// Backend chooses what Open drives.
type Backend uint8

// ParseBackend parses a backend name as Backend's String prints it
// ("auto", "emulator", "rocm", "cuda"); anything else is an ErrInvalid
// error naming the choices.
func ParseBackend(s string) (Backend, error) {
	for _, b := range []Backend{Auto, Emulator, ROCm, CUDA} {
		if s == b.String() {
			return b, nil
		}
	}
	return 0, newErr("ParseBackend", ErrInvalid, "unknown backend %q (want auto, emulator, rocm or cuda)", s)
}

const (
	// Auto uses the real ROCm stack when it is present and works, else
	// NVIDIA's CUDA driver when it is present and works, and the emulator
	// otherwise; Open logs the choice at info level.
	Auto Backend = iota
	// Emulator always uses the embedded emulated AMD device.
	Emulator
	// ROCm requires the real stack and fails if it is unavailable.
	ROCm
	// CUDA drives an NVIDIA GPU through the CUDA driver API and cuBLAS,
	// with the same sync core: rocsync's kernels on one stream per task,
	// cuBLAS on another.
	CUDA
)

// String names the backend: "auto", "emulator", "rocm" or "cuda".
func (b Backend) String() string {
	switch b {
	case Auto:
		return "auto"
	case Emulator:
		return "emulator"
	case ROCm:
		return "rocm"
	case CUDA:
		return "cuda"
	}
	return fmt.Sprintf("Backend(%d)", uint8(b))
}

// EmulatorOptions configure the emulated device: how many GPUs, which
// target and HIP release it models, its hazard checker, delays and fault
// injection, and the Go references that run user kernels (see
// driver.EmulatorOptions for each field).
type EmulatorOptions = driver.EmulatorOptions

// Options configure Open.
type Options struct {
	// Backend chooses what to drive (default Auto: real ROCm if it works,
	// else CUDA if it works, else the emulator).
	Backend Backend
	// Policy defaults to DeviceSide (the zero value).
	Policy Policy
	// Device is the GPU index (default 0).
	Device int
	// QueueSize is the HSA ring size in packets (default 1024): a power of
	// two within the GPU's queue sizes (64 to 131072 on ROCr's GPUs and the
	// emulator's, HSA_AGENT_INFO_QUEUE_MIN_SIZE and _MAX_SIZE); Open refuses
	// another with ErrInvalid.
	QueueSize uint32
	// MaxQueues bounds the HSA queues per device (default 8).
	MaxQueues int
	// MemoryCache is how many bytes of freed device memory each device
	// keeps for reuse (0: DefaultMemoryCache; negative: none).
	MemoryCache int64
	// Emulator configures the emulated device.
	Emulator EmulatorOptions
	// KernelBuilder builds and caches user kernels (Device.LoadKernel);
	// nil: one Builder with default options, shared by the process.
	KernelBuilder *userkernel.Builder
	// LogLevel is how much rocsync logs (default LogWarn: nothing while
	// all goes as expected). The environment variable ROCSYNC_LOG (off,
	// error, warn, info, debug) overrides it.
	LogLevel LogLevel
	// LogWriter receives the log lines, one per event, as text (default
	// os.Stderr).
	LogWriter io.Writer
	// LogHandler, if set, receives every log event as a log/slog record
	// instead (message, level, and the event's fields as attributes); its
	// Enabled method, asked once at Open, chooses the level, and LogLevel
	// and LogWriter are ignored.
	LogHandler slog.Handler
	// WaitTimeout bounds every host wait: past it the wait returns an
	// error of kind ErrTimeout naming the fence it waited for (the GPU
	// work goes on). 0 means DefaultWaitTimeout; negative, no bound (host
	// waits then use the runtime's blocking synchronize calls).
	WaitTimeout time.Duration
	// MaxInFlight caps the ops in flight on each of a task's queues and
	// streams (0: DefaultMaxInFlight; it cannot exceed QueueSize-1 on
	// an HSA queue). Past it, submitting waits on the host for the
	// oldest ops, counted as a throttle wait. Cross-queue waits never
	// deadlock with it: a timeline only ever waits for its own older
	// work, which depends on nothing submitted later.
	MaxInFlight int
	// MaxInFlightPerDevice caps the ops in flight on the whole device,
	// over all tasks (0: none beyond MaxInFlight per queue and stream; XLA
	// uses 32, MLX 10). The device checks it every MaxInFlightPerDevice/2
	// ops, and past it waits on the host for the older half of the
	// busiest timeline (a throttle wait). Like MaxInFlight it cannot
	// deadlock: the work waited for depends only on work already
	// submitted.
	MaxInFlightPerDevice int
	// LaunchBlocking makes every op wait on the host for its own
	// completion, so that a fault is reported by the op that caused it
	// (like CUDA_LAUNCH_BLOCKING). The environment variable
	// ROCSYNC_LAUNCH_BLOCKING=1 turns it on too. For debugging only: it
	// costs a round trip per op.
	LaunchBlocking bool
	// CheckReductionWorkspace makes every Sum read its zeroed workspace
	// back first (a host wait for the last reduction that used it) and
	// fail with ErrFault, wrapping kernels.ErrWorkspaceNotZero, if a byte
	// is not zero (nvFuser's checkZeroed). For debugging only.
	CheckReductionWorkspace bool
	// SyncDebug reports host waits that are neither a read-back nor an
	// explicit Synchronize (crossings the device could not wait for,
	// WaitAlways, throttle waits, waits to reclaim freed memory), naming the op,
	// the crossing and the reason: SyncDebugWarn logs each one,
	// SyncDebugFail refuses it, and the op fails with ErrHostWait.
	SyncDebug SyncDebugMode
	// Trace, if set, records a timeline trace of the device's work (every
	// op, host wait, device wait and sync decision, on one track per queue
	// or stream and host tracks, with flows from producers to consumers)
	// into it, written as Chrome/Perfetto trace-event JSON when the last
	// device recording into it closes, or at Trace.Flush: see Trace. The
	// environment variable ROCSYNC_TRACE=file traces every device of the
	// process into that file when Trace is nil. Off (nil), it costs a nil
	// check per op.
	Trace *Trace
	// TraceName names the device in the trace (default "gpu0 DeviceSide
	// (emulator)"); OpenAll appends each device's gpuN.
	TraceName string

	// test are the device's test switches (docs/testing.md).
	test testhooks.Device
}

// DefaultWaitTimeout is the bound on a host wait when Options.WaitTimeout is 0.
const DefaultWaitTimeout = 60 * time.Second

// DefaultMaxInFlight is the run-ahead cap when Options.MaxInFlight is 0.
const DefaultMaxInFlight = 1024

func (o Options) maxInFlight() int {
	if o.MaxInFlight == 0 {
		return DefaultMaxInFlight
	}
	return o.MaxInFlight
}

func (o Options) waitTimeout() time.Duration {
	switch {
	case o.WaitTimeout == 0:
		return DefaultWaitTimeout
	case o.WaitTimeout < 0:
		return 0
	}
	return o.WaitTimeout
}

// validate rejects options that would fail later, at first use.
func (o Options) validate() error {
	if o.Policy > DeviceBridge {
		return newErr("Open", ErrInvalid, "unknown policy %v", o.Policy)
	}
	if o.QueueSize != 0 && o.QueueSize&(o.QueueSize-1) != 0 {
		return newErr("Open", ErrInvalid, "QueueSize %d is not a power of two", o.QueueSize)
	}
	if o.QueueSize != 0 && o.QueueSize < 4 {
		return newErr("Open", ErrInvalid, "QueueSize %d is below the minimum of 4", o.QueueSize)
	}
	if o.SyncDebug > SyncDebugFail {
		return newErr("Open", ErrInvalid, "unknown SyncDebug mode %v", o.SyncDebug)
	}
	if o.MaxInFlight < 0 || o.MaxInFlightPerDevice < 0 {
		return newErr("Open", ErrInvalid, "negative MaxInFlight or MaxInFlightPerDevice")
	}
	if o.MaxQueues < 0 || o.Device < 0 || o.Emulator.Devices < 0 {
		return newErr("Open", ErrInvalid, "negative MaxQueues, Device or Emulator.Devices")
	}
	return nil
}

// SyncDebugMode says what to do about implicit host waits.
type SyncDebugMode uint8

const (
	// SyncDebugOff reports nothing (the default).
	SyncDebugOff SyncDebugMode = iota
	// SyncDebugWarn logs every implicit host wait at warn level.
	SyncDebugWarn
	// SyncDebugFail refuses every implicit host wait: the op fails with
	// an ErrHostWait error and is not submitted.
	SyncDebugFail
)

// String names the mode: "off", "warn" or "fail".
func (m SyncDebugMode) String() string {
	switch m {
	case SyncDebugOff:
		return "off"
	case SyncDebugWarn:
		return "warn"
	case SyncDebugFail:
		return "fail"
	}
	return fmt.Sprintf("SyncDebugMode(%d)", uint8(m))
}

// launchBlocking reports whether launch-blocking mode is on, by option
// or by ROCSYNC_LAUNCH_BLOCKING=1.
func (o Options) launchBlocking() bool {
	return o.LaunchBlocking || os.Getenv("ROCSYNC_LAUNCH_BLOCKING") == "1"
}

package rocsync

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/rocsync/rocsync/syncstate"
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

// ParsePolicy parses a policy name such as "DeviceSide".
func ParsePolicy(s string) (Policy, error) { return syncstate.ParsePolicy(s) }

// Backend chooses what Open drives.
type Backend uint8

const (
	// Auto uses the real ROCm stack when it is present and works, and the
	// emulator otherwise.
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

// EmulatorOptions configure the emulated device.
type EmulatorOptions struct {
	// Devices is the number of emulated GPUs (default 1).
	Devices int
	// ISA is the gfx target they report (default "gfx90a").
	ISA string
	// MemoryPerDevice bounds device memory in bytes (default 4 GiB).
	MemoryPerDevice uint64
	// HazardChecker reports every unordered conflicting access.
	HazardChecker bool
	// MaxDelay injects a random delay of up to this much before each op.
	MaxDelay time.Duration
	// Seed seeds the delays.
	Seed uint64
	// FaultInjector, if set, is asked before every kernel and library op
	// the emulated device runs (op is the kernel symbol, such as
	// "rocsync_mul_f32", or "rocblas_sgemm"/"rocblas_dgemm") and makes it
	// fault when it returns true: an HSA dispatch breaks its queue like a
	// memory fault, a HIP op breaks its stream. It is called from emulator
	// goroutines, possibly concurrently.
	FaultInjector func(op string) bool
}

// Options configure Open.
type Options struct {
	Backend Backend
	// Policy defaults to DeviceSide (the zero value).
	Policy Policy
	// Device is the GPU index (default 0).
	Device int
	// QueueSize is the HSA ring size in packets (default 1024).
	QueueSize uint32
	// MaxQueues bounds the HSA queues per device (default 8).
	MaxQueues int
	// MemoryCache is how many bytes of freed device memory each device
	// keeps for reuse (0: DefaultMemoryCache; negative: none).
	MemoryCache int64
	// Emulator configures the emulated device.
	Emulator EmulatorOptions
	// Logger receives rocsync's logs; nil logs info and above to stderr.
	Logger *zerolog.Logger

	// disableWaits skips every wait (checker self-test only).
	disableWaits bool
}

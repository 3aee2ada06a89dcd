package driver

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/rocsync/rocsync/userkernel"
)

// A Driver opens the devices of one backend: a family of runtimes (the
// ROCm stack, the CUDA driver) or a stand-in for one (the ROCm emulator).
// Drivers register under a name (Register) and the front package opens
// them by that name (Open), as database/sql opens a registered driver;
// the front package imports none of them.
type Driver interface {
	// Open opens every device of the backend. An error for a machine that
	// lacks the backend matches ErrNoDevice or ErrNotInstalled, so that
	// the front package can tell that from a backend that failed.
	Open(c OpenConfig) (*Family, error)
}

// OpenConfig is what the front package hands a driver's Open.
type OpenConfig struct {
	// Config returns device i's configuration; Open calls it once per
	// device, in order.
	Config func(i int) DeviceConfig
	// Log receives the driver's warnings (a library missing, a GPU left
	// out) and its debug lines. Never nil.
	Log *zerolog.Logger
	// Emulator configures an emulating driver; the others ignore it.
	Emulator EmulatorOptions
}

// Family is what one Open of a driver opened: its devices, and what they
// share.
type Family struct {
	Devices []Device
	// System is the emulated machine the devices run on, nil for real
	// hardware; the front package asks it for the instruments it
	// implements (HazardReporter, HostTracker). Two devices of one
	// driver are the same GPU when their indices and Systems are equal.
	System any
}

// EmulatorOptions configure an emulated system.
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
	// HIPVersion is the HIP release the emulator models, in
	// hipRuntimeGetVersion's encoding (major*10_000_000 + minor*100_000 +
	// patch: HIP 5.2.3 reports 50_221_153). 0 models a current ROCm 6.x.
	HIPVersion int
	// HIPVisibleDevices lists, in HIP's order, the emulated GPUs that HIP
	// presents, as HIP_VISIBLE_DEVICES does; nil presents them all, in
	// HSA's order.
	HIPVisibleDevices []int
	// Partitions, when above 1, makes each emulated GPU that many
	// partitions (KFD nodes at one PCI bus and device, differing in the
	// function, as an MI300X in CPX mode); Devices counts partitions.
	Partitions int
	// PeerAccess says which emulated GPUs can map which others' memory
	// (accessor's copies reading owner's memory); nil: every pair. A
	// pair that cannot makes Task.CopyPeer stage through host memory.
	PeerAccess func(accessor, owner int) bool
	// KernelGroupSegmentSize, when non-zero, makes every kernel report this
	// much static LDS, as kernels with __local arrays do.
	KernelGroupSegmentSize uint32
	// FaultInjector, if set, is asked before every kernel and library op
	// the emulated device runs (op is the kernel symbol, such as
	// "rocsync_mul_f32", or "rocblas_sgemm"/"rocblas_dgemm") and makes it
	// fault when it returns true: an HSA dispatch breaks its queue like a
	// memory fault, a HIP op breaks its stream. It is called from emulator
	// goroutines, possibly concurrently.
	FaultInjector func(op string) bool
	// KernelReferences runs user kernels: the emulator cannot execute GPU
	// code, so a user kernel it loads runs as the Go function registered
	// here under the kernel's name; a kernel without one faults its queue.
	KernelReferences *userkernel.References
}

// HazardReporter is a System with a hazard checker: what it found, every
// unordered conflicting access (nil with the checker off).
type HazardReporter interface {
	Hazards() []error
}

// HostTracker is a System whose hazard checker also watches host memory
// that copies read and write (pinned staging memory): TrackHost puts the
// memory at p, from HostMemory.HostAlloc, under watch (false if p is not
// such memory), and HostAccess
// reports an access of the host's own to size bytes at p (write or read),
// what naming it in a hazard's report.
type HostTracker interface {
	TrackHost(p unsafe.Pointer) bool
	HostAccess(p unsafe.Pointer, size uint64, write bool, what string)
}

// Error kinds that a driver's errors match (errors.Is) beside the
// runtime's own error, so that the front package tells failures apart
// without knowing the runtime. WithKind attaches one.
var (
	// ErrNoDevice: the backend's runtime is installed but finds no GPU.
	ErrNoDevice = errors.New("driver: no device")
	// ErrNotInstalled: the backend's runtime (its library) is missing.
	ErrNotInstalled = errors.New("driver: runtime not installed")
	// ErrOutOfMemory: an allocation failed for want of device memory.
	ErrOutOfMemory = errors.New("driver: out of device memory")
	// ErrInvalidConfig is matched by an Open error for a configuration
	// the runtime refuses (a queue size outside the agent's range): the
	// caller's mistake, not a missing runtime, so Auto does not fall back
	// to another backend.
	ErrInvalidConfig = errors.New("driver: configuration the runtime refuses")
	// ErrNotRegistered: Open names no registered driver.
	ErrNotRegistered = errors.New("driver: no driver registered")
)

// kindError is an error that also matches a kind; it reads as the error.
type kindError struct{ err, kind error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// WithKind returns err, matching kind as well under errors.Is; its text
// is err's. A nil err stays nil.
func WithKind(err, kind error) error {
	if err == nil {
		return nil
	}
	return &kindError{err: err, kind: kind}
}

var registry struct {
	mu      sync.RWMutex
	drivers map[string]Driver
}

// Register makes a driver available under name. Like sql.Register, it
// panics if d is nil or name is taken: both are programming errors of
// the package that registers.
func Register(name string, d Driver) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if d == nil {
		panic("driver: Register of a nil driver")
	}
	if _, dup := registry.drivers[name]; dup {
		panic("driver: Register called twice for driver " + name)
	}
	if registry.drivers == nil {
		registry.drivers = map[string]Driver{}
	}
	registry.drivers[name] = d
}

// Drivers returns the names of the registered drivers, sorted.
func Drivers() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	names := make([]string, 0, len(registry.drivers))
	for n := range registry.drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Open opens the driver registered under name; a name nobody registered
// is an error matching ErrNotRegistered.
func Open(name string, c OpenConfig) (*Family, error) {
	registry.mu.RLock()
	d, ok := registry.drivers[name]
	registry.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w under the name %q", ErrNotRegistered, name)
	}
	return d.Open(c)
}

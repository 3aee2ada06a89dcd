package userkernel

import (
	"errors"
	"fmt"
	"sync"
)

// Memory is device memory as a CPU model of a GPU (an emulator) sees it.
type Memory interface {
	// Bytes returns the size bytes at device address ptr; write says
	// whether the kernel will store into them (a hazard checker records
	// it).
	Bytes(ptr, size uint64, write bool) ([]byte, error)
}

// ReferenceFunc is a Go implementation of a kernel: it runs the whole
// launch g over args (as Kernel.Unpack reads them from the argument block)
// against mem.
type ReferenceFunc func(g Geometry, args []Arg, mem Memory) error

// ErrNoReference is matched (errors.Is) when no reference implementation
// is registered for a kernel.
var ErrNoReference = errors.New("userkernel: no reference implementation for the kernel")

// ErrReferencePanic is matched (errors.Is) when a kernel's reference
// panicked: Run turns the panic into the launch's error, as a GPU turns a
// faulting kernel into a failed launch, so the process lives on.
var ErrReferencePanic = errors.New("userkernel: the kernel's reference panicked")

// References maps kernel names to Go reference implementations. The
// emulator cannot execute GPU code: it runs rocsync's own kernels by name
// from Go references (package kernels), and it can run a user kernel the
// same way once a test registers the kernel's reference here. The zero
// value is ready to use; it is safe for concurrent use.
type References struct {
	mu sync.RWMutex
	m  map[string]ReferenceFunc
}

// Register sets the reference implementation of the kernel called name.
// Registering a name twice is an error.
func (r *References) Register(name string, f ReferenceFunc) error {
	if f == nil {
		return errors.New("userkernel: nil ReferenceFunc")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[name]; dup {
		return fmt.Errorf("userkernel: a reference for %s is already registered", name)
	}
	if r.m == nil {
		r.m = map[string]ReferenceFunc{}
	}
	r.m[name] = f
	return nil
}

// Run executes k's reference over the argument block of one dispatch of
// geometry g (as the dispatch packet gives it). The reference gets the
// geometry as the kernel reads it (Kernel.ObservedGeometry); hidden
// arguments that do not describe the dispatch are an error matching
// ErrHiddenArgs, and the reference does not run. Its error names the
// kernel and wraps the cause: ErrNoReference, ErrHiddenArgs, the
// reference's own error, or ErrReferencePanic with the panic's value.
func (r *References) Run(k *Signature, g Geometry, block []byte, mem Memory) (err error) {
	r.mu.RLock()
	f, ok := r.m[k.Name]
	r.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoReference, k.Name)
	}
	// The reference sees the geometry the kernel reads: from the hidden
	// arguments where its metadata lists them.
	g, err = k.ObservedGeometry(g, block)
	if err != nil {
		return fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	args, err := k.Unpack(make([]Arg, 0, len(k.Params)), block)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("kernel %s: %w: %v", k.Name, ErrReferencePanic, p)
		}
	}()
	if err := f(g, args, mem); err != nil {
		return fmt.Errorf("kernel %s: reference failed: %w", k.Name, err)
	}
	return nil
}

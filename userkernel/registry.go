package userkernel

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rocsync/rocsync/kernels"
)

// ErrImageRefused is what a Loader's LoadImage error matches (errors.Is)
// when the runtime refuses an image as code it cannot load (ROCr's
// HSA_STATUS_ERROR_INVALID_CODE_OBJECT, HIP's
// hipErrorSharedObjectInitFailed or hipErrorInvalidImage): the Registry
// then builds the next code-object version the device takes, as rocsync
// does for its own kernels.
var ErrImageRefused = errors.New("userkernel: the runtime refused the image")

// Loader puts images into one device's runtime. A driver implements it:
// on ROCm with hsa_executable_load_agent_code_object and the kernel
// descriptor's kernel object (or hipModuleLoadData and
// hipModuleGetFunction), on CUDA with cuModuleLoadData and
// cuModuleGetFunction.
type Loader interface {
	// Device says what the device runs.
	Device() Device
	// LoadImage loads an image and returns a handle to the loaded module.
	LoadImage(img *Image) (module uint64, err error)
	// Function finds a kernel in a loaded module and returns the handle
	// a dispatch takes: an AQL kernel object, a hipFunction_t, a
	// CUfunction.
	Function(module uint64, k *Signature) (uint64, error)
}

// LoadedKernel is a kernel ready to dispatch on one device: its signature
// (for Pack) and the handle the device's dispatch takes.
type LoadedKernel struct {
	*Signature
	Handle uint64
}

// Registry loads each Source's image once per device and finds kernels in
// it. Make one per device. It is safe for concurrent use.
type Registry struct {
	builder *Builder
	loader  Loader

	mu      sync.Mutex
	modules map[[32]byte]*loadedModule // by Source ID
}

type loadedModule struct {
	mu      sync.Mutex // held while loading; a failed load is retried by the next call
	img     *Image
	module  uint64
	kernels sync.Map // name -> *LoadedKernel
}

// NewRegistry returns a Registry loading through l, building with b.
func NewRegistry(b *Builder, l Loader) *Registry {
	return &Registry{builder: b, loader: l, modules: map[[32]byte]*loadedModule{}}
}

// Kernel returns the named kernel of src loaded on the Registry's device,
// building and loading src's image the first time only. A kernel found
// before costs two map lookups and allocates nothing.
func (r *Registry) Kernel(src *Source, name string) (*LoadedKernel, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source", ErrSource)
	}
	r.mu.Lock()
	m, ok := r.modules[src.id]
	if !ok {
		m = &loadedModule{}
		r.modules[src.id] = m
	}
	r.mu.Unlock()
	if lk, ok := m.kernels.Load(name); ok {
		return lk.(*LoadedKernel), nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.img == nil {
		img, module, err := r.load(src)
		if err != nil {
			return nil, err
		}
		m.img, m.module = img, module
	}
	if lk, ok := m.kernels.Load(name); ok {
		return lk.(*LoadedKernel), nil
	}
	k, err := m.img.Kernel(name)
	if err != nil {
		return nil, err
	}
	h, err := r.loader.Function(m.module, k)
	if err != nil {
		return nil, fmt.Errorf("userkernel: kernel %s: %w", name, err)
	}
	lk := &LoadedKernel{Signature: k, Handle: h}
	m.kernels.Store(name, lk)
	return lk, nil
}

// load builds and loads src, trying older code-object versions while the
// runtime refuses the newer ones.
func (r *Registry) load(src *Source) (*Image, uint64, error) {
	dev := r.loader.Device()
	refused := map[kernels.CodeObjectVersion]bool{}
	accepts := dev.Accepts
	var errs []error
	for {
		try := Device{ISA: dev.ISA, Emulated: dev.Emulated, Accepts: func(v kernels.CodeObjectVersion) bool {
			return !refused[v] && (accepts == nil || accepts(v))
		}}
		img, err := r.builder.Build(src, try)
		if err != nil {
			return nil, 0, errors.Join(append(errs, err)...)
		}
		module, err := r.loader.LoadImage(img)
		if err == nil {
			return img, module, nil
		}
		errs = append(errs, fmt.Errorf("loading the image for %s: %w", img.Target, err))
		if img.Target.Family != AMD || !errors.Is(err, ErrImageRefused) {
			return nil, 0, errors.Join(errs...)
		}
		refused[img.Target.CodeObject] = true
	}
}

package rocmdev

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
	"github.com/rocsync/rocsync/userkernel"
)

// userModule is one user code object loaded on the device: an HSA
// executable for the agent (its reader lives as long, as ROCr keeps the
// reader's memory as the code object's storage) and, under Unified, the
// same image as a HIP module.
type userModule struct {
	reader hsa.CodeObjectReader
	exe    hsa.Executable
	module hip.Module
	code   []byte // the reader's memory, kept unchanged until unload
}

// AcceptsCodeObject implements driver.KernelLoader: a user image must load
// in ROCr, and in HIP too under Unified.
func (d *Device) AcceptsCodeObject(v kernels.CodeObjectVersion) bool {
	if !kernels.ROCrAccepts(d.rocrVersion(), v) {
		return false
	}
	if d.cfg.Policy == syncstate.Unified {
		version := 0
		if r, ok := d.rt.HIP.(hipVersionReporter); ok {
			if hv, err := r.RuntimeVersion(); err == nil && hv > 0 {
				version = hv
			}
		}
		return kernels.HIPAccepts(version, v)
	}
	return true
}

// LoadModule implements driver.KernelLoader. A refusal of the image as
// code the runtime cannot load matches userkernel.ErrImageRefused, so the
// registry can try another code-object version.
func (d *Device) LoadModule(image []byte) (uint64, error) {
	if err := d.Fault(); err != nil {
		return 0, err
	}
	rt := d.rt.HSA
	m := &userModule{code: append([]byte(nil), image...)}
	var err error
	if m.reader, err = rt.CodeObjectReaderCreateFromMemory(m.code); err != nil {
		return 0, refusedImage(err)
	}
	if m.exe, err = rt.ExecutableCreateAlt(hsa.ProfileFull, hsa.FloatRoundingDefault); err != nil {
		_ = rt.CodeObjectReaderDestroy(m.reader)
		return 0, err
	}
	if err = rt.ExecutableLoadAgentCodeObject(m.exe, d.agent, m.reader); err == nil {
		err = rt.ExecutableFreeze(m.exe)
	}
	if err == nil && d.cfg.Policy == syncstate.Unified {
		m.module, err = d.rt.HIP.ModuleLoadData(d.hipIndex, m.code)
	}
	if err != nil {
		_ = d.unloadUser(m)
		return 0, refusedImage(err)
	}
	d.userMu.Lock()
	d.userModules = append(d.userModules, m)
	h := uint64(len(d.userModules))
	d.userMu.Unlock()
	return h, nil
}

func refusedImage(err error) error {
	if errors.Is(err, &hsa.Error{Status: hsa.StatusErrorInvalidCodeObject}) ||
		errors.Is(err, &hsa.Error{Status: hsa.StatusErrorInvalidISA}) ||
		errors.Is(err, &hip.Error{Code: hip.ErrorSharedObjectInitFailed}) ||
		errors.Is(err, &hip.Error{Code: hip.ErrorInvalidImage}) {
		return fmt.Errorf("%w: %w", userkernel.ErrImageRefused, err)
	}
	return err
}

// Kernel implements driver.KernelLoader: the kernel's descriptor symbol
// ("name.kd") in the module's executable, and its HIP function under
// Unified. A kernarg segment larger than the queue's slot, or smaller than
// the metadata's argument block, is refused here.
func (d *Device) Kernel(module uint64, name string, argsSize uint32, _ []int) (*driver.LoadedKernel, error) {
	d.userMu.Lock()
	var m *userModule
	if module >= 1 && module <= uint64(len(d.userModules)) {
		m = d.userModules[module-1]
	}
	d.userMu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("rocmdev: no user module %d", module)
	}
	symbol := name
	if !strings.HasSuffix(symbol, ".kd") {
		symbol += ".kd"
	}
	sym, err := d.rt.HSA.ExecutableSymbolByName(m.exe, symbol, d.agent)
	if err != nil {
		return nil, err
	}
	k := &driver.LoadedKernel{Name: strings.TrimSuffix(name, ".kd")}
	if err := d.fillKernel(k, sym, symbol); err != nil {
		return nil, err
	}
	if k.ArgsSize < argsSize {
		return nil, fmt.Errorf("rocmdev: kernel %s: ROCr reports a %d-byte kernarg segment, its metadata %d", k.Name, k.ArgsSize, argsSize)
	}
	if m.module != 0 {
		f, err := d.rt.HIP.ModuleGetFunction(m.module, k.Name)
		if err != nil {
			return nil, err
		}
		k.Function = uint64(f)
	}
	return k, nil
}

// unloadUser releases one user module.
func (d *Device) unloadUser(m *userModule) error {
	var errs []error
	if m.exe != 0 {
		errs = append(errs, d.rt.HSA.ExecutableDestroy(m.exe))
	}
	if m.reader != 0 {
		errs = append(errs, d.rt.HSA.CodeObjectReaderDestroy(m.reader))
	}
	if m.module != 0 {
		errs = append(errs, d.rt.HIP.ModuleUnload(m.module))
	}
	*m = userModule{}
	return errors.Join(errs...)
}

// unloadUserModules releases every user module, at Close.
func (d *Device) unloadUserModules() error {
	d.userMu.Lock()
	mods := d.userModules
	d.userModules = nil
	d.userMu.Unlock()
	var errs []error
	for _, m := range mods {
		errs = append(errs, d.unloadUser(m))
	}
	return errors.Join(errs...)
}

// HostAlloc implements driver.HostMemory with hipHostMalloc: pinned memory
// both HIP's copies and the GPU can reach.
func (d *Device) HostAlloc(size uint64) (unsafe.Pointer, error) { return d.rt.HIP.HostMalloc(size) }

// HostFree implements driver.HostMemory.
func (d *Device) HostFree(p unsafe.Pointer) error { return d.rt.HIP.HostFree(p) }

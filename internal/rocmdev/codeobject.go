package rocmdev

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
)

// The runtimes' release decides which code-object version each one loads:
// HIP 5.0-5.2 cannot load v5 and ROCr 5.0-5.1 refuses it, so the HSA
// executable and the HIP module may be built from different versions of
// the same kernels. The versions are learnt through these optional
// methods (hsa.Lib, hip.Lib and the emulator have them); a runtime without
// them is taken to be a current one, and a refusal still falls back.

// hipVersionReporter is hipRuntimeGetVersion.
type hipVersionReporter interface{ RuntimeVersion() (int, error) }

// rocrVersionReporter is hsa_system_get_info(HSA_AMD_SYSTEM_INFO_BUILD_VERSION).
type rocrVersionReporter interface{ BuildVersion() (string, error) }

// rocrVersion is ROCr's library version (zero when it cannot be learnt,
// which the kernels package takes as a current release).
func (d *Device) rocrVersion() kernels.ROCrVersion {
	var rocr kernels.ROCrVersion
	if r, ok := d.rt.HSA.(rocrVersionReporter); ok {
		if build, err := r.BuildVersion(); err == nil {
			rocr, _ = kernels.ParseROCrBuildVersion(build) // unparsable: unknown
		}
	}
	return rocr
}

// hsaCodeObjectVersion picks the version ROCr's loader takes first.
func (d *Device) hsaCodeObjectVersion() (kernels.CodeObjectVersion, error) {
	rocr := d.rocrVersion()
	s, err := kernels.PickCodeObject(d.isa, func(v kernels.CodeObjectVersion) bool { return kernels.ROCrAccepts(rocr, v) }, rocr)
	return s.Version, err
}

// hipCodeObjectVersion picks the version hipModuleLoadData takes first.
// HIP loads the module through ROCr's loader, so ROCr's rule for generic
// objects applies too.
func (d *Device) hipCodeObjectVersion() (kernels.CodeObjectVersion, error) {
	version := 0
	if r, ok := d.rt.HIP.(hipVersionReporter); ok {
		if v, err := r.RuntimeVersion(); err == nil && v > 0 {
			version = v
		}
	}
	s, err := kernels.PickCodeObject(d.isa, func(v kernels.CodeObjectVersion) bool { return kernels.HIPAccepts(version, v) }, d.rocrVersion())
	return s.Version, err
}

// loadEither loads the code object of version first with load and, when
// the runtime refuses it as a code object (refused), every other version
// built for the GPU, newest first. It returns the version that loaded.
func (d *Device) loadEither(first kernels.CodeObjectVersion, load func([]byte) error, refused func(error) bool) (kernels.CodeObjectVersion, error) {
	versions, err := kernels.CodeObjectVersions(d.isa)
	if err != nil {
		return 0, err
	}
	order := []kernels.CodeObjectVersion{first}
	for i := len(versions) - 1; i >= 0; i-- {
		if versions[i] != first {
			order = append(order, versions[i])
		}
	}
	var errs []error
	for _, v := range order {
		code, err := kernels.CodeObjectFor(d.isa, v)
		if err != nil {
			return 0, err
		}
		err = load(code)
		if err == nil {
			return v, nil
		}
		errs = append(errs, fmt.Errorf("code object %s: %w", v, err))
		if !refused(err) {
			break
		}
	}
	return 0, errors.Join(errs...)
}

// loadHSAExecutable loads and freezes the kernels for the GPU's agent.
func (d *Device) loadHSAExecutable() (kernels.CodeObjectVersion, error) {
	rt := d.rt.HSA
	first, err := d.hsaCodeObjectVersion()
	if err != nil {
		return 0, err
	}
	return d.loadEither(first, func(code []byte) error {
		reader, err := rt.CodeObjectReaderCreateFromMemory(code)
		if err != nil {
			return err
		}
		e, err := rt.ExecutableCreateAlt(hsa.ProfileFull, hsa.FloatRoundingDefault)
		if err != nil {
			_ = rt.CodeObjectReaderDestroy(reader)
			return err
		}
		fail := func(err error) error {
			_ = rt.ExecutableDestroy(e)
			_ = rt.CodeObjectReaderDestroy(reader)
			return err
		}
		if err := rt.ExecutableLoadAgentCodeObject(e, d.agent, reader); err != nil {
			return fail(err)
		}
		if err := rt.ExecutableFreeze(e); err != nil {
			return fail(err)
		}
		// ROCr keeps the reader's memory as the loaded code object's
		// storage: the reader lives until the executable is destroyed.
		d.exe, d.reader = e, reader
		return nil
	}, func(err error) bool {
		return errors.Is(err, &hsa.Error{Status: hsa.StatusErrorInvalidCodeObject})
	})
}

// loadHIPModule loads the kernels into HIP, for Unified.
func (d *Device) loadHIPModule() (hip.Module, kernels.CodeObjectVersion, error) {
	first, err := d.hipCodeObjectVersion()
	if err != nil {
		return 0, 0, err
	}
	var module hip.Module
	v, err := d.loadEither(first, func(code []byte) error {
		m, err := d.rt.HIP.ModuleLoadData(d.hipIndex, code)
		module = m
		return err
	}, func(err error) bool {
		// HIP 5.2.3 says hipErrorSharedObjectInitFailed for a version its
		// comgr cannot read; an unreadable image is hipErrorInvalidImage.
		return errors.Is(err, &hip.Error{Code: hip.ErrorSharedObjectInitFailed}) ||
			errors.Is(err, &hip.Error{Code: hip.ErrorInvalidImage})
	})
	return module, v, err
}

// CodeObjectVersions returns the code-object versions the kernels were
// loaded from: into the HSA executable, and into HIP (0 unless the policy
// is Unified). It loads the kernels if no launch has; both are 0 if
// loading failed.
func (d *Device) CodeObjectVersions() (hsaVersion, hipVersion kernels.CodeObjectVersion) {
	if d.loadKernels() != nil {
		return 0, 0
	}
	return d.codeObjects.hsa, d.codeObjects.hip
}

// logCodeObject says at debug level which embedded code object a runtime
// ("hsa" or "hip") loaded the kernels from: the GPU's own processor, or
// its family's generic one (a GPU without an object of its own, on ROCm
// 6.2 or later).
func (d *Device) logCodeObject(runtime string, v kernels.CodeObjectVersion) {
	if d.rt.Log == nil {
		return
	}
	target := kernels.CodeObjectTarget(d.isa)
	d.rt.Log.Debug().Int("gpu", d.index).Str("isa", d.isa).Str("runtime", runtime).
		Str("code_object", target).Str("version", v.String()).Bool("generic", target != "" && kernels.GenericTarget(target) == target).
		Msg("rocsync kernels: code object chosen")
}

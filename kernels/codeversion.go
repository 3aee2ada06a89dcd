package kernels

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// CodeObjectVersion is an AMDGPU code-object version (AMDHSA ABI), as given
// to clang's -mcode-object-version. The runtimes differ in which versions
// they load (see HIPAccepts, ROCrAccepts and docs/codeobjects.md), so the
// kernels are built in more than one.
type CodeObjectVersion uint8

const (
	CodeObjectV4 CodeObjectVersion = 4
	CodeObjectV5 CodeObjectVersion = 5
	// CodeObjectV6 is built for the generic targets only (GenericTargets),
	// which need it.
	CodeObjectV6 CodeObjectVersion = 6

	// DefaultCodeObjectVersion is the version built for every target and
	// returned by CodeObject.
	DefaultCodeObjectVersion = CodeObjectV5
)

// String returns "v4", "v5", ...
func (v CodeObjectVersion) String() string { return "v" + strconv.Itoa(int(v)) }

// ABIVersion returns the ELF header's EI_ABIVERSION byte for the version
// under ELFOSABI_AMDGPU_HSA: v4 is 2, v5 is 3, v6 is 4 (v3 was 1).
func (v CodeObjectVersion) ABIVersion() uint8 { return uint8(v) - 2 }

func codeObjectDir(v CodeObjectVersion) string { return path.Join("co", v.String()) }

// ErrUnsupportedCodeObjectVersion is matched (errors.Is) by every
// *UnsupportedCodeObjectVersionError.
var ErrUnsupportedCodeObjectVersion = errors.New("kernels: code-object version not built")

// UnsupportedCodeObjectVersionError reports a target that has kernels, but
// none in the requested code-object version.
type UnsupportedCodeObjectVersionError struct {
	ISA       string              // the name as given
	Version   CodeObjectVersion   // the version asked for
	Available []CodeObjectVersion // the versions built for the target, ascending
}

func (e *UnsupportedCodeObjectVersionError) Error() string {
	avail := make([]string, len(e.Available))
	for i, v := range e.Available {
		avail[i] = v.String()
	}
	return "kernels: no code object " + e.Version.String() + " built for " + normalizeISA(e.ISA) +
		"; built: " + strings.Join(avail, ", ")
}

// Is makes errors.Is(err, ErrUnsupportedCodeObjectVersion) true.
func (e *UnsupportedCodeObjectVersionError) Is(target error) bool {
	return target == ErrUnsupportedCodeObjectVersion
}

// CodeObjectVersions returns the code-object versions built for an AMD
// processor (isa is normalized as in CodeObject), ascending: [v5] or
// [v4 v5] for a processor with code objects of its own; [v6] for one that
// has none but belongs to a generic family with an embedded generic object
// (CodeObjectTarget names it), and for the generic processor itself. An
// unknown target gives an *UnsupportedTargetError.
func CodeObjectVersions(isa string) ([]CodeObjectVersion, error) {
	gfx := normalizeISA(isa)
	if !hasExact(gfx) {
		if builtGeneric(gfx) != "" {
			return []CodeObjectVersion{CodeObjectV6}, nil
		}
		return nil, &UnsupportedTargetError{ISA: isa, Supported: Targets()}
	}
	if _, found := slices.BinarySearch(v4Targets, gfx); found {
		return []CodeObjectVersion{CodeObjectV4, CodeObjectV5}, nil
	}
	return []CodeObjectVersion{CodeObjectV5}, nil
}

// CodeObjectFor returns the code object of version v for an AMD processor,
// as a fresh copy: the processor's own, or (v6) its family's generic one.
// isa is normalized as in CodeObject. An unknown target gives an
// *UnsupportedTargetError, a version not built for it an
// *UnsupportedCodeObjectVersionError.
func CodeObjectFor(isa string, v CodeObjectVersion) ([]byte, error) {
	versions, err := CodeObjectVersions(isa)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(versions, v) {
		return nil, &UnsupportedCodeObjectVersionError{ISA: isa, Version: v, Available: versions}
	}
	return builtFiles.ReadFile(path.Join(codeObjectDir(v), CodeObjectTarget(isa)+".hsaco"))
}

// ReadCodeObjectVersion reads the code-object version from an AMDGPU ELF
// header (EI_OSABI must be ELFOSABI_AMDGPU_HSA; EI_ABIVERSION gives the
// version), which is what the loaders go by. It looks at the header only.
func ReadCodeObjectVersion(code []byte) (CodeObjectVersion, error) {
	const (
		eiOSABI        = 7
		eiABIVersion   = 8
		emMachine      = 18
		osABIAMDGPUHSA = 64
		emAMDGPU       = 224
	)
	if len(code) < 20 || string(code[:4]) != "\x7fELF" {
		return 0, errors.New("kernels: code object is not an ELF file")
	}
	if m := uint16(code[emMachine]) | uint16(code[emMachine+1])<<8; m != emAMDGPU {
		return 0, fmt.Errorf("kernels: code object is for machine %d, not EM_AMDGPU", m)
	}
	if code[eiOSABI] != osABIAMDGPUHSA {
		return 0, fmt.Errorf("kernels: code object OS ABI is %d, not AMDGPU_HSA", code[eiOSABI])
	}
	abi := code[eiABIVersion]
	if abi > CodeObjectV6.ABIVersion() {
		return 0, fmt.Errorf("kernels: code object ABI version %d is unknown", abi)
	}
	// v2 had ABI version 0 and a note for its version; it is not v2+abi.
	if abi == 0 {
		return 0, errors.New("kernels: code object v2 (ABI version 0) is not supported")
	}
	return CodeObjectVersion(abi + 2), nil
}

// HIPAccepts reports whether hipModuleLoadData of the HIP release with
// hipRuntimeGetVersion value hipVersion (major*10_000_000 + minor*100_000 +
// patch; 0 for unknown, taken as a current release) loads code objects of
// version v. HIP asks comgr for the ISA name of the ELF, and comgr of ROCm
// 5.0-5.2 names only ABI versions v3 and v4: HIP 5.2.3 fails v5 with
// hipErrorSharedObjectInitFailed (303). comgr from 5.3 names v5; the
// current comgr names v4-v6. The sources are in docs/codeobjects.md.
func HIPAccepts(hipVersion int, v CodeObjectVersion) bool {
	switch {
	case v == CodeObjectV4:
		return true
	case v == CodeObjectV5:
		return hipVersion == 0 || hipVersion >= 50_300_000
	case v == CodeObjectV6:
		// comgr's v6 support is not pinned to a tagged release in the
		// sources read; assume the release that brought v6 to ROCr.
		return hipVersion == 0 || hipVersion >= 60_200_000
	}
	return false
}

// ROCrVersion is the version of the ROCr library (libhsa-runtime64), as
// reported by hsa_system_get_info(HSA_AMD_SYSTEM_INFO_BUILD_VERSION), e.g.
// 1.5 for ROCm 5.0-5.2, 1.14 for ROCm 6.2. It is not the ROCm release.
// The zero value means unknown.
type ROCrVersion struct{ Major, Minor int }

// Known reports whether the version was learnt.
func (r ROCrVersion) Known() bool { return r != ROCrVersion{} }

// AtLeast reports whether r is major.minor or later.
func (r ROCrVersion) AtLeast(major, minor int) bool {
	return r.Major > major || (r.Major == major && r.Minor >= minor)
}

func (r ROCrVersion) String() string {
	return strconv.Itoa(r.Major) + "." + strconv.Itoa(r.Minor)
}

// ParseROCrBuildVersion reads the library version from ROCr's build
// identifier, "<major>.<minor>.<commits>-<job>-<hash>": only major and minor
// are used. ROCr stringifies a macro that already holds quotes, so the
// string may come quoted: Debian's ROCr 5.2.3 says
// "\"1.5.0-local-build-unknown\"".
func ParseROCrBuildVersion(build string) (ROCrVersion, error) {
	fields := strings.SplitN(strings.Trim(strings.TrimSpace(build), `"`), ".", 3)
	if len(fields) < 2 {
		return ROCrVersion{}, fmt.Errorf("kernels: ROCr build version %q is not of the form <major>.<minor>[.<rest>]", build)
	}
	minor := fields[1]
	if i := strings.IndexFunc(minor, func(c rune) bool { return c < '0' || c > '9' }); i >= 0 {
		minor = minor[:i]
	}
	ma, err1 := strconv.Atoi(fields[0])
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || ma < 0 || mi < 0 || (ma == 0 && mi == 0) {
		return ROCrVersion{}, fmt.Errorf("kernels: ROCr build version %q is not of the form <major>.<minor>[.<rest>]", build)
	}
	return ROCrVersion{Major: ma, Minor: mi}, nil
}

// ROCrAccepts reports whether the ROCr loader of library version r
// (hsa_executable_load_agent_code_object) loads code objects of version v.
// The loader takes v4 in every release from ROCm 5.0, v5 from ROCm 5.2
// and v6 from 6.2.
// The library version is 1.5 for ROCm 5.0, 5.1 and 5.2 alike, so v5 counts
// as accepted only from 1.7 (ROCm 5.3); an unknown version is taken as a
// current release.
func ROCrAccepts(r ROCrVersion, v CodeObjectVersion) bool {
	known := r.Known()
	switch v {
	case CodeObjectV4:
		return true
	case CodeObjectV5:
		return !known || r.AtLeast(1, 7)
	case CodeObjectV6:
		return !known || r.AtLeast(1, 14)
	}
	return false
}

// ErrNoAcceptedCodeObject is matched (errors.Is) by the error
// PickCodeObjectVersion returns when no built version is accepted.
var ErrNoAcceptedCodeObject = errors.New("kernels: no built code-object version is accepted by the runtime")

// ROCrLoadsGeneric reports whether the ROCr loader of library version r
// loads a generic processor's code object (gfx11-generic and the like) on
// a member of its family. The loader takes code object v6 from 1.14 (ROCm
// 6.2), but a generic object also needs the processor in ROCr's ISA
// registry: IsaFromName must know "amdgcn-amd-amdhsa--gfx11-generic" and
// Isa::IsCompatible must map the agent to it. ROCR-Runtime's
// core/runtime/isa.cpp has neither at rocm-6.2.0 through rocm-6.2.4 nor at
// the repository's October 2024 head (library version still 1.14, which
// ROCm 6.3 reports too), so such a load fails with "code object's ISA ...
// is invalid"; the registry's generic column and
// IsaRegistry::GetSupportedGenericVersions come later (ROCR-Runtime
// runtime/hsa-runtime, then ROCm/rocm-systems). The first library version
// taken here is 1.15 (ROCm 6.4), the first one that 6.3 does not share; an
// unknown version is taken as a current release.
func ROCrLoadsGeneric(r ROCrVersion) bool {
	return !r.Known() || r.AtLeast(1, 15)
}

// PickCodeObjectVersion returns the newest code-object version built for
// isa that accepts reports as loadable (e.g. a closure over HIPAccepts or
// ROCrAccepts with the runtime's version), for a current ROCr (as
// PickCodeObject with an unknown ROCr version). An unknown target gives an
// *UnsupportedTargetError; no accepted version an error matching
// ErrNoAcceptedCodeObject (and, for a processor that only a generic v6
// object covers, ErrUnsupportedTarget too).
func PickCodeObjectVersion(isa string, accepts func(CodeObjectVersion) bool) (CodeObjectVersion, error) {
	s, err := PickCodeObject(isa, accepts, ROCrVersion{})
	return s.Version, err
}

// Selection is the embedded code object chosen for a GPU.
type Selection struct {
	// Target is the processor the code object was built for: the GPU's
	// own ("gfx1100") or its family's generic one ("gfx11-generic").
	Target  string
	Version CodeObjectVersion
}

// Generic reports whether the selection is a generic processor's object.
func (s Selection) Generic() bool { return strings.HasSuffix(s.Target, "-generic") }

func (s Selection) String() string { return s.Target + " " + s.Version.String() }

// PickCodeObject chooses the code object for isa that a runtime loads:
// the newest version built for the processor itself that accepts admits,
// or, when the processor has none of its own, its family's generic v6
// object, if accepts admits v6 and the ROCr of library version rocr loads
// generic objects (ROCrLoadsGeneric; HIP loads a code object through the
// same loader). A generic object is never chosen for a processor that has
// its own (every runtime that loads v6 loads v5), nor for one outside the
// generic's family (gfx908 and gfx90a belong to none). Errors as
// PickCodeObjectVersion; a refused generic object is an
// *UnsupportedTargetError naming it.
func PickCodeObject(isa string, accepts func(CodeObjectVersion) bool, rocr ROCrVersion) (Selection, error) {
	versions, err := CodeObjectVersions(isa)
	if err != nil {
		return Selection{}, err
	}
	target := CodeObjectTarget(isa)
	generic := strings.HasSuffix(target, "-generic")
	for i := len(versions) - 1; i >= 0; i-- {
		if accepts(versions[i]) && (!generic || ROCrLoadsGeneric(rocr)) {
			return Selection{Target: target, Version: versions[i]}, nil
		}
	}
	if generic && target != normalizeISA(isa) {
		return Selection{}, &UnsupportedTargetError{ISA: isa, Supported: Targets(), Generic: target}
	}
	return Selection{}, fmt.Errorf("%w: %s has %v", ErrNoAcceptedCodeObject, normalizeISA(isa), versions)
}

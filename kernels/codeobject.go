package kernels

import (
	"embed"
	"errors"
	"path"
	"slices"
	"strings"
)

// The committed build outputs; build.sh writes them and check_fresh.sh
// checks that they still match src/elementwise.cl.
//
//go:embed co/v4/*.hsaco co/v5/*.hsaco co/v6/*.hsaco ptx/*.ptx
var builtFiles embed.FS

var (
	amdTargets     = listTargets(codeObjectDir(DefaultCodeObjectVersion), ".hsaco")
	v4Targets      = listTargets(codeObjectDir(CodeObjectV4), ".hsaco")
	genericTargets = listTargets(codeObjectDir(CodeObjectV6), ".hsaco")
	ptxTargets     = listTargets("ptx", ".ptx")
)

// genericOf maps each processor to the generic processor of its family,
// whose code objects it runs: the last column of ROCr's ISA registry
// (ISAREG_ENTRY_GEN in ROCr's core/runtime/isa.cpp once it knows generic
// processors, see ROCrLoadsGeneric; Isa::IsCompatible loads a generic code
// object on an agent whose registry entry names that generic). LLVM's AMDGPUUsage ("Generic
// Processors") lists the same families; gfx908 and gfx90a belong to none.
var genericOf = map[string]string{
	"gfx900": "gfx9-generic", "gfx902": "gfx9-generic", "gfx904": "gfx9-generic",
	"gfx906": "gfx9-generic", "gfx909": "gfx9-generic", "gfx90c": "gfx9-generic",
	"gfx942": "gfx9-4-generic", "gfx950": "gfx9-4-generic",
	"gfx1010": "gfx10-1-generic", "gfx1011": "gfx10-1-generic", "gfx1012": "gfx10-1-generic",
	"gfx1013": "gfx10-1-generic",
	"gfx1030": "gfx10-3-generic", "gfx1031": "gfx10-3-generic", "gfx1032": "gfx10-3-generic",
	"gfx1033": "gfx10-3-generic", "gfx1034": "gfx10-3-generic", "gfx1035": "gfx10-3-generic",
	"gfx1036": "gfx10-3-generic",
	"gfx1100": "gfx11-generic", "gfx1101": "gfx11-generic", "gfx1102": "gfx11-generic",
	"gfx1103": "gfx11-generic", "gfx1150": "gfx11-generic", "gfx1151": "gfx11-generic",
	"gfx1152": "gfx11-generic", "gfx1153": "gfx11-generic",
	"gfx1200": "gfx12-generic", "gfx1201": "gfx12-generic",
}

// GenericTarget returns the generic processor whose code objects run on
// isa (normalized as in CodeObject), e.g. "gfx11-generic" for gfx1102, or
// "" when isa belongs to no generic family. A generic name is its own.
func GenericTarget(isa string) string {
	gfx := normalizeISA(isa)
	if strings.HasSuffix(gfx, "-generic") {
		return gfx
	}
	return genericOf[gfx]
}

// GenericTargets returns the generic processors that have embedded code
// objects (code object v6; ROCrLoadsGeneric says which ROCr loads them),
// sorted.
func GenericTargets() []string { return slices.Clone(genericTargets) }

// hasExact reports whether gfx has a code object of its own.
func hasExact(gfx string) bool {
	_, found := slices.BinarySearch(amdTargets, gfx)
	return found
}

// builtGeneric returns the embedded generic code object's target that
// runs on gfx when gfx has none of its own, or "".
func builtGeneric(gfx string) string {
	if hasExact(gfx) {
		return ""
	}
	g := GenericTarget(gfx)
	if _, found := slices.BinarySearch(genericTargets, g); !found {
		return ""
	}
	return g
}

// CodeObjectTarget returns the processor the code object CodeObjectFor
// serves for isa was built for: isa's own processor when it has code
// objects, else its family's generic processor ("gfx11-generic" for
// gfx1102), else "".
func CodeObjectTarget(isa string) string {
	gfx := normalizeISA(isa)
	if hasExact(gfx) {
		return gfx
	}
	return builtGeneric(gfx)
}

func listTargets(dir, ext string) []string {
	entries, err := builtFiles.ReadDir(dir)
	if err != nil {
		panic("kernels: embedded " + dir + " directory missing: " + err.Error())
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ext); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// ErrUnsupportedTarget is matched (errors.Is) by every
// *UnsupportedTargetError.
var ErrUnsupportedTarget = errors.New("kernels: unsupported GPU target")

// UnsupportedTargetError reports a GPU target with no embedded kernels the
// runtime can load.
type UnsupportedTargetError struct {
	ISA       string   // the name as given, e.g. "amdgcn-amd-amdhsa--gfx803:xnack-"
	Supported []string // the targets that do have kernels, sorted
	// Generic is the generic processor whose code object (v6) would run on
	// the target, when the runtime does not load v6; "" when the target
	// belongs to no family with an embedded generic object.
	Generic string
}

func (e *UnsupportedTargetError) Error() string {
	name := e.ISA
	if gfx := normalizeISA(e.ISA); gfx != e.ISA {
		name = gfx + " (from " + e.ISA + ")"
	}
	msg := "kernels: no kernels built for " + name
	if e.Generic != "" {
		msg += "; its family's " + e.Generic + " code object (v6) does not load on this runtime (generic objects need ROCr 1.15, ROCm 6.4, or later)"
	}
	return msg + "; supported: " + strings.Join(e.Supported, ", ")
}

// Is makes errors.Is(err, ErrUnsupportedTarget) true, and
// errors.Is(err, ErrNoAcceptedCodeObject) when a generic object exists
// that the runtime does not load.
func (e *UnsupportedTargetError) Is(target error) bool {
	return target == ErrUnsupportedTarget || (e.Generic != "" && target == ErrNoAcceptedCodeObject)
}

// normalizeISA reduces an HSA ISA name to the processor name the code
// objects are filed under: "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" and
// "gfx90a:xnack-" both become "gfx90a".
//
// Dropping the feature settings is safe because build.sh gives none: each
// code object is built for xnack "any" and sramecc "any", which the HSA
// runtime loads on a device in either mode of each feature.
func normalizeISA(isa string) string {
	if i := strings.LastIndex(isa, "--"); i >= 0 {
		isa = isa[i+2:]
	}
	if i := strings.IndexByte(isa, ':'); i >= 0 {
		isa = isa[:i]
	}
	return isa
}

// Targets returns the AMD processors (e.g. "gfx90a") that have embedded
// code objects of their own, sorted. The other members of the generic
// families (GenericTargets) run a generic code object where ROCr loads it
// (ROCrLoadsGeneric).
func Targets() []string { return slices.Clone(amdTargets) }

// CodeObject returns the default-version (v5) code object (an ELF shared
// object for hsa_code_object_reader_create_from_memory) holding all 32
// kernels (26 elementwise, 6 reductions) for the given AMD GPU. isa may be a bare processor name
// ("gfx90a"), carry feature settings ("gfx90a:sramecc+:xnack-"), or be a
// full HSA ISA name ("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"). The
// result is a fresh copy the caller may keep. An unknown target gives an
// *UnsupportedTargetError. CodeObjectFor picks another version.
func CodeObject(isa string) ([]byte, error) {
	return CodeObjectFor(isa, DefaultCodeObjectVersion)
}

// PTXTargets returns the NVIDIA architectures (e.g. "sm_90") that have
// embedded PTX, sorted.
func PTXTargets() []string { return slices.Clone(ptxTargets) }

// PTX returns the PTX module holding all 32 kernels for an NVIDIA
// architecture such as "sm_90", with a terminating NUL byte added because
// cuModuleLoadData takes a C string. The CUDA driver JIT-compiles PTX for
// the device it loads on, so sm_80 PTX also runs on later GPUs. Kernel entry
// names are Op.KernelName and Reduction.KernelName; the parameters are
// those of Layout and ReduceLayout. An unknown
// architecture gives an *UnsupportedTargetError.
func PTX(arch string) ([]byte, error) {
	if _, found := slices.BinarySearch(ptxTargets, arch); !found {
		return nil, &UnsupportedTargetError{ISA: arch, Supported: PTXTargets()}
	}
	text, err := builtFiles.ReadFile(path.Join("ptx", arch+".ptx"))
	if err != nil {
		return nil, err
	}
	return append(text, 0), nil
}

// Wavefront returns the wavefront size the kernels were built with for an
// AMD processor: 64 for gfx9 (GCN/CDNA), 32 for gfx10 and later (RDNA, which
// clang builds wave32 by default), or 0 if isa is not an AMD processor name.
// isa is normalized as in CodeObject.
func Wavefront(isa string) int {
	gfx := normalizeISA(isa)
	version, ok := strings.CutPrefix(gfx, "gfx")
	if !ok || len(version) < 3 || len(version) > 4 || version[0] == '0' {
		return 0
	}
	for _, c := range []byte(version) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return 0 // e.g. the generic targets, "gfx9-generic"
		}
	}
	// The major version is every character but the last two (gfx90a is 9,
	// gfx1100 is 11), so four characters mean gfx10 or later.
	if len(version) == 4 {
		return 32
	}
	return 64
}

// DefaultWorkgroupSize is the workgroup size to dispatch the kernels with on
// the given AMD processor: 256 everywhere. 256 is the largest size the
// kernels accept (OpenCL's default amdgpu-flat-work-group-size, recorded as
// .max_flat_workgroup_size in the metadata), it is a whole number of
// wavefronts for both wave64 and wave32, and it gives each compute unit
// several waves to hide memory latency with, which is what a memory-bound
// elementwise kernel needs. The grid-stride loop makes the result correct
// for any workgroup and grid size.
func DefaultWorkgroupSize(isa string) uint16 {
	_ = isa // one size suits every target built today; the parameter leaves room to tune
	return 256
}

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
//go:embed co/v4/*.hsaco co/v5/*.hsaco ptx/*.ptx
var builtFiles embed.FS

var (
	amdTargets = listTargets(codeObjectDir(DefaultCodeObjectVersion), ".hsaco")
	v4Targets  = listTargets(codeObjectDir(CodeObjectV4), ".hsaco")
	ptxTargets = listTargets("ptx", ".ptx")
)

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

// UnsupportedTargetError reports a GPU target with no embedded kernels.
type UnsupportedTargetError struct {
	ISA       string   // the name as given, e.g. "amdgcn-amd-amdhsa--gfx1102:xnack-"
	Supported []string // the targets that do have kernels, sorted
}

func (e *UnsupportedTargetError) Error() string {
	name := e.ISA
	if gfx := normalizeISA(e.ISA); gfx != e.ISA {
		name = gfx + " (from " + e.ISA + ")"
	}
	return "kernels: no kernels built for " + name + "; supported: " + strings.Join(e.Supported, ", ")
}

// Is makes errors.Is(err, ErrUnsupportedTarget) true.
func (e *UnsupportedTargetError) Is(target error) bool {
	return target == ErrUnsupportedTarget
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
// code objects, sorted.
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

package userkernel

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rocsync/rocsync/kernels"
)

// Family is the kind of GPU code a target runs.
type Family uint8

const (
	AMD    Family = iota + 1 // AMDGPU code objects (HSA, HIP)
	NVIDIA                   // PTX (CUDA driver)
)

func (f Family) String() string {
	switch f {
	case AMD:
		return "amd"
	case NVIDIA:
		return "nvidia"
	}
	return "Family(" + strconv.Itoa(int(f)) + ")"
}

// Device describes what a device runs, as its driver knows it.
type Device struct {
	// ISA is the device's code target: an HSA ISA name
	// ("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"), a bare or featured
	// processor ("gfx90a", "gfx90a:xnack-"), or an NVIDIA architecture
	// ("sm_90").
	ISA string
	// Accepts reports whether the device's runtime loads AMD code objects
	// of version v: a closure over kernels.ROCrAccepts or
	// kernels.HIPAccepts with the runtime's release. nil accepts every
	// version. Unused for NVIDIA.
	Accepts func(v kernels.CodeObjectVersion) bool
	// Emulated says the device runs kernels as Go references (rocsync's
	// emulator): where no compiler is found, an OpenCL source builds into
	// a declared image, the kernels' signatures without code (see
	// WithDeclarations), which is all such a device needs.
	Emulated bool
}

// Target is one concrete build target: what an Image is built for.
type Target struct {
	Family Family
	// Arch is the processor without feature settings ("gfx90a") or the
	// NVIDIA architecture ("sm_80").
	Arch string
	// CodeObject is the AMD code-object version; 0 for NVIDIA.
	CodeObject kernels.CodeObjectVersion
}

func (t Target) String() string {
	if t.Family == AMD {
		return t.Arch + "/" + t.CodeObject.String()
	}
	return t.Arch
}

// ErrTarget is matched (errors.Is) by errors about a device's target: an
// ISA name that is neither AMD nor NVIDIA, or a Source with nothing for it.
var ErrTarget = errors.New("userkernel: no code for the device's target")

// amdFeatures splits an AMD ISA name into the processor and its feature
// settings: "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" gives "gfx90a" and
// {"sramecc": '+', "xnack": '-'}. ok is false for a name that is not an
// AMD processor.
func amdFeatures(isa string) (gfx string, features map[string]byte, ok bool) {
	if i := strings.LastIndex(isa, "--"); i >= 0 {
		isa = isa[i+2:]
	}
	parts := strings.Split(isa, ":")
	gfx = parts[0]
	if kernels.Wavefront(gfx) == 0 {
		return "", nil, false
	}
	for _, p := range parts[1:] {
		if len(p) < 2 || (p[len(p)-1] != '+' && p[len(p)-1] != '-') {
			return "", nil, false
		}
		if features == nil {
			features = map[string]byte{}
		}
		features[p[:len(p)-1]] = p[len(p)-1]
	}
	return gfx, features, true
}

// featuresCompatible reports whether a code object built with the feature
// settings obj loads on a device in mode dev: a feature the object does not
// name is "any" and loads in either mode; a device that does not say its
// mode is taken to accept what the object asks for.
func featuresCompatible(obj, dev map[string]byte) bool {
	for name, want := range obj {
		if have, known := dev[name]; known && have != want {
			return false
		}
	}
	return true
}

// smVersion parses "sm_90" (or "sm_90a") into 90. ok is false otherwise.
func smVersion(arch string) (int, bool) {
	digits, found := strings.CutPrefix(arch, "sm_")
	if !found {
		return 0, false
	}
	digits = strings.TrimRight(digits, "af")
	n, err := strconv.Atoi(digits)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// family tells which kind of code a device runs.
func (d Device) family() (Family, error) {
	if _, _, ok := amdFeatures(d.ISA); ok {
		return AMD, nil
	}
	if _, ok := smVersion(d.ISA); ok {
		return NVIDIA, nil
	}
	return 0, fmt.Errorf("%w: %q is neither an AMD processor (gfx...) nor an NVIDIA architecture (sm_XX)", ErrTarget, d.ISA)
}

func (d Device) accepts(v kernels.CodeObjectVersion) bool {
	return d.Accepts == nil || d.Accepts(v)
}

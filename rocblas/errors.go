package rocblas

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rocsync/rocsync/internal/dl"
)

// ErrNotFound is matched by errors.Is when no rocBLAS library is installed
// (for the HIP release in use or any other). The error also matches
// dl.ErrNotFound and unwraps to the *dl.NotFoundError that lists every path
// tried.
var ErrNotFound = errors.New("rocBLAS not found")

type notFoundError struct {
	nf *dl.NotFoundError
}

func (e *notFoundError) Error() string {
	return "rocBLAS not found (MatMul on the real ROCm stack needs librocblas): " + e.nf.Attempts()
}

func (e *notFoundError) Unwrap() []error { return []error{ErrNotFound, e.nf} }

// MismatchError says that the rocBLAS found belongs to another ROCm release
// than the HIP runtime in use. Each librocblas soname is linked against one
// libamdhip64 soname; loading the other one would put two HIP runtimes in
// the process, so Open refuses it without loading it.
type MismatchError struct {
	HIPMajor       int      // major of the libamdhip64 in use (its soname)
	Path           string   // the rocBLAS that was found
	Soname         string   // its soname, e.g. "librocblas.so.4"
	RocBLASRelease string   // the ROCm release that soname belongs to, e.g. "6.x"
	Want           []string // the sonames that would match HIPMajor
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("rocBLAS does not match HIP: HIP is libamdhip64.so.%d (ROCm %d.x) but the rocBLAS found is %s (%s, ROCm %s); ROCm %d.x needs %s",
		e.HIPMajor, e.HIPMajor, e.Path, e.Soname, e.RocBLASRelease, e.HIPMajor, strings.Join(e.Want, " or "))
}

package hsa

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoGPU is matched (errors.Is) by the error Init returns when the runtime
// loads but finds no usable AMD GPU. ROCr reports that case as a generic
// HSA_STATUS_ERROR_OUT_OF_RESOURCES from hsa_init (it maps every failure to
// load the KFD topology to that status), which callers cannot tell from a
// real resource failure without this sentinel.
var ErrNoGPU = errors.New("no AMD GPU found")

// noGPUError wraps both ErrNoGPU and the *Error from hsa_init, so callers
// can test for either: errors.Is(err, ErrNoGPU) to fall back to the
// emulator, errors.As(err, &*Error) for the raw status.
type noGPUError struct {
	hsa *Error
	kfd string // why /dev/kfd is unusable, "" when it looks fine
}

func (e *noGPUError) Error() string {
	msg := fmt.Sprintf("%v (HSA: %s", ErrNoGPU, strings.TrimPrefix(e.hsa.Error(), "hsa: "))
	if e.kfd != "" {
		msg += "; " + e.kfd
	}
	return msg + ")"
}

func (e *noGPUError) Unwrap() []error { return []error{ErrNoGPU, e.hsa} }

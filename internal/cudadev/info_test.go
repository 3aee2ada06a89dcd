package cudadev

import (
	"errors"
	"testing"

	"github.com/rocsync/rocsync/cuda"
)

func TestDriverVersionString(t *testing.T) {
	for v, want := range map[int]string{13000: "CUDA driver 13.0", 12040: "CUDA driver 12.4", 11080: "CUDA driver 11.8"} {
		if got := driverVersionString(v); got != want {
			t.Errorf("driverVersionString(%d) = %q, want %q", v, got, want)
		}
	}
}

// CUDA's out-of-memory error is recognised, and only it.
func TestOutOfMemoryClassifiesCUDA(t *testing.T) {
	for err, want := range map[error]bool{
		&cuda.Error{Func: "cuMemAlloc_v2", Code: cuda.ErrorOutOfMemory}:  true,
		&cuda.Error{Func: "cuMemAlloc_v2", Code: cuda.ErrorInvalidValue}: false,
		errors.New("hipErrorOutOfMemory"):                                false,
	} {
		if got := outOfMemory(err); got != want {
			t.Errorf("outOfMemory(%v) = %v, want %v", err, got, want)
		}
	}
}

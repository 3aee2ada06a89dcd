package rocmdev

import (
	"errors"
	"testing"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
)

func TestHIPVersionString(t *testing.T) {
	for v, want := range map[int]string{50221153: "HIP 5.2.21153", 60200000: "HIP 6.2.0", 60342134: "HIP 6.3.42134"} {
		if got := hipVersionString(v); got != want {
			t.Errorf("hipVersionString(%d) = %q, want %q", v, got, want)
		}
	}
}

// HIP's and HSA's out-of-memory errors are recognised, and only those.
func TestOutOfMemoryClassifiesHIPAndHSA(t *testing.T) {
	for err, want := range map[error]bool{
		&hip.Error{Func: "hipMalloc", Code: hip.ErrorOutOfMemory}:                               true,
		&hsa.Error{Func: "hsa_amd_memory_pool_allocate", Status: hsa.StatusErrorOutOfResources}: true,
		&hip.Error{Func: "hipMalloc", Code: hip.ErrorInvalidValue}:                              false,
		errors.New("hipErrorOutOfMemory"):                                                       false,
	} {
		if got := outOfMemory(err); got != want {
			t.Errorf("outOfMemory(%v) = %v, want %v", err, got, want)
		}
	}
}

package rocmdev

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
)

// HIP's and HSA's out-of-memory errors are recognised, and only those.
func TestOutOfMemoryClassifiesHIPAndHSA(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&hip.Error{Func: "hipMalloc", Code: hip.ErrorOutOfMemory}, true},
		{&hsa.Error{Func: "hsa_amd_memory_pool_allocate", Status: hsa.StatusErrorOutOfResources}, true},
		{&hip.Error{Func: "hipMalloc", Code: hip.ErrorInvalidValue}, false},
		{errors.New("hipErrorOutOfMemory"), false},
	} {
		require.Equal(t, c.want, outOfMemory(c.err), "%v", c.err)
	}
}

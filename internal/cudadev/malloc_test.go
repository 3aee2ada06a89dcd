package cudadev

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cuda"
)

// CUDA's out-of-memory error is recognised, and only it.
func TestOutOfMemoryClassifiesCUDA(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&cuda.Error{Func: "cuMemAlloc_v2", Code: cuda.ErrorOutOfMemory}, true},
		{&cuda.Error{Func: "cuMemAlloc_v2", Code: cuda.ErrorInvalidValue}, false},
		{errors.New("hipErrorOutOfMemory"), false},
	} {
		require.Equal(t, c.want, outOfMemory(c.err), "%v", c.err)
	}
}

package collective

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/nccl"
)

// A missing library is an error naming every path tried; the NVLink
// multicast guard runs before the search.
func TestCollectiveLibraryMissing(t *testing.T) {
	t.Setenv(nccl.EnvLibRCCL, "/nonexistent/librccl.so.1")
	_, err := Load(nccl.RCCL)
	require.ErrorIs(t, err, nccl.ErrNotFound)
	require.Contains(t, err.Error(), "/nonexistent/librccl.so.1")
	require.Equal(t, "0", os.Getenv(nccl.EnvNVLS))
}

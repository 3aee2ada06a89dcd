package rocsync

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// ParseBackend reads what Backend's String prints, and nothing else.
func TestParseBackend(t *testing.T) {
	for _, b := range []Backend{Auto, Emulator, ROCm, CUDA} {
		got, err := ParseBackend(b.String())
		require.NoError(t, err)
		require.Equal(t, b, got)
	}
	for _, s := range []string{"", "Auto", "hip", "tpu"} {
		_, err := ParseBackend(s)
		require.ErrorIs(t, err, ErrInvalid, s)
		require.ErrorContains(t, err, "want auto, emulator, rocm or cuda")
	}
}

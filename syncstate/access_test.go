package syncstate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Use declares an operand as its access says: Read adds a read operand,
// Write a write one, ReadWrite both (one operand that writes).
func TestUseDeclaresTheAccess(t *testing.T) {
	for _, tc := range []struct {
		a           Access
		read, write bool
	}{{Read, true, false}, {Write, false, true}, {ReadWrite, true, true}} {
		x := NewState()
		var op Op
		op.Use(x, tc.a)
		require.Equal(t, 1, op.n, "%v", tc.a)
		require.Equal(t, tc.read, op.acc[0].read, "%v", tc.a)
		require.Equal(t, tc.write, op.acc[0].write, "%v", tc.a)
		require.Equal(t, tc.write, tc.a.Writes(), "%v", tc.a)
	}
	require.Equal(t, "read", Read.String())
	require.Equal(t, "write", Write.String())
	require.Equal(t, "read-write", ReadWrite.String())
	require.Equal(t, "Access(4)", Access(4).String())
}

package rocsync

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// rocBLAS grows a handle's own workspace when a call needs more, freeing
// the old one; inside a capture the nodes captured before keep the freed
// address (rocBLAS documentation, "Graph support for rocBLAS": size the
// workspace before the capture, or use stream-ordered allocation). The
// emulated rocBLAS models it (its gemms with K at least 8 times M and N
// use a split-K workspace that grows with K) and faults a node that uses
// freed memory. A recording of two such gemms, the second needing more
// workspace, must replay like the eager program, with no hazard.
func TestCapturedGemmsDoNotGrowTheWorkspace(t *testing.T) {
	var log bytes.Buffer
	d := openHIPGraphEmulator(t, 0, &log)
	tk := d.DefaultTask()
	const m, k1, k2 = 2, 16, 64
	a1, err := d.FromFloat32(m, k1, randMatrix(3, 64)[:m*k1])
	require.NoError(t, err)
	b1, err := d.FromFloat32(k1, m, randMatrix(4, 64)[:k1*m])
	require.NoError(t, err)
	a2, err := d.FromFloat32(m, k2, randMatrix(5, 64)[:m*k2])
	require.NoError(t, err)
	b2, err := d.FromFloat32(k2, m, randMatrix(6, 64)[:k2*m])
	require.NoError(t, err)
	want := func() ([]float32, []float32) {
		c1, err := tk.MatMul(a1, b1, false, false)
		require.NoError(t, err)
		c2, err := tk.MatMul(a2, b2, false, false)
		require.NoError(t, err)
		v1, err := c1.Float32s()
		require.NoError(t, err)
		v2, err := c2.Float32s()
		require.NoError(t, err)
		return v1, v2
	}
	w1, w2 := want()
	// A fresh task: its handle's workspace has not grown yet.
	rt, err := d.NewTask()
	require.NoError(t, err)
	defer rt.Close()
	c1, err := d.Empty(m, m, Float32)
	require.NoError(t, err)
	c2, err := d.Empty(m, m, Float32)
	require.NoError(t, err)
	rec, err := rt.Record(func() error {
		if err := rt.MatMulInto(c1, a1, b1, false, false); err != nil {
			return err
		}
		return rt.MatMulInto(c2, a2, b2, false, false)
	})
	require.NoError(t, err)
	defer rec.Close()
	graphs, fallbacks := rec.Graphs()
	require.Equal(t, 1, graphs, "captured: %v", fallbacks)
	for i := 0; i < 3; i++ {
		require.NoError(t, rec.Replay())
		g1, err := c1.Float32s()
		require.NoError(t, err, "replay %d", i)
		g2, err := c2.Float32s()
		require.NoError(t, err, "replay %d", i)
		require.Equal(t, w1, g1)
		require.Equal(t, w2, g2)
	}
	require.Empty(t, d.Hazards())
}

package rocsync

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A replayed segment's device slice runs from its first packet's start to
// its last packet's end (each packet is timed on its own); an op of one
// ticket keeps its own times, and an op whose last packet was not timed
// has no slice.
func TestSegmentSpan(t *testing.T) {
	g := []gpuSpan{{ticket: 3, start: 10, end: 20}, {ticket: 4, start: 20, end: 35}, {ticket: 5, start: 36, end: 50}, {ticket: 7, start: 60, end: 61}}
	s, ok := segmentSpan(g, 3, 5)
	require.True(t, ok)
	require.Equal(t, gpuSpan{ticket: 5, start: 20, end: 50}, s)
	s, ok = segmentSpan(g, 2, 3)
	require.True(t, ok)
	require.Equal(t, gpuSpan{ticket: 3, start: 10, end: 20}, s)
	_, ok = segmentSpan(g, 5, 6)
	require.False(t, ok)
}

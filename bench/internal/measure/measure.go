// Package measure holds what the bench command and the raw CUDA baseline
// must compute identically for their results to compare: the inputs, the
// checksum and the statistics.
package measure

import (
	"math"
	"slices"
	"time"
)

// Micros is d in microseconds.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// Quantile is the q-quantile of xs (nearest rank; xs is not modified).
func Quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Round(q*float64(len(s)-1)))]
}

// Checksum sums the values with fixed weights in a fixed order, so equal
// results give equal checksums bit for bit.
func Checksum(v []float32) float64 {
	var s float64
	for i, x := range v {
		s += float64(x) * float64(i%7+1)
	}
	return s
}

// InputMatrix is a deterministic n×n input, scaled so that three chained
// products stay well inside float32's range.
func InputMatrix(n int, seed uint64) []float32 {
	out := make([]float32, n*n)
	x := seed*2862933555777941757 + 3037000493
	for i := range out {
		x = x*2862933555777941757 + 3037000493
		out[i] = (float32(x>>40)/float32(1<<24) - 0.5) / float32(n)
	}
	return out
}

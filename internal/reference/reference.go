// Package reference computes, in float64 on the CPU, what the seed programs
// compute on a GPU, so tests and the raw baseline check results the same
// way.
package reference

// Widen converts float32 values to float64.
func Widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// Mul is the elementwise product.
func Mul(a, b []float64) []float64 {
	c := make([]float64, len(a))
	for i := range a {
		c[i] = a[i] * b[i]
	}
	return c
}

// MatMul is the product of two row-major n×n matrices.
func MatMul(a, b []float64, n int) []float64 {
	c := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for k := 0; k < n; k++ {
			av := a[i*n+k]
			for j := 0; j < n; j++ {
				c[i*n+j] += av * b[k*n+j]
			}
		}
	}
	return c
}

//go:build !race

package rocblas

const raceEnabled = false

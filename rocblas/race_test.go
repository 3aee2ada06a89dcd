//go:build race

package rocblas

const raceEnabled = true

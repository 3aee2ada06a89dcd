//go:build !race

package cublas

const raceEnabled = false

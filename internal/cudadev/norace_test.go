//go:build !race

package cudadev

const raceEnabled = false

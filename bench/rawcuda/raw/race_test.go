//go:build race

package raw

const raceEnabled = true

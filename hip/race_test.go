//go:build race

package hip

const raceEnabled = true

//go:build race

package rocsync

const raceEnabled = true

//go:build !race

package kfdsim

const execRaceEnabled = false

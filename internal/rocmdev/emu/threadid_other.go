//go:build !linux

package emu

import (
	"runtime"
	"strconv"
	"strings"
)

// threadID stands in for the OS thread's id where Go gives none: the
// calling goroutine's id, from its stack trace's first line. A caller
// keeps a group on one locked goroutine either way.
func threadID() int64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(strings.TrimPrefix(string(buf[:n]), "goroutine "))
	if len(f) == 0 {
		return 0
	}
	id, _ := strconv.ParseInt(f[0], 10, 64)
	return id
}

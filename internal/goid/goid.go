// Package goid tells goroutines apart, for the checks that refuse what a
// goroutine must not do to itself: a host function that waits for its own
// lane, another goroutine's op on a recording task. Go gives no goroutine
// identity, so it is read from the first line of the caller's stack trace
// ("goroutine 42 [running]:"), which costs a microsecond or so: callers
// ask only on paths that are about to block or are rare.
package goid

import "runtime"

// ID is the calling goroutine's id, as runtime.Stack prints it.
func ID() uint64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	const prefix = "goroutine "
	var id uint64
	for _, c := range buf[min(len(prefix), n):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

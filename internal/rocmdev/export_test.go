package rocmdev

import "time"

// SetMemoryViolationGrace shortens memoryViolationGrace for a test.
func SetMemoryViolationGrace(d time.Duration) (restore func()) {
	old := memoryViolationGrace
	memoryViolationGrace = d
	return func() { memoryViolationGrace = old }
}

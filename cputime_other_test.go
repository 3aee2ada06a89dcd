//go:build !linux

package rocsync

import "time"

// processCPU is not measured off Linux.
func processCPU() time.Duration { return 0 }

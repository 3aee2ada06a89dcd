//go:build !amd64 && !arm64

package nccl

import (
	"fmt"
	"runtime"
)

// callInitRank would pass the 128-byte id by value, which needs each
// architecture's rule for large structs; only amd64 and arm64 are written.
func callInitRank(fn, commOut uintptr, nranks int32, id *UniqueID, rank int32) (uintptr, error) {
	return 0, fmt.Errorf("nccl: ncclCommInitRank is not bound on %s", runtime.GOARCH)
}

//go:build !(linux && (amd64 || arm64))

package hsa

import (
	"fmt"
	"runtime"
)

// Lib stands in for the purego binding where ROCm does not exist, so that
// code written against *Lib still compiles; Open never returns one here.
type Lib struct{ Runtime }

// BoundSymbols is empty where the binding is not built.
var BoundSymbols []string

// Open fails with an error matching ErrNoGPU: the HSA runtime ships for
// 64-bit Linux only.
func Open() (*Lib, error) {
	return nil, fmt.Errorf("hsa: %w: the HSA runtime is not available on %s/%s", ErrNoGPU, runtime.GOOS, runtime.GOARCH)
}

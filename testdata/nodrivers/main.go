// Command nodrivers opens a device without importing package backends:
// Open must fail with ErrUnavailable naming the import.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/rocsync/rocsync"
)

func main() {
	for _, b := range []rocsync.Backend{rocsync.Auto, rocsync.Emulator, rocsync.ROCm, rocsync.CUDA} {
		_, err := rocsync.Open(rocsync.Options{Backend: b, LogLevel: rocsync.LogOff})
		fmt.Printf("%v: %v\n", b, err)
		if !errors.Is(err, rocsync.ErrUnavailable) {
			os.Exit(1)
		}
	}
}

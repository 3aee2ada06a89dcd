package cudadev

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
)

// Close may run beside a task's first launch, which loads the module: the
// load and Close's unload are ordered, so no module outlives the device.
func TestCloseRacesFirstKernelLoad(t *testing.T) {
	for i := 0; i < 100; i++ {
		e := newEmu()
		d, err := newDevice(e, driver.DeviceConfig{}, 0, "emulated GPU", 9, 0)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := d.Builtin(kernels.Mul, kernels.F32)
			done <- err
		}()
		require.NoError(t, d.Close())
		if err := <-done; err != nil {
			require.ErrorIs(t, err, errClosed)
		}
		e.mu.Lock()
		loaded := e.loaded
		e.mu.Unlock()
		require.False(t, loaded, "run %d: module loaded after Close", i)
	}
}

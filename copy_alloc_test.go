//go:build !race

package rocsync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// In steady state (staging slots and helper goroutines exist) an upload
// allocates nothing of rocsync's, chunked or not, and a download with its
// Wait only the *Pending it returns. The emulator's hipMemcpyAsync
// allocates the command it queues (one per copy op, emu.(*HIP).copyAsync
// in a memory profile), and so does its hipEventRecord (a chunked
// download pins an event per chunk): a real runtime does neither. That
// much is allowed per chunk, and no more.
func TestCopiesAllocateNothingInSteadyState(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	require.NoError(t, err)
	defer d.Close()
	tk, err := d.NewTask()
	require.NoError(t, err)
	defer tk.Close()
	for _, size := range []int{4096, 2 << 20, 3*copyChunk + 5} {
		buf, err := d.NewBuffer(size)
		require.NoError(t, err)
		host := randomBytes(size, 1)
		upload := func() {
			require.NoError(t, tk.Upload(buf, host))
			require.NoError(t, tk.Synchronize())
		}
		download := func() {
			p, err := tk.Download(buf, host)
			require.NoError(t, err)
			require.NoError(t, p.Wait(context.Background()))
		}
		upload()
		download()
		_, chunks := chunking(uint64(size))
		emulated := 0.0 // the emulator's copy commands allocate nothing
		require.Equal(t, emulated, testing.AllocsPerRun(20, upload), "Upload of %d bytes", size)
		if chunks > 1 {
			emulated += float64(chunks) // the emulator's event records
		}
		require.Equal(t, 1+emulated, testing.AllocsPerRun(20, download), "Download+Wait of %d bytes: the Pending only", size)
	}
}

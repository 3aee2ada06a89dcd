package emu

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
)

// ROCr's copy queue of a direction is shared: a synchronous hipMemcpy
// waits behind an asynchronous copy of its direction queued earlier on a
// stream, which waits for its stream. When the stream waits on the device
// for a value that only the caller of the synchronous copy would store
// afterwards (a host function the stream waits for), the copy never ends:
// the emulator fails it as the deadlock it is. The other direction, and
// the same copy once the stream has passed its wait, are not held.
func TestSyncCopyQueuesBehindStreamCopies(t *testing.T) {
	m := New(Options{CopyEngineWait: 300 * time.Millisecond})
	h := m.HIP()
	word, err := h.ExtMalloc(0, 8, hip.MallocSignalMemory)
	require.NoError(t, err)
	wp := *(*unsafe.Pointer)(unsafe.Pointer(&word)) // the host address HIP returned
	s, err := h.StreamCreate(0, hip.StreamNonBlocking)
	require.NoError(t, err)
	dev, err := h.Malloc(0, 64)
	require.NoError(t, err)
	pinned, err := h.HostMalloc(64)
	require.NoError(t, err)
	var local [64]byte

	// The stream waits for the word, then copies to the host: that copy
	// holds the device-to-host queue.
	require.NoError(t, h.StreamWaitValue64(s, wp, 1, hip.StreamWaitValueGte, ^uint64(0)))
	require.NoError(t, h.MemcpyDtoHAsync(pinned, dev, 64, s))
	require.NoError(t, h.MemcpyHtoD(0, dev, unsafe.Pointer(&local[0]), 64), "the other direction is free")
	err = h.MemcpyDtoH(0, unsafe.Pointer(&local[0]), dev, 64)
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorLaunchFailure})
	require.True(t, strings.Contains(err.Error(), "deadlock"), "%v", err)

	// Once the word is stored the stream passes its wait and runs its
	// copy, and a synchronous copy behind it runs too.
	(*atomic.Uint64)(wp).Store(1)
	require.NoError(t, h.StreamSynchronize(s))
	require.NoError(t, h.MemcpyDtoH(0, unsafe.Pointer(&local[0]), dev, 64))
	require.NoError(t, h.StreamDestroy(s))
}

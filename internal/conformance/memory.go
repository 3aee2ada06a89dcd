package conformance

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

// Free with work pending returns at once, and the memory is released only
// after the work completes.
func FreeWithPendingWork(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide)
	need(t, be, be.held(), "way to hold the device")
	tk := d.DefaultTask()
	x, err := d.FromFloat32(64, 64, testcheck.RandMatrix(5, 64))
	require.NoError(t, err)
	release := be.Hold(t, d)
	defer release()
	y, err := tk.Mul(x, x)
	require.NoError(t, err)
	require.Equal(t, 1, y.PendingFences())
	before := d.Stats()
	require.NoError(t, y.Free())
	require.NoError(t, x.Free()) // x has a pending reader
	require.Zero(t, d.Stats().Sub(before).HostWaitsTotal(), "Free must not wait")
	// The driver's allocation records are checked on the emulator only:
	// ROCr 5.2.3 carves small device allocations out of 2 MiB blocks that
	// stay allocated (seen on the simulated driver), so there one array's
	// release does not show.
	if be.Live != nil {
		require.True(t, be.Live(d, y), "memory released while its kernel is pending")
		require.True(t, be.Live(d, x), "memory released while its kernel is pending")
	}
	z, err := d.Empty(64, 64, rocsync.Float32)
	require.NoError(t, err)
	require.NotEqual(t, be.Internals.Ptr(y), be.Internals.Ptr(z), "memory reused while its kernel is pending")
	require.NotEqual(t, be.Internals.Ptr(x), be.Internals.Ptr(z), "memory reused while its kernel is pending")
	release()
	require.NoError(t, d.Synchronize())
	// Done: the blocks are cached for reuse, then really freed by a trim.
	w, err := d.Empty(64, 64, rocsync.Float32)
	require.NoError(t, err)
	require.Contains(t, []driver.DevicePtr{be.Internals.Ptr(x), be.Internals.Ptr(y)}, be.Internals.Ptr(w), "a completed block is reused")
	require.NoError(t, w.Free())
	require.NoError(t, z.Free())
	require.NoError(t, d.TrimCache())
	if be.Live != nil {
		require.False(t, be.Live(d, y))
		require.False(t, be.Live(d, x))
	}
}

// With the cache off, memory goes straight back to the driver once its
// work is done.
func FreeWithoutCache(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide, func(o *rocsync.Options) { o.MemoryCache = -1 })
	// ROCr 5.2.3 keeps small allocations' 2 MiB blocks, so only the
	// emulator's records show one array's release.
	need(t, be, be.Live != nil, "allocation table")
	x, err := d.FromFloat32(8, 8, make([]float32, 64))
	require.NoError(t, err)
	require.NoError(t, x.Free())
	require.False(t, be.Live(d, x))
}

// More tasks than queues share the pool's queues, and stay correct.
func QueuePoolSharesQueues(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide, func(o *rocsync.Options) { o.MaxQueues = 2 })
	need(t, be, d.Backend() != "cuda", "pooled HSA queues")
	x, err := d.FromFloat32(4, 4, make([]float32, 16))
	require.NoError(t, err)
	var tasks []*rocsync.Task
	for i := 0; i < 5; i++ {
		tk, err := d.NewTask()
		require.NoError(t, err)
		tasks = append(tasks, tk)
		require.NoError(t, tk.Fill(x, float64(i)))
	}
	// The tasks' kernel timelines are the pool's HSA queues: two.
	queues := map[syncstate.Timeline]bool{}
	for _, tk := range tasks {
		k, _ := be.Internals.Timelines(tk)
		_, isQueue := k.(*queue.Queue)
		require.True(t, isQueue, "a task's kernel timeline is its HSA queue")
		queues[k] = true
	}
	require.Len(t, queues, 2)
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, float32(4), got[0])
	for _, tk := range tasks {
		require.NoError(t, tk.Close())
	}
}

// Steady state creates no signals and no events: both are pooled.
func SignalsAndEventsArePooled(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide)
	a, _ := d.NewTask()
	b, _ := d.NewTask()
	x, err := d.FromFloat32(8, 8, make([]float32, 64))
	require.NoError(t, err)
	y, _ := d.Empty(8, 8, rocsync.Float32)
	round := func() {
		require.NoError(t, a.Fill(x, 1))
		require.NoError(t, b.AddInto(y, x, x)) // HSA→HSA crossing
		require.NoError(t, a.MatMulInto(x, y, y, false, false))
		require.NoError(t, b.MatMulInto(y, x, x, false, false)) // HIP→HIP crossing
		require.NoError(t, d.Synchronize())
	}
	for i := 0; i < 5; i++ {
		round()
	}
	sig, ev := d.SignalsCreated(), d.EventsCreated()
	for i := 0; i < 20; i++ {
		round()
	}
	require.Equal(t, sig, d.SignalsCreated())
	require.Equal(t, ev, d.EventsCreated())
	require.NotZero(t, d.Stats().EventsRecorded)
}

package rocsync

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func openPlain(t *testing.T, p Policy) *Device {
	t.Helper()
	d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// Device.Synchronize racing another task's Close must not read the
// task's timelines after Close cleared them (a nil dereference).
func TestSynchronizeRacesTaskClose(t *testing.T) {
	d := openPlain(t, DeviceSide)
	x, err := d.Empty(16, 16, Float32)
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		tk, err := d.NewTask()
		require.NoError(t, err)
		require.NoError(t, tk.Fill(x, float64(i)))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); require.NoError(t, tk.Close()) }()
		go func() { defer wg.Done(); require.NoError(t, d.Synchronize()) }()
		wg.Wait()
	}
}

// Under DeviceBridge a consumer crossing from the producer's HIP stream
// while the producer's task closes must not call hipStreamWriteValue64
// on the closed stream (HIP answers "unknown stream").
func TestDeviceBridgeCrossingWhileProducerCloses(t *testing.T) {
	d := openPlain(t, DeviceBridge)
	x, err := d.FromFloat32(8, 8, randMatrix(3, 8))
	require.NoError(t, err)
	y, _ := d.Empty(8, 8, Float32)
	z, _ := d.Empty(8, 8, Float32)
	b, err := d.NewTask()
	require.NoError(t, err)
	for i := 0; i < 300; i++ {
		a, err := d.NewTask()
		require.NoError(t, err)
		require.NoError(t, a.MatMulInto(y, x, x, false, false))
		done := make(chan error, 1)
		go func() { done <- a.Close() }()
		require.NoError(t, b.AddInto(z, y, y), "iteration %d", i)
		require.NoError(t, <-done)
	}
	require.NoError(t, b.Synchronize())
}

// PendingFences after a fault and Device.Close must not touch a
// destroyed signal (a panic).
func TestPendingFencesAfterFaultAndClose(t *testing.T) {
	d := openFaulty(t, DeviceSide)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(4, 4, randMatrix(4, 4))
	require.NoError(t, err)
	faultOn(d, "rocsync_mul_f32")
	release := d.machine().Hold()
	y, err := tk.Mul(x, x)
	require.NoError(t, err)
	z, err := tk.Add(y, x)
	require.NoError(t, err)
	release()
	_ = d.Close()
	require.NotPanics(t, func() {
		require.Zero(t, y.PendingFences())
		require.Zero(t, z.PendingFences())
		require.Zero(t, x.PendingFences())
	})
	_, err = z.Float32s()
	require.ErrorIs(t, err, ErrClosed)
}

// Concurrent first calls to DefaultTask make one task.
func TestDefaultTaskIsMadeOnce(t *testing.T) {
	for i := 0; i < 20; i++ {
		d := openPlain(t, DeviceSide)
		var wg sync.WaitGroup
		got := make([]*Task, 8)
		for g := range got {
			wg.Add(1)
			go func() { defer wg.Done(); got[g] = d.DefaultTask() }()
		}
		wg.Wait()
		for _, tk := range got {
			require.Same(t, got[0], tk)
		}
		d.mu.Lock()
		n := len(d.tasks)
		d.mu.Unlock()
		require.Equal(t, 1, n, "orphan tasks")
	}
}

// Bad options are rejected at Open; nil receivers give typed errors or
// zero values.
func TestOpenValidatesOptions(t *testing.T) {
	_, err := Open(Options{Backend: Emulator, Policy: Policy(99), LogLevel: LogOff})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Open(Options{Backend: Emulator, QueueSize: 1000, LogLevel: LogOff})
	require.ErrorIs(t, err, ErrInvalid)
	d, err := Open(Options{Backend: Emulator, QueueSize: 64, LogLevel: LogOff})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	// A power of two outside the GPU's queue sizes (64 to 1<<17 packets
	// on the emulator, as ROCr's GpuAgent) is refused at Open: it passed,
	// and every op then failed creating its queue.
	for _, size := range []uint32{8, 32, 1 << 18, 1 << 31} {
		_, err = Open(Options{Backend: Emulator, QueueSize: size, LogLevel: LogOff})
		require.ErrorIs(t, err, ErrInvalid, "QueueSize %d", size)
		require.ErrorContains(t, err, "outside the GPU's queue sizes, 64 to 131072 packets")
	}
	d, err = Open(Options{Backend: Emulator, QueueSize: 1 << 17, LogLevel: LogOff})
	require.NoError(t, err)
	require.NoError(t, d.Close())
}

func TestNilReceivers(t *testing.T) {
	require.NotPanics(t, func() {
		var tk *Task
		require.Equal(t, Stats{}, tk.Stats())
		require.Nil(t, tk.Device())
		require.ErrorIs(t, tk.Synchronize(), ErrInvalid)
		require.ErrorIs(t, tk.Close(), ErrInvalid)
		_, err := tk.Mul(nil, nil)
		require.ErrorIs(t, err, ErrInvalid)
		var a *Array
		require.Zero(t, a.Rows())
		require.Zero(t, a.Cols())
		require.Zero(t, a.Len())
		require.Zero(t, a.PendingFences())
		require.Nil(t, a.Device())
		require.Equal(t, "Array(nil)", a.String())
		require.ErrorIs(t, a.Free(), ErrNilArray)
		require.ErrorIs(t, a.CopyToFloat32(nil), ErrNilArray)
		var d *Device
		require.Equal(t, Stats{}, d.Stats())
		require.ErrorIs(t, d.Synchronize(), ErrInvalid)
		require.ErrorIs(t, d.Close(), ErrInvalid)
		_, err = d.NewTask()
		require.ErrorIs(t, err, ErrInvalid)
		_, err = d.Empty(1, 1, Float32)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorIs(t, d.DefaultTask().Synchronize(), ErrInvalid)
	})
}

// After a kernel fault under Unified, new ops on the broken stream are
// rejected, as on a broken HSA queue.
func TestUnifiedRejectsOpsAfterFault(t *testing.T) {
	d := openFaulty(t, Unified)
	defer func() { _ = d.Close() }()
	tk, err := d.NewTask()
	require.NoError(t, err)
	x, err := d.FromFloat32(4, 4, randMatrix(5, 4))
	require.NoError(t, err)
	y, _ := d.Empty(4, 4, Float32)
	faultOn(d, "rocsync_mul_f32")
	require.NoError(t, tk.MulInto(y, x, x))
	require.ErrorIs(t, within(t, "Synchronize", tk.Synchronize), ErrFault)
	d.machine().SetFaultInjector(nil)
	err = tk.AddInto(y, x, x)
	require.ErrorIs(t, err, ErrFault, "a broken stream takes no more work")
	// Another task is unaffected.
	other, err := d.NewTask()
	require.NoError(t, err)
	w, err := other.Add(x, x)
	require.NoError(t, err)
	_, err = w.Float32s()
	require.NoError(t, err)
	_ = time.Second
}

// DeviceBridge's HSA signals in flight stay bounded by the run-ahead cap
// between host syncs, with the default options, instead of growing with
// the rounds.
func TestDeviceBridgeSignalsStayBounded(t *testing.T) {
	d := openPlain(t, DeviceBridge)
	a, err := d.NewTask()
	require.NoError(t, err)
	b, err := d.NewTask()
	require.NoError(t, err)
	x, _ := d.FromFloat32(4, 4, make([]float32, 16))
	y, _ := d.FromFloat32(4, 4, make([]float32, 16))
	for i := 0; i < 10_000; i++ {
		require.NoError(t, a.Fill(x, 1))                        // HSA
		require.NoError(t, b.MatMulInto(y, x, x, false, false)) // HSA→HIP
		require.NoError(t, a.AddInto(x, y, x))                  // HIP→HSA
	}
	t.Logf("signals created: %d, events created: %d", d.SignalsCreated(), d.EventsCreated())
	require.Less(t, d.SignalsCreated(), uint64(4096))
	require.NoError(t, d.Synchronize())
}

package rocsync

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Record on a task of a closed device is ErrClosed, and fn does not run
// (it ran, and Record said "the function submitted no op"); so is
// BLASHandle.
func TestRecordOnAClosedDeviceIsErrClosed(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff})
	require.NoError(t, err)
	tk, err := d.NewTask()
	require.NoError(t, err)
	require.NoError(t, d.Close())
	for _, task := range []*Task{tk, d.DefaultTask()} {
		// BLASHandle said ErrUnavailable ("no BLAS library").
		_, err := task.BLASHandle()
		require.ErrorIs(t, err, ErrClosed)
		ran := false
		_, err = task.Record(func() error { ran = true; return nil })
		require.ErrorIs(t, err, ErrClosed)
		require.False(t, ran, "Record ran fn on a closed device")
	}
}

// While Record's function runs, an op on the task from another goroutine
// is ErrConcurrentUse: it used to land in the recording, return nil, never
// run, and be replayed with the recording.
func TestAnotherGoroutinesOpDuringRecordIsRefused(t *testing.T) {
	d := openPlain(t, DeviceSide)
	tk := d.DefaultTask()
	a, err := d.FromFloat32(1, 2, []float32{1, 2})
	require.NoError(t, err)
	out, err := d.Empty(1, 2, Float32)
	require.NoError(t, err)
	var other error
	rec, err := tk.Record(func() error {
		if err := tk.ScaleInto(out, 2, a); err != nil {
			return err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, other = tk.Add(a, a)
		}()
		<-done
		return tk.ScaleInto(out, 3, out) // fn's own ops are still recorded
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, rec.Close()) }()
	require.ErrorIs(t, other, ErrConcurrentUse)
	var ce *ConcurrentUseError
	require.ErrorAs(t, other, &ce)
	require.Equal(t, "Record", ce.Other)
	require.Equal(t, 2, rec.Ops(), "only fn's ops are recorded")
	require.NoError(t, rec.Replay())
	got, err := out.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{6, 12}, got)
}

// Free on another goroutine of an array a recording uses, while Record
// builds a recording, is refused with ErrRecording, names the recording
// without racing on its op count (go test -race found it), and says "still
// recording" while fn runs rather than "(0 ops)".
func TestFreeDuringRecordNamesTheRecording(t *testing.T) {
	d := openPlain(t, DeviceSide)
	tk, err := d.NewTask()
	require.NoError(t, err)
	a, err := d.FromFloat32(1, 2, []float32{1, 2})
	require.NoError(t, err)
	out, err := d.Empty(1, 2, Float32)
	require.NoError(t, err)

	// While fn runs.
	rec, err := tk.Record(func() error {
		if err := tk.ScaleInto(out, 2, a); err != nil {
			return err
		}
		err := a.Free()
		require.ErrorIs(t, err, ErrRecording)
		require.ErrorContains(t, err, "(still recording)")
		return nil
	})
	require.NoError(t, err)
	err = a.Free()
	require.ErrorIs(t, err, ErrRecording)
	require.ErrorContains(t, err, "(1 ops)")
	require.NoError(t, rec.Close())

	// Record's build against another goroutine's Free.
	keep, err := tk.Record(func() error { return tk.ScaleInto(out, 2, a) })
	require.NoError(t, err)
	defer func() { require.NoError(t, keep.Close()) }()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				if err := a.Free(); !errors.Is(err, ErrRecording) {
					t.Errorf("Free of a recorded array: %v", err)
					return
				}
			}
		}
	}()
	for range 200 {
		r, err := tk.Record(func() error { return tk.ScaleInto(out, 2, a) })
		require.NoError(t, err)
		require.NoError(t, r.Close())
	}
	close(stop)
	wg.Wait()
}

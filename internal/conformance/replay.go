package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/testcheck"
)

// allPolicies are the policies in the order the replay and copy suites
// run them.
var allPolicies = []rocsync.Policy{rocsync.DeviceSide, rocsync.SkipSameQueue, rocsync.WaitAlways, rocsync.Unified, rocsync.DeviceBridge}

// What waits on the host inside Record is a typed error; so are a freed
// operand, replaying after Close, and freeing what a recording uses.
func RecordErrors(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide)
	tk, err := d.NewTask()
	require.NoError(t, err)
	x, err := d.FromFloat32(4, 4, testcheck.RandMatrix(3, 4))
	require.NoError(t, err)
	y, err := d.Empty(4, 4, rocsync.Float32)
	require.NoError(t, err)
	freed, err := d.Empty(4, 4, rocsync.Float32)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	var inner []error
	rec, err := tk.Record(func() error {
		require.NoError(t, tk.MulInto(y, x, x))
		inner = append(inner, tk.Synchronize())
		_, derr := tk.DownloadFloat32(y, make([]float32, 16))
		inner = append(inner, derr)
		_, rerr := y.Float32s()
		inner = append(inner, rerr)
		_, nerr := tk.Record(func() error { return nil })
		inner = append(inner, nerr, tk.MulInto(freed, x, x))
		inner = append(inner, rec2Replay(tk))
		return nil
	})
	require.NoError(t, err)
	for i, e := range inner[:4] {
		require.ErrorIs(t, e, rocsync.ErrRecording, "call %d", i)
		var re *rocsync.Error
		require.ErrorAs(t, e, &re)
	}
	require.ErrorIs(t, inner[4], rocsync.ErrFreed)
	require.NoError(t, inner[5])
	// x, read before the recording, can still be read back; y cannot be
	// freed while the recording lives.
	_, err = x.Float32s()
	require.NoError(t, err)
	err = y.Free()
	require.ErrorIs(t, err, rocsync.ErrRecording)
	require.ErrorContains(t, err, rec.String())
	require.NoError(t, rec.Replay())
	require.NoError(t, rec.Close())
	require.NoError(t, rec.Close(), "a second Close returns nil")
	require.ErrorIs(t, rec.Replay(), rocsync.ErrClosed)
	require.NoError(t, y.Free(), "closed: y may be freed")

	// fn's error, and an empty recording, leave nothing recorded or pinned.
	cause := errors.New("stop")
	_, err = tk.Record(func() error { _ = tk.MulInto(x, x, x); return cause })
	require.ErrorIs(t, err, cause)
	_, err = tk.Record(func() error { return nil })
	require.ErrorIs(t, err, rocsync.ErrInvalid)
	_, err = tk.Record(nil)
	require.ErrorIs(t, err, rocsync.ErrInvalid)

	// A recording of a closed task, or device, is ErrClosed.
	rec, err = tk.Record(func() error { return tk.MulInto(x, x, x) })
	require.NoError(t, err)
	require.NoError(t, tk.Close())
	require.ErrorIs(t, rec.Replay(), rocsync.ErrClosed)
	require.NoError(t, rec.Close())
	require.NoError(t, x.Free())
}

// rec2Replay replays a recording inside another Record: refused.
func rec2Replay(tk *rocsync.Task) error {
	var r *rocsync.Recording
	if !errors.Is(r.Replay(), rocsync.ErrInvalid) {
		return errors.New("nil recording replayed")
	}
	return nil
}

// A panic inside Record's function goes on, and leaves the task eager and
// the operands free to be freed.
func RecordPanicLeavesTaskEager(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide)
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	require.PanicsWithValue(t, "boom", func() {
		_, _ = tk.Record(func() error {
			_ = tk.MulInto(x, x, x)
			panic("boom")
		})
	})
	require.NoError(t, tk.MulInto(x, x, x)) // runs now
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9, 16}, got)
	require.NoError(t, x.Free(), "not pinned")
}

// A panic in a library call's function, which Record runs once to capture
// it, goes on like one in fn: the operands are released (Free succeeds),
// no capture is left open and the task works eagerly afterwards.
func RecordLibraryCallPanicReleasesOperands(t *testing.T, be *Backend) {
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := open(t, be, p)
			tk := d.DefaultTask()
			x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			y, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			require.PanicsWithValue(t, "library boom", func() {
				_, _ = tk.Record(func() error {
					if err := tk.MulInto(y, y, y); err != nil {
						return err
					}
					return tk.LibraryCall([]rocsync.Arg{rocsync.InOut(x)}, func(uintptr) error { panic("library boom") })
				})
			})
			require.NoError(t, tk.MulInto(y, y, y)) // runs now
			got, err := y.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{1, 4, 9, 16}, got)
			require.NoError(t, x.Free(), "not pinned")
			require.NoError(t, y.Free(), "not pinned")
			require.NoError(t, d.Close())
		})
	}
}

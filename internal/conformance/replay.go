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

// A ReplayProgram writes its results into arrays it is given (outs[0] is
// the result), so that one recording can be replayed and its results
// compared with the same program run eagerly into other arrays.
type ReplayProgram struct {
	Name string
	Outs int
	Run  func(tk *rocsync.Task, x *rocsync.Array, o []*rocsync.Array) error
}

// ReplaySeedPrograms are the seed programs as replay programs.
var ReplaySeedPrograms = []ReplayProgram{
	{"matmul", 3, func(tk *rocsync.Task, x *rocsync.Array, o []*rocsync.Array) error {
		return errors.Join(tk.MatMulInto(o[1], x, x, false, false), tk.MatMulInto(o[2], x, o[1], false, false),
			tk.MatMulInto(o[0], x, o[2], false, false))
	}},
	{"elementwise", 3, func(tk *rocsync.Task, x *rocsync.Array, o []*rocsync.Array) error {
		return errors.Join(tk.MulInto(o[1], x, x), tk.MulInto(o[2], x, o[1]), tk.MulInto(o[0], x, o[2]))
	}},
	{"mixed", 2, func(tk *rocsync.Task, x *rocsync.Array, o []*rocsync.Array) error {
		return errors.Join(tk.MulInto(o[1], x, x), tk.MatMulInto(o[0], o[1], x, false, false))
	}},
}

// ReplayOuts allocates a program's arrays (outs[0] 1×1 for the chain's
// sum).
func ReplayOuts(t *testing.T, d *rocsync.Device, p ReplayProgram, n int) []*rocsync.Array {
	o := make([]*rocsync.Array, p.Outs)
	for i := range o {
		r, c := n, n
		if p.Name == "chain" && i == 0 {
			r, c = 1, 1
		}
		a, err := d.Empty(r, c, rocsync.Float32)
		require.NoError(t, err)
		o[i] = a
	}
	return o
}

// CheckReplayEqualsEager records p once and, iters times, uploads a new x
// (outside the recording), runs p eagerly into one set of arrays and
// replays the recording into another, and requires equal results.
func CheckReplayEqualsEager(t *testing.T, be *Backend, d *rocsync.Device, tk *rocsync.Task, p ReplayProgram, n, iters int) {
	x, err := d.Empty(n, n, rocsync.Float32)
	require.NoError(t, err)
	require.NoError(t, tk.UploadFloat32(x, testcheck.RandMatrix(1, n)))
	eager, replayed := ReplayOuts(t, d, p, n), ReplayOuts(t, d, p, n)
	rec, err := tk.Record(func() error { return p.Run(tk, x, replayed) })
	require.NoError(t, err)
	defer func() { require.NoError(t, rec.Close()) }()
	require.Positive(t, rec.Ops())
	var launches0 uint64
	if d.Emulated() {
		launches0 = be.Internals.GraphLaunches(d)
	}
	for it := range iters {
		host := testcheck.RandMatrix(uint64(10+it), n)
		for i := range host {
			host[i] *= 0.5
		}
		require.NoError(t, tk.UploadFloat32(x, host))
		require.NoError(t, p.Run(tk, x, eager))
		require.NoError(t, rec.Replay())
		want, err := eager[0].Float32s()
		require.NoError(t, err)
		got, err := replayed[0].Float32s()
		require.NoError(t, err)
		if !be.InexactReplay {
			require.Equal(t, want, got, "iteration %d", it)
		} else {
			// A GPU BLAS may pick another algorithm inside a graph.
			testcheck.RequireClose(t, widen(want), got, 1e-5)
		}
	}
	// Replayed arrays cannot be freed while the recording lives.
	require.ErrorIs(t, replayed[0].Free(), rocsync.ErrRecording)
	if d.Emulated() {
		requireHIPGraphReplay(t, be, d, rec, launches0, iters)
	}
}

// requireHIPGraphReplay checks, on the emulator, that every HIP stream
// segment of rec was captured into a hipGraph (none fell back to the
// in-order calls) and that each of the iters replays launched each graph
// once.
func requireHIPGraphReplay(t *testing.T, be *Backend, d *rocsync.Device, rec *rocsync.Recording, launches0 uint64, iters int) {
	t.Helper()
	graphs, fallbacks := rec.Graphs()
	require.Empty(t, fallbacks, "segments not captured into a hipGraph")
	require.Equal(t, be.Internals.StreamSegments(d, rec), graphs)
	if d.Policy() == rocsync.Unified {
		require.Positive(t, graphs, "under Unified every recorded op is on the HIP stream")
	}
	require.EqualValues(t, graphs*iters, be.Internals.GraphLaunches(d)-launches0, "hipGraphLaunch count")
}

func widen(v []float32) []float64 {
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	return w
}

// Replaying a recording of each seed program gives what the program gave
// eagerly, under every policy.
func ReplayEqualsEager(t *testing.T, be *Backend) {
	for _, p := range ReplaySeedPrograms {
		for _, pol := range allPolicies {
			t.Run(p.Name+"/"+pol.String(), func(t *testing.T) {
				d := open(t, be, pol)
				tk, err := d.NewTask()
				require.NoError(t, err)
				CheckReplayEqualsEager(t, be, d, tk, p, 32, 4)
				require.NoError(t, tk.Close())
			})
		}
	}
}

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

package rocsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/rocmdev"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/queue"
)

// kindIs asserts that err is an *Error of kind k at its top.
func kindIs(t *testing.T, err error, k error) {
	t.Helper()
	var e *Error
	require.True(t, errors.As(err, &e), "not an *Error: %v", err)
	require.Equal(t, k, e.Kind, "%v", err)
}

// A host function's error is a failure of the work, whatever it wraps: a
// timeout, a context's deadline, os.ErrDeadlineExceeded, an ErrTimeout
// error of rocsync's own. Waits report ErrFault, and Close closes the
// device (a failure does not keep it open; only a wait that runs out of
// time does).
func TestHostFuncErrorWrappingATimeoutIsAFault(t *testing.T) {
	causes := map[string]error{
		"context":  fmt.Errorf("step: %w", context.DeadlineExceeded),
		"os":       fmt.Errorf("step: %w", os.ErrDeadlineExceeded),
		"rocsync":  &Error{Op: "Synchronize", Kind: ErrTimeout, Detail: "a nested wait"},
		"canceled": fmt.Errorf("step: %w", context.Canceled),
	}
	for name, cause := range causes {
		t.Run(name, func(t *testing.T) {
			d := openFaulty(t, DeviceSide)
			tk := d.DefaultTask()
			y, err := d.Empty(2, 2, Float32)
			require.NoError(t, err)
			require.NoError(t, tk.HostFunc([]Arg{Out(y)}, func(*HostAccess) error { return cause }))
			err = within(t, "Synchronize", tk.Synchronize)
			require.ErrorIs(t, err, cause)
			kindIs(t, err, ErrFault)
			err = within(t, "read-back", func() error { _, e := y.Float32s(); return e })
			kindIs(t, err, ErrFault)
			err = within(t, "Close", d.Close)
			if err != nil {
				kindIs(t, err, ErrFault)
			}
			_, err = d.Empty(1, 1, Float32)
			require.ErrorIs(t, err, ErrClosed, "the device stayed open")
			require.Empty(t, d.Hazards())
		})
	}
}

// An op that must wait on the host for a slow host function, past
// WaitTimeout, fails with ErrTimeout: the wait ran out of time, the work
// did not fail. Nothing was submitted and nothing is poisoned; once the
// function returns, the output still holds what it held and the op runs.
func TestWaitForSlowHostFuncTimesOut(t *testing.T) {
	// SkipSameQueue waits on the host for a host function before a GPU op.
	d := openFaulty(t, SkipSameQueue, func(o *Options) { o.WaitTimeout = 50 * time.Millisecond })
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 1, 1, 1})
	require.NoError(t, err)
	y, err := d.FromFloat32(2, 2, []float32{3, 3, 3, 3})
	require.NoError(t, err)
	gate := make(chan struct{})
	require.NoError(t, tk.HostFunc([]Arg{InOut(x)}, func(*HostAccess) error { <-gate; return nil }))
	err = within(t, "Scale", func() error { return tk.ScaleInto(y, 2, x) })
	require.ErrorIs(t, err, ErrTimeout)
	require.NotErrorIs(t, err, ErrFault)
	kindIs(t, err, ErrTimeout)
	require.NoError(t, y.Err(), "an op that was not submitted poisons nothing")
	close(gate)
	require.NoError(t, within(t, "Synchronize", tk.Synchronize))
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{3, 3, 3, 3}, got)
	require.NoError(t, tk.ScaleInto(y, 2, x))
	got, err = y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{2, 2, 2, 2}, got)
	require.NoError(t, d.Close())
	require.Empty(t, d.Hazards())
}

// bufferWith returns a new buffer holding data, its upload complete.
func bufferWith(t *testing.T, d *Device, tk *Task, data []byte) *Buffer {
	t.Helper()
	b, err := d.NewBuffer(len(data))
	require.NoError(t, err)
	require.NoError(t, tk.Upload(b, data))
	require.NoError(t, tk.Synchronize())
	return b
}

func requireHolds(t *testing.T, b *Buffer, want []byte, msg string) {
	t.Helper()
	got, err := b.Bytes()
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "%s does not hold what was uploaded", msg)
}

// Under WaitAlways with SyncDebugFail, an upload's own wait is refused:
// the upload is not submitted (nothing changes), and its staging slot
// carries no copy that a later upload could overwrite.
func TestRefusedUploadIsNotSubmitted(t *testing.T) {
	d := openFaulty(t, WaitAlways, func(o *Options) { o.SyncDebug = SyncDebugFail })
	defer d.Close()
	tk := d.DefaultTask()
	zero := make([]byte, 4096)
	a, err := d.NewBuffer(len(zero))
	require.NoError(t, err)
	b, err := d.NewBuffer(len(zero))
	require.NoError(t, err)
	release := d.machine().Hold()
	require.ErrorIs(t, tk.Upload(a, randomBytes(len(zero), 1)), ErrHostWait)
	require.ErrorIs(t, tk.Upload(b, randomBytes(len(zero), 2)), ErrHostWait)
	release()
	require.NoError(t, within(t, "Synchronize", d.Synchronize))
	for _, x := range []*Buffer{a, b} {
		got := make([]byte, len(zero))
		p, err := tk.Download(x, got)
		require.ErrorIs(t, err, ErrHostWait, "a download's WaitAlways wait is refused too")
		require.Nil(t, p)
	}
	require.Empty(t, d.Hazards())
	require.Zero(t, d.Stats().Dispatches, "a refused op was submitted")
}

// An upload or download whose launch-blocking wait times out was
// submitted: its staging slot goes back to the pool behind the copy's
// fence, so the next copy does not overwrite (or read) it under the
// copy. Every copy delivers its own bytes.
func TestStagingAfterATimedOutWait(t *testing.T) {
	d := openFaulty(t, DeviceSide, func(o *Options) { o.LaunchBlocking, o.WaitTimeout = true, 50*time.Millisecond })
	defer d.Close()
	tk := d.DefaultTask()
	const n = 4096
	wantA, wantB, wantC := randomBytes(n, 3), randomBytes(n, 4), randomBytes(n, 5)
	a := bufferWith(t, d, tk, wantA)
	b, err := d.NewBuffer(n)
	require.NoError(t, err)
	c, err := d.NewBuffer(n)
	require.NoError(t, err)
	release := d.machine().Hold()
	got := make([]byte, n)
	err = within(t, "Download", func() error { _, e := tk.Download(a, got); return e })
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, within(t, "Upload b", func() error { return tk.Upload(b, wantB) }), ErrTimeout)
	require.ErrorIs(t, within(t, "Upload c", func() error { return tk.Upload(c, wantC) }), ErrTimeout)
	release()
	require.NoError(t, within(t, "Synchronize", d.Synchronize))
	requireHolds(t, a, wantA, "a")
	requireHolds(t, b, wantB, "b")
	requireHolds(t, c, wantC, "c")
	require.Empty(t, d.Hazards())
}

// A read-back does not hold its array while it waits: an op of another
// task that reads the array, ordered on the device (no host wait), is
// submitted while the read-back still waits for the writer.
func TestReadBackDoesNotBlockOtherTasks(t *testing.T) {
	d := openFaulty(t, DeviceSide)
	defer d.Close()
	tasks := newTasks(t, d, 2)
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	z, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	release := d.machine().Hold()
	defer release()
	require.NoError(t, tasks[0].ScaleInto(y, 2, x))
	before := d.Stats().HostWaitsFor(ReasonReadBack)
	done := make(chan error, 1)
	var got []float32
	go func() {
		var err error
		got, err = y.Float32s()
		done <- err
	}()
	for d.Stats().HostWaitsFor(ReasonReadBack) == before {
		runtime.Gosched() // until the read-back waits
	}
	require.NoError(t, within(t, "an op ordered on the device behind a read-back", func() error { return tasks[1].AddInto(z, y, y) }))
	release()
	require.NoError(t, within(t, "the read-back", func() error { return <-done }))
	require.Equal(t, []float32{2, 4, 6, 8}, got)
	gz, err := z.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{4, 8, 12, 16}, gz)
	require.Empty(t, d.Hazards())
}

// recovered runs fn and returns what it panicked with (nil: no panic).
func recovered(fn func()) (v any) {
	defer func() { v = recover() }()
	fn()
	return nil
}

// A LibraryCall whose function panics, recovered by its caller, leaves
// its operands usable: the panic goes on, the call's output is poisoned
// (the function may have enqueued part of its work), and read-backs,
// later ops, Free and Close do not hang. The same holds for a replayed
// recording of such a call.
func TestLibraryCallPanicReleasesOperands(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("replay=%v", replay), func(t *testing.T) {
			d := openFaulty(t, DeviceSide)
			tk := d.DefaultTask()
			x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			y, err := d.Empty(2, 2, Float32)
			require.NoError(t, err)
			armed := !replay
			call := func() error {
				return tk.LibraryCall([]Arg{In(x), Out(y)}, func(uintptr) error {
					if armed {
						panic("boom")
					}
					return nil
				})
			}
			if replay {
				// A replay that reissues its recorded calls runs the
				// function again (a captured graph does not).
				testhooks.SkipHIPCapture.Store(true)
				defer testhooks.SkipHIPCapture.Store(false)
				rec, err := tk.Record(call)
				require.NoError(t, err)
				defer func() { _ = within(t, "Recording.Close", rec.Close) }()
				armed = true
				call = rec.Replay
			}
			require.Equal(t, "boom", recovered(func() { _ = call() }))
			err = within(t, "read-back of the output", func() error { _, e := y.Float32s(); return e })
			require.ErrorIs(t, err, ErrFault)
			got, err := within2(t, "read-back of the input", x.Float32s)
			require.NoError(t, err)
			require.Equal(t, []float32{1, 2, 3, 4}, got)
			require.NoError(t, within(t, "Fill", func() error { return tk.Fill(y, 7) }))
			got, err = within2(t, "read-back after Fill", y.Float32s)
			require.NoError(t, err)
			require.Equal(t, []float32{7, 7, 7, 7}, got)
			require.NoError(t, within(t, "Synchronize", tk.Synchronize))
			require.Empty(t, d.Hazards())
			if !replay {
				require.NoError(t, within(t, "Free", y.Free))
			}
		})
	}
}

// within2 is within for a function of two results.
func within2[T any](t *testing.T, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	type res struct {
		v   T
		err error
	}
	r := within(t, what, func() res { v, err := fn(); return res{v, err} })
	return r.v, r.err
}

// hsaQueueOf is the HSA queue a task's kernels go to.
func hsaQueueOf(t *testing.T, tk *Task) any {
	t.Helper()
	_, ok := tk.drv.(*rocmdev.Task)
	require.True(t, ok, "not a ROCm task")
	q, ok := tk.drv.Timeline(driver.LaneKernel).(*queue.Queue) // nil under Unified
	require.True(t, ok, "no HSA queue")
	require.NotNil(t, q)
	return q
}

// A task whose Close ran out of time leaves its HSA queue out of the
// pool: a new task gets another queue, not one whose work may never end.
func TestTimedOutTaskCloseRetiresItsQueue(t *testing.T) {
	d := openFaulty(t, DeviceSide, func(o *Options) { o.WaitTimeout = 50 * time.Millisecond })
	stuck, err := d.NewTask()
	require.NoError(t, err)
	x, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	q := hsaQueueOf(t, stuck)
	release := d.machine().Hold()
	defer release()
	require.NoError(t, stuck.Fill(x, 1))
	require.ErrorIs(t, within(t, "Close", stuck.Close), ErrTimeout)
	next, err := d.NewTask()
	require.NoError(t, err)
	require.NotSame(t, q, hsaQueueOf(t, next), "the new task inherited the stuck queue")
	release()
	require.NoError(t, next.Fill(x, 2))
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{2, 2, 2, 2}, got)
	require.NoError(t, d.Close())
	require.Empty(t, d.Hazards())
}

// A copy between GPUs from a poisoned source fails with ErrFault and
// poisons its destination, staged through host memory as well as direct.
func TestCopyPeerFromPoisonedSourcePoisonsDestination(t *testing.T) {
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			devs := openPeers(t, DeviceSide, 2, func(o *Options) { o.test.StagePeerCopies = staged })
			defer func() {
				for _, d := range devs {
					_ = d.Close()
				}
			}()
			if devs[0].machine() == nil {
				t.Skip("injects a fault on the emulator")
			}
			tk0, tk1 := devs[0].DefaultTask(), devs[1].DefaultTask()
			a, err := devs[0].FromFloat32(2, 2, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			src, err := devs[0].Empty(2, 2, Float32)
			require.NoError(t, err)
			dst, err := devs[1].FromFloat32(2, 2, []float32{9, 9, 9, 9})
			require.NoError(t, err)
			faultOn(devs[0], faultOps[0].symbol)
			require.NoError(t, tk0.MulInto(src, a, a))
			require.ErrorIs(t, within(t, "Synchronize", tk0.Synchronize), ErrFault)
			devs[0].machine().SetFaultInjector(nil)
			require.ErrorIs(t, src.Err(), ErrFault)
			require.ErrorIs(t, within(t, "CopyPeer", func() error { return tk1.CopyPeer(dst, src) }), ErrFault)
			require.ErrorIs(t, dst.Err(), ErrFault, "the destination is not poisoned")
			_, err = within2(t, "read-back", dst.Float32s)
			require.ErrorIs(t, err, ErrFault)
			for _, d := range devs {
				require.Empty(t, d.Hazards())
			}
		})
	}
}

// waitFor yields until cond holds (a condition another goroutine makes
// true; no timing).
func waitFor(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

// requireConcurrentUse asserts err is the typed error of op called while
// other ran on the task.
func requireConcurrentUse(t *testing.T, err error, op, other string) {
	t.Helper()
	require.ErrorIs(t, err, ErrConcurrentUse)
	var ce *ConcurrentUseError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, ConcurrentUseError{Op: op, Other: other}, *ce)
	kindIs(t, err, ErrConcurrentUse)
}

// A call on a Task while another goroutine's call runs on it fails at
// once with ErrConcurrentUse naming both ops; the running call is not
// disturbed.
func TestConcurrentTaskUseIsDetected(t *testing.T) {
	d := openFaulty(t, DeviceSide)
	defer d.Close()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	release := d.machine().Hold()
	defer release()
	require.NoError(t, tk.ScaleInto(y, 2, x))
	before := d.Stats().HostWaitsFor(ReasonSync)
	done := make(chan error, 1)
	go func() { done <- tk.Synchronize() }()
	waitFor(func() bool { return d.Stats().HostWaitsFor(ReasonSync) > before })
	_, err = tk.Mul(x, x)
	requireConcurrentUse(t, err, "Mul", "Synchronize")
	requireConcurrentUse(t, tk.Upload(y, make([]byte, 16)), "Upload", "Synchronize")
	release()
	require.NoError(t, within(t, "Synchronize", func() error { return <-done }))
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{2, 4, 6, 8}, got)
	require.Empty(t, d.Hazards())
}

// One Recording replayed by two goroutines at once: the second replay
// fails with ErrConcurrentUse, the first completes.
func TestConcurrentReplayIsDetected(t *testing.T) {
	d := openFaulty(t, DeviceSide, func(o *Options) { o.LaunchBlocking = true })
	defer d.Close()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := d.Empty(2, 2, Float32)
	require.NoError(t, err)
	rec, err := tk.Record(func() error { return tk.AddInto(y, x, x) })
	require.NoError(t, err)
	defer rec.Close()
	release := d.machine().Hold()
	defer release()
	before := d.Stats().HostWaitsFor(ReasonLaunchBlocking)
	done := make(chan error, 1)
	go func() { done <- rec.Replay() }()
	waitFor(func() bool { return d.Stats().HostWaitsFor(ReasonLaunchBlocking) > before })
	requireConcurrentUse(t, rec.Replay(), replayName, replayName)
	requireConcurrentUse(t, rec.Close(), "Recording.Close", replayName)
	release()
	require.NoError(t, within(t, "Replay", func() error { return <-done }))
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{2, 4, 6, 8}, got)
	require.Empty(t, d.Hazards())
}

// Two goroutines that share a Task by mistake never get a wrong result
// or a panic: each op either runs or fails with ErrConcurrentUse (and is
// then retried here).
func TestSharedTaskNeverCorrupts(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			d := openFaulty(t, p)
			defer d.Close()
			tk := d.DefaultTask()
			one, err := d.FromFloat32(1, 64, make([]float32, 64))
			require.NoError(t, err)
			require.NoError(t, tk.Fill(one, 1))
			const workers, rounds = 4, 50
			arrays := make([]*Array, workers)
			for i := range arrays {
				arrays[i], err = tk.Full(1, 64, Float32, 0)
				require.NoError(t, err)
			}
			require.NoError(t, tk.Synchronize())
			errs := make(chan error, workers)
			for w := range workers {
				go func() {
					for range rounds {
						for {
							err := tk.AddInto(arrays[w], arrays[w], one)
							if errors.Is(err, ErrConcurrentUse) {
								runtime.Gosched()
								continue
							}
							if err != nil {
								errs <- err
								return
							}
							break
						}
					}
					errs <- nil
				}()
			}
			for range workers {
				require.NoError(t, within(t, "a worker", func() error { return <-errs }))
			}
			require.NoError(t, tk.Synchronize())
			for _, a := range arrays {
				got, err := a.Float32s()
				require.NoError(t, err)
				for _, v := range got {
					require.Equal(t, float32(rounds), v)
				}
			}
			require.Empty(t, d.Hazards())
		})
	}
}

// A host function that waits on the host for its own task's work
// (Synchronize, the device's Synchronize, a read-back of what it writes,
// a download's Wait, Close) gets an ErrInvalid error at once instead of
// waiting for itself until WaitTimeout.
func TestHostFuncWaitingForItselfFailsAtOnce(t *testing.T) {
	d := openFaulty(t, DeviceSide)
	defer d.Close()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	calls := map[string]func() error{
		"Task.Synchronize":   tk.Synchronize,
		"Device.Synchronize": d.Synchronize,
		"read-back":          func() error { _, err := x.Float32s(); return err },
		"Device.Close":       d.Close,
	}
	for name, call := range calls {
		got := make(chan error, 1)
		require.NoError(t, tk.HostFunc([]Arg{InOut(x)}, func(*HostAccess) error {
			got <- call()
			return nil
		}))
		err := within(t, name+" inside a host function", func() error { return <-got })
		require.ErrorIs(t, err, ErrInvalid, name)
		require.Contains(t, err.Error(), "host function", name)
		require.NoError(t, within(t, "Synchronize", tk.Synchronize), name)
	}
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2, 3, 4}, got)
	require.Empty(t, d.Hazards())
}

// A device run-ahead cap wait that sync-debug refuses leaves the op
// unsubmitted: nothing is dispatched, and the array holds the sum of the
// ops that were.
func TestRefusedRunAheadCapWaitIsNotSubmitted(t *testing.T) {
	d := openFaulty(t, DeviceSide, func(o *Options) { o.MaxInFlightPerDevice, o.SyncDebug = 4, SyncDebugFail })
	defer d.Close()
	tk := d.DefaultTask()
	one, err := d.FromFloat32(1, 4, []float32{1, 1, 1, 1})
	require.NoError(t, err)
	x, err := d.FromFloat32(1, 4, make([]float32, 4))
	require.NoError(t, err)
	release := d.machine().Hold()
	defer release()
	ran := 0
	for {
		before := d.Stats().Dispatches
		err := tk.AddInto(x, x, one)
		if err != nil {
			require.ErrorIs(t, err, ErrHostWait)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, "Add", e.Op, "the error names the op, as its other errors do")
			require.Equal(t, before, d.Stats().Dispatches, "the refused op was submitted")
			break
		}
		ran++
		require.Less(t, ran, 100, "the cap never acted")
	}
	release()
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{float32(ran), float32(ran), float32(ran), float32(ran)}, got)
	require.Empty(t, d.Hazards())
}

package rocsync

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/syncstate"
)

// An op submitted from inside a host function whose submission would
// host-wait for the function's own lane (a copy or library call behind
// it on the stream, an ordering wait for what it writes, the lane's own
// throttle) is an ErrInvalid error at once, matching
// syncstate.ErrSelfWait, and changes nothing: it used to block until
// WaitTimeout, and for ever without one. The bound here is only there so
// that the old code fails instead of hanging the test binary.
func TestOpsInsideAHostFunctionThatWouldWaitForItAreRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		op   func(d *Device, tk *Task, out *Array) error
	}{
		{"Upload into its output", Options{}, func(_ *Device, tk *Task, out *Array) error {
			return tk.UploadFloat32(out, []float32{5, 6, 7, 8})
		}},
		{"Download of its output", Options{}, func(_ *Device, tk *Task, out *Array) error {
			_, err := tk.DownloadFloat32(out, make([]float32, 4))
			return err
		}},
		{"LibraryCall reading its output", Options{}, func(_ *Device, tk *Task, out *Array) error {
			return tk.LibraryCall([]Arg{In(out)}, func(uintptr) error { return errors.New("the call ran") })
		}},
		{"MatMul of its output on HIP 5.2", Options{Emulator: EmulatorOptions{HIPVersion: 50221153}}, func(_ *Device, tk *Task, out *Array) error {
			_, err := tk.MatMul(out, out, false, false)
			return err
		}},
		{"HostFunc behind it, MaxInFlight 1", Options{MaxInFlight: 1}, func(_ *Device, tk *Task, _ *Array) error {
			return tk.HostFunc(nil, func(*HostAccess) error { return errors.New("the function ran") })
		}},
		{"SkipSameQueue, Add of its output on another task", Options{Policy: SkipSameQueue}, func(d *Device, _ *Task, out *Array) error {
			other, err := d.NewTask()
			if err != nil {
				return err
			}
			_, err = other.Add(out, out)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			o.Backend, o.LogLevel, o.WaitTimeout = Emulator, LogOff, time.Minute
			d, err := Open(o)
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			tk, err := d.NewTask()
			require.NoError(t, err)
			out, err := d.Empty(2, 2, Float32)
			require.NoError(t, err)
			inner := make(chan error, 1)
			require.NoError(t, tk.HostFunc([]Arg{Out(out)}, func(h *HostAccess) error {
				if err := h.SetFloat32s(out, []float32{1, 2, 3, 4}); err != nil {
					return err
				}
				inner <- c.op(d, tk, out)
				return nil
			}))
			err = <-inner
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, err, syncstate.ErrSelfWait)
			// The refused op changed nothing: the function's result stands.
			require.NoError(t, tk.Synchronize())
			got, err := out.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{1, 2, 3, 4}, got)
		})
	}
}

// A wait that a driver makes before it enqueues an op (for the host
// functions a copy or library call must follow, the lane's throttle),
// ended by WaitTimeout, is ErrTimeout and changes nothing, as an ordering
// wait's end is: it was ErrUnavailable or ErrFault, and an Upload poisoned
// its destination, losing what the host function wrote there.
func TestSubmissionWaitsThatTimeOutAreErrTimeoutAndPoisonNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		op   func(tk *Task, x *Array) error
	}{
		{"Upload", Options{}, func(tk *Task, x *Array) error { return tk.UploadFloat32(x, []float32{5, 6, 7, 8}) }},
		{"Download", Options{}, func(tk *Task, x *Array) error {
			_, err := tk.DownloadFloat32(x, make([]float32, 4))
			return err
		}},
		{"LibraryCall", Options{}, func(tk *Task, x *Array) error {
			return tk.LibraryCall([]Arg{InOut(x)}, func(uintptr) error { return errors.New("the call ran") })
		}},
		{"HostFunc behind the throttle", Options{MaxInFlight: 1}, func(tk *Task, x *Array) error {
			return tk.HostFunc([]Arg{InOut(x)}, func(*HostAccess) error { return errors.New("the function ran") })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			o.Backend, o.LogLevel, o.WaitTimeout = Emulator, LogOff, 50*time.Millisecond
			d, err := Open(o)
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			tk := d.DefaultTask()
			x, err := d.FromFloat32(1, 4, []float32{0, 0, 0, 0})
			require.NoError(t, err)
			release := make(chan struct{})
			// A host function that writes x and returns only once the op
			// below has given up waiting for it.
			require.NoError(t, tk.HostFunc([]Arg{Out(x)}, func(h *HostAccess) error {
				<-release
				return h.SetFloat32s(x, []float32{1, 2, 3, 4})
			}))
			err = c.op(tk, x)
			close(release)
			require.ErrorIs(t, err, ErrTimeout, "%v", err)
			require.NoError(t, tk.Synchronize())
			got, err := x.Float32s()
			require.NoError(t, err, "the op that was never submitted poisoned x")
			require.Equal(t, []float32{1, 2, 3, 4}, got)
		})
	}
}

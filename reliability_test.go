package rocsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

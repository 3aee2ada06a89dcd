package rocsync

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Launch-blocking mode reports a fault from the op that caused it; without
// it the faulting op returns nil and the fault surfaces at a later wait.
func TestLaunchBlockingReportsTheFaultingOp(t *testing.T) {
	for _, mode := range []string{"off", "option", "env"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "env" {
				t.Setenv("ROCSYNC_LAUNCH_BLOCKING", "1")
			}
			d := openFaulty(t, DeviceSide, func(o *Options) { o.LaunchBlocking = mode == "option" })
			defer func() { _ = d.Close() }()
			tk := d.DefaultTask()
			x, err := d.FromFloat32(4, 4, randMatrix(8, 4))
			require.NoError(t, err)
			faultOn(d, "rocsync_mul_f32")
			_, err = tk.Mul(x, x)
			if mode == "off" {
				require.NoError(t, err, "the fault is not known yet")
				require.ErrorIs(t, tk.Synchronize(), ErrFault)
				return
			}
			require.ErrorIs(t, err, ErrFault)
			require.Contains(t, err.Error(), "Mul")
			require.Contains(t, err.Error(), "MEMORY_FAULT")
			require.NotZero(t, tk.Stats().HostWaits[ReasonLaunchBlocking])
		})
	}
}

// Sync-debug mode names implicit host waits (op, crossing, reason): warn
// logs them, fail refuses them; read-backs and Synchronize are exempt.
func TestSyncDebugNamesImplicitHostWaits(t *testing.T) {
	var buf bytes.Buffer
	// At debug level every decision would be logged.
	d, err := Open(Options{Backend: Emulator, SyncDebug: SyncDebugWarn, LogHandler: jsonLog(&buf, slog.LevelWarn)})
	require.NoError(t, err)
	tk := d.DefaultTask()
	x, _ := d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	sq, err := tk.Mul(x, x)
	require.NoError(t, err)
	buf.Reset()
	_, err = sq.Float32s()
	require.NoError(t, err)
	require.NoError(t, tk.Synchronize())
	require.Empty(t, buf.String(), "read-back and Synchronize are not reported")
	release := d.machine().Hold() // the kernel is still pending at the gemm
	go func() { time.Sleep(30 * time.Millisecond); release() }()
	sq2, err := tk.Mul(x, x)
	require.NoError(t, err)
	y, err := tk.MatMul(sq2, x, false, false)
	require.NoError(t, err)
	require.Contains(t, buf.String(), `"op":"MatMul"`)
	require.Contains(t, buf.String(), `"reason":"boundary"`)
	require.Contains(t, buf.String(), "hsa-q0#")
	require.Contains(t, buf.String(), "-> gpu0/hip-s")
	_, err = y.Float32s()
	require.NoError(t, err)
	require.NoError(t, d.Close())

	d, err = Open(Options{Backend: Emulator, SyncDebug: SyncDebugFail, LogLevel: LogOff})
	require.NoError(t, err)
	defer d.Close()
	tk = d.DefaultTask()
	x, _ = d.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	release = d.machine().Hold()
	sq, err = tk.Mul(x, x)
	require.NoError(t, err)
	c, _ := d.Empty(2, 2, Float32)
	require.NoError(t, tk.Fill(c, 5))
	err = tk.MatMulInto(c, sq, x, false, false)
	release()
	require.ErrorIs(t, err, ErrHostWait)
	require.NoError(t, c.Err(), "a refused wait poisons nothing")
	require.Contains(t, err.Error(), "boundary host wait for gpu0/hsa-q0#")
	_, err = sq.Float32s()
	require.NoError(t, err, "read-backs are allowed")
	require.NoError(t, tk.Synchronize())
}

// Sync-debug reports throttle waits too: a task running past MaxInFlight.
func TestSyncDebugReportsThrottleWaits(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, SyncDebug: SyncDebugFail, MaxInFlight: 4, LogLevel: LogOff})
	require.NoError(t, err)
	defer d.Close()
	tk := d.DefaultTask()
	x, _ := d.Empty(4, 4, Float32)
	release := d.machine().Hold()
	defer release()
	var refused error
	for i := 0; i < 10 && refused == nil; i++ {
		refused = tk.Fill(x, float64(i))
	}
	require.ErrorIs(t, refused, ErrHostWait)
	require.Contains(t, refused.Error(), "throttle")
	var e *Error
	require.ErrorAs(t, refused, &e)
	require.Equal(t, "Fill", e.Op, "the error names the function called, not the throttle's hook")
	require.NoError(t, x.Err(), "a refused wait poisons nothing")
}

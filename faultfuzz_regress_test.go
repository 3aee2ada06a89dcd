package rocsync

// Regression tests for what the fault fuzzer (TestFuzzFaults) found.

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A fault reaches a host wait through a chain of DeviceBridge crossings
// that alternate between the domains: gemm (faults, stream A) → kernel
// (queue B) → gemm (stream C) → kernel (queue D) → host. Stream C never
// fails on its own: it waits on the device for queue B's signal, and
// queue B waits for the signal stream A was to write after the gemm, which
// A, broken, never writes. Only A's failure, learned by asking A, releases
// the chain; the host waits on D, two crossings away from A. It hung
// (fuzz seed 16 under DeviceBridge) while waiters asked only the
// producers they waited for directly.
func TestFaultReachesHostThroughBridgeChain(t *testing.T) {
	d := openFaulty(t, DeviceBridge)
	defer func() { _ = within(t, "Close", d.Close) }()
	var tasks [4]*Task
	for i := range tasks {
		var err error
		tasks[i], err = d.NewTask()
		require.NoError(t, err)
	}
	x, err := d.FromFloat32(4, 4, randMatrix(21, 4))
	require.NoError(t, err)
	var out [4]*Array
	for i := range out {
		out[i], err = d.Empty(4, 4, Float32)
		require.NoError(t, err)
	}
	release := d.machine.Hold()
	faulted := false
	d.machine.SetFaultInjector(func(op string) bool {
		if op == "rocblas_sgemm" && !faulted {
			faulted = true
			return true
		}
		return false
	})
	require.NoError(t, tasks[0].MatMulInto(out[0], x, x, false, false)) // faults
	require.NoError(t, tasks[1].MulInto(out[1], out[0], x))             // waits for it on the device
	require.NoError(t, tasks[2].MatMulInto(out[2], out[1], x, false, false))
	require.NoError(t, tasks[3].MulInto(out[3], out[2], x))
	release()
	err = within(t, "Synchronize of the last task of the chain", tasks[3].Synchronize)
	require.ErrorIs(t, err, ErrFault)
	err = within(t, "the read-back at the end of the chain", func() error { _, err := out[3].Float32s(); return err })
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, out[3].Err(), ErrFault)
	require.Empty(t, d.Hazards())
}

package rocsync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/kernels"
)

// within runs fn and fails the test if it does not return in testcheck.HangLimit.
func within[T any](t *testing.T, what string, fn func() T) T {
	t.Helper()
	return testcheck.Within(t, what, fn)
}

// openFaulty opens an emulated device whose fault injector the test
// controls.
func openFaulty(t *testing.T, p Policy, mod ...func(*Options)) *Device {
	t.Helper()
	o := Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 11}}
	for _, f := range mod {
		f(&o)
	}
	d, err := Open(o)
	require.NoError(t, err)
	return d
}

// newTasks opens n tasks on d.
func newTasks(t *testing.T, d *Device, n int) []*Task {
	t.Helper()
	tasks := make([]*Task, n)
	for i := range tasks {
		var err error
		tasks[i], err = d.NewTask()
		require.NoError(t, err)
	}
	return tasks
}

// requireReleasedInOrder checks the end of a broken-queue-or-stream
// ordering test: tasks[1] (the faulted one) fails first; tasks[2] (the
// reader of b) must still wait for tasks[0] (the producer, held on slow)
// and then fail; the producer succeeds; Close finds no hazard.
func requireReleasedInOrder(t *testing.T, d *Device, tasks []*Task, b *Array, slow chan struct{}) {
	t.Helper()
	require.ErrorIs(t, within(t, "Synchronize of the faulted task", tasks[1].Synchronize), ErrFault)
	time.Sleep(20 * time.Millisecond)
	close(slow)
	require.ErrorIs(t, within(t, "Synchronize of the reader", tasks[2].Synchronize), ErrFault)
	require.ErrorIs(t, b.Err(), ErrFault)
	require.NoError(t, within(t, "Synchronize of the producer", tasks[0].Synchronize))
	_ = within(t, "Close", d.Close)
	require.Empty(t, d.Hazards())
}

func faultOn(d *Device, op string) {
	d.machine().SetFaultInjector(func(o string) bool { return o == op })
}

// producer and consumer ops for the fault tests: a kernel (HSA queue, or
// the stream under Unified) or a gemm (HIP stream).
type faultOp struct {
	name   string
	symbol string // what the emulator calls it
	run    func(tk *Task, out, in *Array) error
}

var faultOps = []faultOp{
	{"kernel", kernels.Mul.KernelName(kernels.F32), func(tk *Task, out, in *Array) error { return tk.MulInto(out, in, in) }},
	{"gemm", "rocblas_sgemm", func(tk *Task, out, in *Array) error { return tk.MatMulInto(out, in, in, false, false) }},
}

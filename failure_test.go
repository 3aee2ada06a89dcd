package rocsync

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// hangLimit is how long a test lets a call run before calling it a hang.
const hangLimit = 20 * time.Second

// within runs fn and fails the test if it does not return in hangLimit.
func within[T any](t *testing.T, what string, fn func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangLimit):
		t.Fatalf("%s hangs", what)
		panic("unreachable")
	}
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

// A fault in one task reaches every dependent op and wait of another
// task, under every policy and for every crossing, and nothing hangs:
// the consumer's op, its read-back, both tasks' Synchronize and the
// device's Close all return, with an ErrFault that wraps the original.
func TestFaultReachesEveryDependent(t *testing.T) {
	for _, p := range syncstate.Policies {
		for _, prod := range faultOps {
			for _, cons := range faultOps {
				t.Run(fmt.Sprintf("%v/%s-to-%s", p, prod.name, cons.name), func(t *testing.T) {
					d := openFaulty(t, p)
					closed := false
					defer func() {
						if !closed {
							_ = d.Close()
						}
					}()
					tasks := newTasks(t, d, 2)
					a, b := tasks[0], tasks[1]
					x, err := d.FromFloat32(8, 8, randMatrix(1, 8))
					require.NoError(t, err)
					y, _ := d.Empty(8, 8, Float32)
					z, _ := d.Empty(8, 8, Float32)
					w, _ := d.Empty(8, 8, Float32)
					require.NoError(t, b.Fill(z, 3))
					require.NoError(t, b.Synchronize())
					faultOn(d, prod.symbol)
					// Hold the device so that the consumer is submitted
					// while the producer is still pending: device-side
					// waits are emitted, then the producer faults.
					release := d.machine().Hold()
					go func() { time.Sleep(50 * time.Millisecond); release() }()
					if err := prod.run(a, y, x); err != nil {
						require.Equal(t, WaitAlways, p, "only WaitAlways waits for the producer itself")
						require.ErrorIs(t, err, ErrFault)
					}
					consErr := within(t, "the consumer op", func() error { return cons.run(b, z, y) })
					if consErr != nil {
						require.ErrorIs(t, consErr, ErrFault)
					}
					// A second op on b behind the consumer, on another array.
					_ = within(t, "a later op", func() error { return b.AddInto(w, z, z) })
					readErr := within(t, "the consumer's read-back", func() error { _, err := z.Float32s(); return err })
					require.ErrorIs(t, readErr, ErrFault, "the consumer's output is poisoned")
					require.Contains(t, readErr.Error(), "failed")
					_, yErr := y.Float32s()
					require.ErrorIs(t, yErr, ErrFault, "the faulted op's output is poisoned")
					require.Error(t, within(t, "the producer's Synchronize", a.Synchronize))
					_ = within(t, "the consumer's Synchronize", b.Synchronize)
					require.Error(t, within(t, "Device.Synchronize", d.Synchronize))
					closed = true
					require.Error(t, within(t, "Device.Close", d.Close))
					var e *Error
					require.True(t, errors.As(readErr, &e))
				})
			}
		}
	}
}

// What a user can still do after a fault (the README's "After a fault"):
// read arrays the failed work did not touch, use other tasks, overwrite a
// poisoned array completely to recover it, and open the device again.
func TestAfterAFault(t *testing.T) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := openFaulty(t, p)
			a, err := d.NewTask()
			require.NoError(t, err)
			x, err := d.FromFloat32(4, 4, randMatrix(9, 4))
			require.NoError(t, err)
			clean, err := a.Add(x, x)
			require.NoError(t, err)
			require.NoError(t, a.Synchronize())
			faultOn(d, kernels.Mul.KernelName(kernels.F32))
			y, _ := d.Empty(4, 4, Float32)
			if err := a.MulInto(y, x, x); err != nil {
				require.Equal(t, WaitAlways, p, "only WaitAlways reports the fault at the op")
			}
			require.ErrorIs(t, within(t, "Synchronize", a.Synchronize), ErrFault)
			d.machine().SetFaultInjector(nil)
			// The failed task's queue takes no more kernels (and what the
			// refused op was to write is poisoned).
			scratch, _ := d.Empty(4, 4, Float32)
			require.ErrorIs(t, a.Fill(scratch, 0), ErrFault)
			require.ErrorIs(t, scratch.Err(), ErrFault)
			// Arrays the failed work did not touch are intact.
			got, err := clean.Float32s()
			require.NoError(t, err)
			require.Equal(t, 2*randMatrix(9, 4)[5], got[5])
			require.ErrorIs(t, y.Err(), ErrFault)
			// Another task works, and can recover the poisoned array by
			// overwriting it completely.
			b, err := d.NewTask()
			require.NoError(t, err)
			_, err = b.Add(y, y)
			require.ErrorIs(t, err, ErrFault, "reading a poisoned array fails fast")
			require.NoError(t, b.Fill(y, 7))
			require.NoError(t, y.Err())
			got, err = y.Float32s()
			require.NoError(t, err)
			require.Equal(t, float32(7), got[0])
			require.Error(t, within(t, "Close", d.Close), "Close reports the fault")
			// The device can be opened again.
			d2 := openFaulty(t, p)
			z, err := d2.DefaultTask().Full(2, 2, Float32, 3)
			require.NoError(t, err)
			got, err = z.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{3, 3, 3, 3}, got)
			require.NoError(t, d2.Close())
		})
	}
}

// A fault on a HIP stream: a gemm faults, the stream takes
// another gemm, and a read-back of the first result waits on an event
// recorded after the fault. It returns the fault instead of hanging.
func TestGemmFaultThenWaitOnLaterEvent(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified, DeviceBridge} {
		t.Run(p.String(), func(t *testing.T) {
			d := openFaulty(t, p)
			defer func() { _ = d.Close() }()
			tk, err := d.NewTask()
			require.NoError(t, err)
			x, err := d.FromFloat32(4, 4, randMatrix(10, 4))
			require.NoError(t, err)
			c1, _ := d.Empty(4, 4, Float32)
			c2, _ := d.Empty(4, 4, Float32)
			release := d.machine().Hold()
			faulted := false
			d.machine().SetFaultInjector(func(op string) bool {
				if op == "rocblas_sgemm" && !faulted {
					faulted = true
					return true
				}
				return false
			})
			require.NoError(t, tk.MatMulInto(c1, x, x, false, false))
			require.NoError(t, tk.MatMulInto(c2, x, x, false, false))
			release()
			err = within(t, "the read-back of the faulted gemm", func() error { _, err := c1.Float32s(); return err })
			require.ErrorIs(t, err, ErrFault)
			require.Contains(t, err.Error(), "rocblas_sgemm")
			require.ErrorIs(t, within(t, "the second read-back", func() error { _, err := c2.Float32s(); return err }), ErrFault)
		})
	}
}

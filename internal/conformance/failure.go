package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// openFaulty opens a device of be whose faults the suite injects
// (be.InjectFault); the suite closes it, since Close reports the fault.
func openFaulty(t *testing.T, be *Backend, p rocsync.Policy) *rocsync.Device {
	t.Helper()
	need(t, be, be.InjectFault != nil, "fault injector")
	o := be.Options
	o.Policy = p
	d, err := rocsync.Open(o)
	require.NoError(t, err)
	return d
}

// newTasks opens n tasks on d.
func newTasks(t *testing.T, d *rocsync.Device, n int) []*rocsync.Task {
	t.Helper()
	tasks := make([]*rocsync.Task, n)
	for i := range tasks {
		var err error
		tasks[i], err = d.NewTask()
		require.NoError(t, err)
	}
	return tasks
}

// producer and consumer ops for the fault suites: a kernel (HSA queue, or
// the stream under Unified) or a gemm (HIP stream), with the names the
// ROCm emulator's fault injector sees.
type faultOp struct {
	name   string
	symbol string
	run    func(tk *rocsync.Task, out, in *rocsync.Array) error
}

var faultOps = []faultOp{
	{"kernel", kernels.Mul.KernelName(kernels.F32), func(tk *rocsync.Task, out, in *rocsync.Array) error { return tk.MulInto(out, in, in) }},
	{"gemm", "rocblas_sgemm", func(tk *rocsync.Task, out, in *rocsync.Array) error {
		return tk.MatMulInto(out, in, in, false, false)
	}},
}

// A fault in one task reaches every dependent op and wait of another
// task, under every policy and for every crossing, and nothing hangs:
// the consumer's op, its read-back, both tasks' Synchronize and the
// device's Close all return, with an rocsync.ErrFault that wraps the original.
func FaultReachesEveryDependent(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		for _, prod := range faultOps {
			for _, cons := range faultOps {
				t.Run(fmt.Sprintf("%v/%s-to-%s", p, prod.name, cons.name), func(t *testing.T) {
					d := openFaulty(t, be, p)
					closed := false
					defer func() {
						if !closed {
							_ = d.Close()
						}
					}()
					tasks := newTasks(t, d, 2)
					a, b := tasks[0], tasks[1]
					x, err := d.FromFloat32(8, 8, testcheck.RandMatrix(1, 8))
					require.NoError(t, err)
					y, _ := d.Empty(8, 8, rocsync.Float32)
					z, _ := d.Empty(8, 8, rocsync.Float32)
					w, _ := d.Empty(8, 8, rocsync.Float32)
					require.NoError(t, b.Fill(z, 3))
					require.NoError(t, b.Synchronize())
					be.InjectFault(d, func(op string) bool { return op == prod.symbol })
					// Hold the device so that the consumer is submitted
					// while the producer is still pending: device-side
					// waits are emitted, then the producer faults.
					release := be.Hold(t, d)
					go func() { time.Sleep(50 * time.Millisecond); release() }()
					if err := prod.run(a, y, x); err != nil {
						require.Equal(t, rocsync.WaitAlways, p, "only rocsync.WaitAlways waits for the producer itself")
						require.ErrorIs(t, err, rocsync.ErrFault)
					}
					consErr := testcheck.Within(t, "the consumer op", func() error { return cons.run(b, z, y) })
					if consErr != nil {
						require.ErrorIs(t, consErr, rocsync.ErrFault)
					}
					// A second op on b behind the consumer, on another array.
					_ = testcheck.Within(t, "a later op", func() error { return b.AddInto(w, z, z) })
					readErr := testcheck.Within(t, "the consumer's read-back", func() error { _, err := z.Float32s(); return err })
					require.ErrorIs(t, readErr, rocsync.ErrFault, "the consumer's output is poisoned")
					require.Contains(t, readErr.Error(), "failed")
					_, yErr := y.Float32s()
					require.ErrorIs(t, yErr, rocsync.ErrFault, "the faulted op's output is poisoned")
					require.Error(t, testcheck.Within(t, "the producer's Synchronize", a.Synchronize))
					_ = testcheck.Within(t, "the consumer's Synchronize", b.Synchronize)
					require.Error(t, testcheck.Within(t, "Device.Synchronize", d.Synchronize))
					closed = true
					require.Error(t, testcheck.Within(t, "Device.Close", d.Close))
					var e *rocsync.Error
					require.True(t, errors.As(readErr, &e))
				})
			}
		}
	}
}

// What a user can still do after a fault (the README's "After a fault"):
// read arrays the failed work did not touch, use other tasks, overwrite a
// poisoned array completely to recover it, and open the device again.
func AfterAFault(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := openFaulty(t, be, p)
			a, err := d.NewTask()
			require.NoError(t, err)
			x, err := d.FromFloat32(4, 4, testcheck.RandMatrix(9, 4))
			require.NoError(t, err)
			clean, err := a.Add(x, x)
			require.NoError(t, err)
			require.NoError(t, a.Synchronize())
			be.InjectFault(d, func(op string) bool { return op == kernels.Mul.KernelName(kernels.F32) })
			y, _ := d.Empty(4, 4, rocsync.Float32)
			if err := a.MulInto(y, x, x); err != nil {
				require.Equal(t, rocsync.WaitAlways, p, "only rocsync.WaitAlways reports the fault at the op")
			}
			require.ErrorIs(t, testcheck.Within(t, "Synchronize", a.Synchronize), rocsync.ErrFault)
			be.InjectFault(d, nil)
			// The failed task's queue takes no more kernels (and what the
			// refused op was to write is poisoned).
			scratch, _ := d.Empty(4, 4, rocsync.Float32)
			require.ErrorIs(t, a.Fill(scratch, 0), rocsync.ErrFault)
			require.ErrorIs(t, scratch.Err(), rocsync.ErrFault)
			// Arrays the failed work did not touch are intact.
			got, err := clean.Float32s()
			require.NoError(t, err)
			require.Equal(t, 2*testcheck.RandMatrix(9, 4)[5], got[5])
			require.ErrorIs(t, y.Err(), rocsync.ErrFault)
			// Another task works, and can recover the poisoned array by
			// overwriting it completely.
			b, err := d.NewTask()
			require.NoError(t, err)
			_, err = b.Add(y, y)
			require.ErrorIs(t, err, rocsync.ErrFault, "reading a poisoned array fails fast")
			require.NoError(t, b.Fill(y, 7))
			require.NoError(t, y.Err())
			got, err = y.Float32s()
			require.NoError(t, err)
			require.Equal(t, float32(7), got[0])
			require.Error(t, testcheck.Within(t, "Close", d.Close), "Close reports the fault")
			// The device can be opened again.
			d2 := openFaulty(t, be, p)
			z, err := d2.DefaultTask().Full(2, 2, rocsync.Float32, 3)
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
func GemmFaultThenWaitOnLaterEvent(t *testing.T, be *Backend) {
	for _, p := range []rocsync.Policy{rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge} {
		t.Run(p.String(), func(t *testing.T) {
			d := openFaulty(t, be, p)
			defer func() { _ = d.Close() }()
			tk, err := d.NewTask()
			require.NoError(t, err)
			x, err := d.FromFloat32(4, 4, testcheck.RandMatrix(10, 4))
			require.NoError(t, err)
			c1, _ := d.Empty(4, 4, rocsync.Float32)
			c2, _ := d.Empty(4, 4, rocsync.Float32)
			release := be.Hold(t, d)
			faulted := false
			be.InjectFault(d, func(op string) bool {
				if op == "rocblas_sgemm" && !faulted {
					faulted = true
					return true
				}
				return false
			})
			require.NoError(t, tk.MatMulInto(c1, x, x, false, false))
			require.NoError(t, tk.MatMulInto(c2, x, x, false, false))
			release()
			err = testcheck.Within(t, "the read-back of the faulted gemm", func() error { _, err := c1.Float32s(); return err })
			require.ErrorIs(t, err, rocsync.ErrFault)
			require.Contains(t, err.Error(), "rocblas_sgemm")
			require.ErrorIs(t, testcheck.Within(t, "the second read-back", func() error { _, err := c2.Float32s(); return err }), rocsync.ErrFault)
		})
	}
}

package rocsync

// Regression tests for what the fault fuzzer (TestFuzzFaults) found.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/kernels"
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
	tasks := newTasks(t, d, 4)
	x, err := d.FromFloat32(4, 4, randMatrix(21, 4))
	require.NoError(t, err)
	var out [4]*Array
	for i := range out {
		out[i], err = d.Empty(4, 4, Float32)
		require.NoError(t, err)
	}
	release := d.machine().Hold()
	faulted := false
	d.machine().SetFaultInjector(func(op string) bool {
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

// A broken queue must not release the waiters of its packets before the
// work those packets waited for has completed: that order is what the
// waiters rely on. Queue q1 faults; its next packets wait on the device
// for a kernel on q0 that writes a, then overwrite a; a kernel on q2
// waits for that overwrite and reads a. The kernel on q0 is still
// running when q1 breaks. Completing q1's signals at once (the old
// failInFlight) let q2 read a while q0 still wrote it: the hazard checker
// saw the read unordered with the write (fuzz seeds 1 and 25 under
// DeviceBridge, with a gemm in place of q0's kernel).
func TestBrokenQueueReleasesWaitersInOrder(t *testing.T) {
	for _, p := range []Policy{DeviceSide, DeviceBridge} {
		t.Run(p.String(), func(t *testing.T) {
			d := openFaulty(t, p)
			tasks := newTasks(t, d, 3)
			x, err := d.FromFloat32(4, 4, randMatrix(22, 4))
			require.NoError(t, err)
			a, _ := d.Empty(4, 4, Float32)
			y, _ := d.Empty(4, 4, Float32)
			b, _ := d.Empty(4, 4, Float32)
			slow := make(chan struct{})
			add := kernels.Add.KernelName(kernels.F32)
			mul := kernels.Mul.KernelName(kernels.F32)
			d.machine().SetFaultInjector(func(op string) bool {
				switch op {
				case add:
					<-slow // the producer on q0 runs long
				case mul:
					return true
				}
				return false
			})
			release := d.machine().Hold()
			require.NoError(t, tasks[0].AddInto(a, x, x)) // slow, writes a
			require.NoError(t, tasks[1].MulInto(y, x, x)) // faults: q1 breaks
			require.NoError(t, tasks[1].ScaleInto(a, 2, x))
			require.NoError(t, tasks[2].CopyInto(b, a))
			release()
			// q1's failure is known; q2 must still be waiting for q0.
			requireReleasedInOrder(t, d, tasks, b, slow)
		})
	}
}

// A timeline's failure covers every ticket from the earliest that failed,
// whichever report arrives first. Under Unified, task 1's stream faults at
// y; task 2 waits on the device for y (and inherits the fault); task 1
// then waits on the device for task 2. Learning task 2's failure first,
// task 1 recorded an upstream failure from its later wait on, which then
// shadowed its own, earlier fault: y read as sound, and a read-back of
// data the faulted stream never wrote succeeded (fuzz seed 13 under
// Unified).
func TestEarliestFailureWins(t *testing.T) {
	d := openFaulty(t, Unified)
	defer func() { _ = within(t, "Close", d.Close) }()
	tasks := newTasks(t, d, 2)
	t1, t2 := tasks[0], tasks[1]
	x, err := d.FromFloat32(4, 4, randMatrix(23, 4))
	require.NoError(t, err)
	y, _ := d.Empty(4, 4, Float32)
	z, _ := d.Empty(4, 4, Float32)
	w, _ := d.Empty(4, 4, Float32)
	faultOn(d, kernels.Mul.KernelName(kernels.F32))
	release := d.machine().Hold()
	require.NoError(t, t1.MulInto(y, x, x)) // faults
	require.NoError(t, t2.AddInto(z, y, y)) // waits for it on the device
	require.NoError(t, t1.AddInto(w, z, z)) // and task 1 waits for task 2
	release()
	require.ErrorIs(t, within(t, "Synchronize of task 2", t2.Synchronize), ErrFault)
	require.ErrorIs(t, within(t, "Synchronize of task 1", t1.Synchronize), ErrFault)
	require.ErrorIs(t, y.Err(), ErrFault, "the faulted op's output")
	err = within(t, "the read-back of the faulted op's output", func() error { _, err := y.Float32s(); return err })
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, w.Err(), ErrFault)
}

// The stream form of TestBrokenQueueReleasesWaitersInOrder, under
// DeviceBridge: stream s1 breaks at a gemm; its next gemm waits on the
// device for a kernel on q0 that writes a, then overwrites a; a kernel on
// q2 waits (through the bridge's signal) for that overwrite and reads a.
// A broken stream skips its waits, so its failure says nothing about q0's
// kernel: releasing q2's signal, and counting the stream's failed work
// complete, as soon as the failure was known let q2 read a while q0 still
// wrote it (fuzz seed 6 under DeviceBridge, with the emulator's fault
// injector).
func TestBrokenStreamReleasesWaitersInOrder(t *testing.T) {
	d := openFaulty(t, DeviceBridge)
	tasks := newTasks(t, d, 3)
	x, err := d.FromFloat32(4, 4, randMatrix(24, 4))
	require.NoError(t, err)
	a, _ := d.Empty(4, 4, Float32)
	y, _ := d.Empty(4, 4, Float32)
	b, _ := d.Empty(4, 4, Float32)
	slow := make(chan struct{})
	add := kernels.Add.KernelName(kernels.F32)
	faulted := false
	d.machine().SetFaultInjector(func(op string) bool {
		switch op {
		case add:
			<-slow // the producer on q0 runs long
		case "rocblas_sgemm":
			if !faulted {
				faulted = true
				return true
			}
		}
		return false
	})
	release := d.machine().Hold()
	require.NoError(t, tasks[0].AddInto(a, x, x))                  // slow, writes a
	require.NoError(t, tasks[1].MatMulInto(y, x, x, false, false)) // faults: s1 breaks
	require.NoError(t, tasks[1].MatMulInto(a, x, x, false, false)) // after q0's kernel
	require.NoError(t, tasks[2].CopyInto(b, a))                    // after that
	release()
	requireReleasedInOrder(t, d, tasks, b, slow)
}

// A broken queue that waits (through the bridge) for a stream, while the
// stream in turn waits for a later packet of that queue, must still
// release its packets: the stream has written the bridge signal the queue
// waits for, but the host cannot learn that the stream passed that point
// without the whole stream completing, which waits for the queue. Waiting
// for the stream's ticket to be known complete (instead of for the signal
// itself) deadlocked until Close gave up after the wait timeout (fuzz seed
// 49 under DeviceBridge).
func TestBrokenQueueWaitingOnAStreamThatWaitsOnIt(t *testing.T) {
	d := openFaulty(t, DeviceBridge)
	tasks := newTasks(t, d, 2)
	q, s := tasks[0], tasks[1] // q's queue breaks; s's stream
	x, err := d.FromFloat32(4, 4, randMatrix(25, 4))
	require.NoError(t, err)
	y, _ := d.Empty(4, 4, Float32)
	a, _ := d.Empty(4, 4, Float32)
	b, _ := d.Empty(4, 4, Float32)
	c, _ := d.Empty(4, 4, Float32)
	faultOn(d, kernels.Mul.KernelName(kernels.F32))
	release := d.machine().Hold()
	require.NoError(t, q.MulInto(y, x, x))                  // faults: the queue breaks
	require.NoError(t, s.MatMulInto(a, x, x, false, false)) // stream
	require.NoError(t, q.AddInto(b, a, a))                  // the queue waits for the stream
	require.NoError(t, s.MatMulInto(c, b, x, false, false)) // the stream waits for the queue
	release()
	require.ErrorIs(t, within(t, "Synchronize of the stream's task", s.Synchronize), ErrFault)
	require.ErrorIs(t, c.Err(), ErrFault)
	err = within(t, "the read-back of the stream's first result", func() error { _, err := a.Float32s(); return err })
	require.NoError(t, err, "the stream's work before it waited for the queue is sound")
	require.Error(t, within(t, "Close", d.Close))
	require.Empty(t, d.Hazards())
}

// With agent-scope fences, an op on a HIP stream that reads what a kernel
// wrote before a later kernel on the same queue faulted must still run,
// and read the kernel's result: that kernel succeeded. The HIP bridge
// waits for a system-scope marker after the kernel, which a fault can take
// away in two ways:
//   - the queue has broken before the gemm is submitted, and takes no
//     marker: the bridge failed the gemm ("not submitted ... HSA queue
//     error"; the fault fuzzer's seed 133 under DeviceBridge, in CI). The
//     test waits for the faulted op's output to report the fault, which
//     asks the queue without waiting on it (a host wait on the broken
//     queue flushes, and hid the defect);
//   - the marker is in, behind the faulting kernel: it never runs, and
//     rocsync completes its signal (releaseBroken) without its release,
//     so a copy, which reads around the GPU's L2, read what the kernel
//     may not have written back (the hazard checker's visibility rule).
func TestAgentScopeBridgeAfterBreakKeepsEarlierWork(t *testing.T) {
	for _, before := range []bool{true, false} {
		t.Run(map[bool]string{true: "break before the gemm", false: "break after the gemm"}[before], func(t *testing.T) {
			d := openFaulty(t, DeviceBridge)
			defer func() { _ = within(t, "Close", d.Close) }()
			task := newTasks(t, d, 1)[0]
			xs := randMatrix(24, 4)
			x, err := d.FromFloat32(4, 4, xs)
			require.NoError(t, err)
			a, _ := d.Empty(4, 4, Float32)
			b, _ := d.Empty(4, 4, Float32)
			c, _ := d.Empty(4, 4, Float32)
			faultOn(d, kernels.Add.KernelName(kernels.F32))
			release := func() {}
			if !before {
				release = d.machine().Hold()
			}
			require.NoError(t, task.MulInto(a, x, x))
			require.NoError(t, task.AddInto(b, x, x)) // faults
			if before {
				require.ErrorIs(t, within(t, "the fault to reach the faulted op's output", func() error {
					for b.Err() == nil {
						time.Sleep(50 * time.Microsecond)
					}
					return b.Err()
				}), ErrFault)
			}
			require.NoError(t, task.MatMulInto(c, a, x, false, false), "the gemm reads only work before the fault")
			down := make([]float32, 16)
			pending, err := task.DownloadFloat32(a, down) // a copy reads through no L2: it needs a system-scope release
			require.NoError(t, err, "the download reads only work before the fault")
			release()
			require.NoError(t, within(t, "the download", func() error { return pending.Wait(context.Background()) }))
			for i := range down {
				require.Equal(t, xs[i]*xs[i], down[i], "a[%d]", i)
			}
			got, err := within2(t, "the gemm's read-back", c.Float32s)
			require.NoError(t, err)
			for i := 0; i < 4; i++ {
				for j := 0; j < 4; j++ {
					var want float32
					for k := 0; k < 4; k++ {
						want += xs[i*4+k] * xs[i*4+k] * xs[k*4+j]
					}
					require.InDelta(t, want, got[i*4+j], 1e-4, "c[%d,%d]", i, j)
				}
			}
			require.Empty(t, d.Hazards())
		})
	}
}

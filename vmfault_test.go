package rocsync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

// A GPU VM fault is an error on its device, never an abort and never a
// hang. ROCr reports the fault to hsa_amd_register_system_event_handler
// handlers (and aborts the process when none handles it); rocsync's
// handler breaks every queue of the faulting device, so a read-back
// already blocked on the faulted packet returns an error naming the fault,
// later work on that device is refused, the other device goes on working,
// and Close returns. gpuMemoryFault runs that on devs (two GPUs); hold
// pauses the GPUs' command processors until the returned function is
// called, so the read-back is blocked before the fault happens.
func gpuMemoryFault(t *testing.T, devs []*Device, hold func() (release func())) {
	require.Len(t, devs, 2)
	faulty, healthy := devs[0], devs[1]
	x, err := faulty.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	x1, err := healthy.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	// A healthy task on gpu0 first: the device works (and has loaded its
	// kernels, which on ROCr runs blit kernels that hold would stop).
	good, err := faulty.NewTask()
	require.NoError(t, err)
	sq, err := good.Mul(x, x)
	require.NoError(t, err)
	got, err := sq.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9, 16}, got)
	// Then a task whose queue has a kernarg ring gpu0 may not read: its
	// first dispatch faults on the kernarg fetch. (Queues are made with
	// the task; the pool gives the second task a queue of its own.)
	testhooks.SkipKernargAllowAccess.Store(true)
	t.Cleanup(func() { testhooks.SkipKernargAllowAccess.Store(false) })
	tk, err := faulty.NewTask()
	testhooks.SkipKernargAllowAccess.Store(false)
	require.NoError(t, err)
	tk1 := healthy.DefaultTask()

	release := hold()
	readBack := make(chan error, 1)
	start := time.Now()
	go func() {
		// Under WaitAlways the op itself waits on the host, and reports
		// the fault; under the other policies the read-back does.
		y, err := tk.Mul(x, x)
		if err == nil {
			_, err = y.Float32s()
		}
		readBack <- err
	}()
	select {
	case err := <-readBack:
		release()
		t.Fatalf("the op and read-back returned before the dispatch ran: %v", err)
	case <-time.After(300 * time.Millisecond): // blocked in the signal wait
	}
	release()
	select {
	case err = <-readBack:
	case <-time.After(20 * time.Second):
		t.Fatal("the read-back hung on a faulted GPU")
	}
	took := time.Since(start)
	require.Less(t, took, 10*time.Second, "the fault reached the waiter late")
	var re *Error
	require.ErrorAs(t, err, &re, "read-back error %v", err)
	require.ErrorIs(t, err, hsa.ErrMemoryFault)
	require.ErrorIs(t, err, queue.ErrQueueBroken)
	require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorMemoryApertureViolation})
	var mf *hsa.MemoryFaultError
	require.ErrorAs(t, err, &mf)
	require.NotZero(t, mf.Fault.Address, "the fault names the address")
	require.NotZero(t, mf.Fault.Reason&hsa.MemoryFaultPageNotPresent, "reason %v", mf.Fault.Reason)
	require.Contains(t, err.Error(), "gpu0")
	t.Logf("read-back after the fault (%v): %v", took.Round(time.Millisecond), err)

	// The faulted device takes no more work, on any of its tasks: a VM
	// fault evicts every queue of the process on that GPU.
	_, err = tk.Add(x, x)
	require.ErrorIs(t, err, hsa.ErrMemoryFault)
	_, err = good.Add(x, x)
	require.ErrorIs(t, err, hsa.ErrMemoryFault)

	// The other GPU is unaffected.
	y1, err := tk1.Mul(x1, x1)
	require.NoError(t, err)
	got, err = y1.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9, 16}, got)

	for i, d := range devs {
		closed := make(chan error, 1)
		go func() { closed <- d.Close() }()
		select {
		case err := <-closed:
			if d == healthy {
				require.NoError(t, err, "closing the healthy gpu%d", i)
			} else if err != nil {
				require.ErrorIs(t, err, hsa.ErrMemoryFault, "closing the faulted gpu%d reports its fault", i)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Close of gpu%d hung", i)
		}
	}
}

// Under every policy that puts rocsync's kernels on HSA queues (Unified
// launches them on HIP streams, where the kernarg ring is not used).
func TestGPUMemoryFaultIsAnError(t *testing.T) {
	for _, p := range syncstate.Policies {
		if p == Unified {
			continue
		}
		// Either report of the fault may come first on ROCr 6.x (see
		// emu's SetVMFaultQueueErrorFirst): the error names the fault and
		// its address whatever the order.
		for _, queueErrorFirst := range []bool{false, true} {
			name := p.String() + "/event_first"
			if queueErrorFirst {
				name = p.String() + "/queue_error_first"
			}
			t.Run(name, func(t *testing.T) {
				devs := openEmu(t, p, EmulatorOptions{Devices: 2})
				m := devs[0].machine()
				m.SetVMFaultQueueErrorFirst(queueErrorFirst)
				gpuMemoryFault(t, devs, m.Hold)
				require.Zero(t, m.HSA().SystemEventHandlers(), "the handler is retired with the runtime")
				require.Zero(t, m.HSA().InitCount())
				require.Empty(t, devs[1].Hazards())
			})
		}
	}
}

// On real KFD without the debugger interface the faulting queue is evicted
// with no queue error: the system event alone must wake the waiters.
func TestGPUMemoryFaultWithoutQueueError(t *testing.T) {
	devs := openEmu(t, DeviceSide, EmulatorOptions{Devices: 2})
	m := devs[0].machine()
	m.SetVMFaultQueueErrors(false)
	gpuMemoryFault(t, devs, m.Hold)
}

package rocsync

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/testhooks"
)

// A VM fault evicts every queue of the process on its GPU (KFD's
// kfd_dqm_evict_pasid), HIP's streams included, which then never complete
// and whose hipStreamDestroy never returns (clr HostQueue::terminate); the
// emulator models both. After a kernel faults, the device's rocBLAS call,
// copy and DeviceBridge crossing each fail with the fault well within
// WaitTimeout (the side task's rocBLAS call sits on its stream behind a
// host function when the fault comes, and its download waits for that
// function on the host; nothing they wait for fails: only the eviction
// says they never run), Close returns the fault promptly, and the
// other GPU works on. With the emulator's eviction off the streams would
// run on, and rocsync fails their work all the same: what it does must not
// depend on whether the driver evicted them.
func TestVMFaultEvictsStreamsAndHostLanes(t *testing.T) {
	for _, evict := range []bool{true, false} {
		t.Run(map[bool]string{true: "evicted", false: "not-evicted"}[evict], func(t *testing.T) { vmFaultEvicts(t, evict) })
	}
}

func vmFaultEvicts(t *testing.T, evict bool) {
	const waitTimeout = 20 * time.Second
	var logs syncBuffer
	devs, err := OpenAll(Options{Backend: Emulator, Policy: DeviceBridge, WaitTimeout: waitTimeout, LogHandler: jsonLog(&logs, slog.LevelDebug),
		Emulator: EmulatorOptions{Devices: 2, HazardChecker: true, MaxDelay: 30e3, Seed: 11}})
	require.NoError(t, err)
	faulty, healthy := devs[0], devs[1]
	faulty.machine().SetVMFaultEviction(evict)
	x, err := faulty.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	warm, err := faulty.NewTask() // loads the kernels; the device works
	require.NoError(t, err)
	sq, err := warm.Mul(x, x)
	require.NoError(t, err)
	_, err = sq.Float32s()
	require.NoError(t, err)

	// The side task: a host function that runs until gate closes, then a
	// rocBLAS call and a download on the stream, which waits on the
	// device for the host function.
	side, err := faulty.NewTask()
	require.NoError(t, err)
	gate := make(chan struct{})
	h, err := faulty.Empty(2, 2, Float32)
	require.NoError(t, err)
	require.NoError(t, side.HostFunc([]Arg{In(x), Out(h)}, func(ha *HostAccess) error {
		<-gate
		v, err := ha.Float32s(x)
		if err != nil {
			return err
		}
		return ha.SetFloat32s(h, v)
	}))
	gemm, err := side.MatMul(h, h, false, false)
	require.NoError(t, err)
	buf := make([]float32, 4)
	// The download waits on the host for the host function before it goes
	// on the stream: behind the stream's device-side wait it would hold
	// ROCr's device-to-host copy queue, which the function's own copy needs
	// (rocmdev, Task.awaitHostDeps). So it is submitted from a goroutine.
	type submitted struct {
		pd  *Pending
		err error
	}
	download := make(chan submitted, 1)
	go func() {
		pd, err := side.DownloadFloat32(h, buf)
		download <- submitted{pd, err}
	}()

	// The faulting kernel: its queue's kernarg ring is not mapped to the
	// GPU. Then a crossing: rocBLAS on the task's stream reads its output.
	testhooks.SkipKernargAllowAccess.Store(true)
	t.Cleanup(func() { testhooks.SkipKernargAllowAccess.Store(false) })
	tk, err := faulty.NewTask()
	testhooks.SkipKernargAllowAccess.Store(false)
	require.NoError(t, err)
	y, err := tk.Mul(x, x)
	require.NoError(t, err)
	crossing, crossErr := tk.MatMul(y, y, false, false) // refused at once if the fault came first
	_, err = y.Float32s()
	require.ErrorIs(t, err, hsa.ErrMemoryFault)
	require.Equal(t, evict, faulty.machine().Evicted(0))
	close(gate) // the host function completes; the evicted stream never runs what waits for it

	within := func(what string, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		took := time.Since(start)
		require.ErrorIs(t, err, ErrFault, "%s", what)
		require.ErrorIs(t, err, hsa.ErrMemoryFault, "%s", what)
		require.Less(t, took, waitTimeout/4, "%s waited out the timeout", what)
	}
	within("the rocBLAS call", func() error { _, err := gemm.Float32s(); return err })
	within("the download", func() error {
		r := <-download
		if r.err != nil {
			return r.err
		}
		return r.pd.Wait(context.Background())
	})
	within("the crossing", func() error {
		if crossErr != nil {
			return crossErr
		}
		_, err := crossing.Float32s()
		return err
	})
	_, err = side.Mul(x, x)
	require.ErrorIs(t, err, hsa.ErrMemoryFault, "the faulted device takes no more work")

	// The other GPU is unaffected.
	x1, err := healthy.FromFloat32(1, 2, []float32{2, 3})
	require.NoError(t, err)
	z1, err := healthy.DefaultTask().MatMul(x1, x1, false, true)
	require.NoError(t, err)
	got, err := z1.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{13}, got)

	for _, c := range []struct {
		name  string
		close func() error
		fault bool
	}{
		{"side task", side.Close, true}, {"faulting task", tk.Close, true}, {"warm task", warm.Close, false},
		{"faulted device", faulty.Close, true}, {"healthy device", healthy.Close, false},
	} {
		closed := make(chan error, 1)
		start := time.Now()
		go func() { closed <- c.close() }()
		select {
		case err := <-closed:
			if c.fault {
				require.ErrorIs(t, err, hsa.ErrMemoryFault, "%s", c.name)
			} else if c.name == "healthy device" {
				require.NoError(t, err, "%s", c.name)
			}
			require.Less(t, time.Since(start), waitTimeout/4, "%s", c.name)
		case <-time.After(2 * waitTimeout):
			t.Fatalf("Close of the %s hung", c.name)
		}
	}
	require.Contains(t, logs.String(), "leaking", "the leaked streams are logged")
	require.True(t, strings.Contains(logs.String(), "HIP stream"), logs.String())
	require.Empty(t, healthy.Hazards())
}

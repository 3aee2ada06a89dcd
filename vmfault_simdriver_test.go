//go:build linux && (amd64 || arm64)

package rocsync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// twoSimulatedGPUs puts two gfx90a GPUs on the simulated driver, PCI order
// equal to agent order.
const twoSimulatedGPUs = "gfx90a@0000:03:00.0,gfx90a@0000:83:00.0"

// The same fault on Debian's real ROCr 5.2.3 over the simulated kernel
// driver: the simulated GPU faults on the unmapped kernarg fetch and
// reports it as KFD does (the memory event, and a queue error); ROCr calls
// rocsync's system event handler instead of aborting, and the read-back
// blocked in hsa_signal_wait_scacquire returns the error. The child
// process would be killed by ROCr's abort without the handler (as
// hsa/kfdsim's TestVMFaultWithoutHandlerAborts shows).
func TestGPUMemoryFaultOnSimulatedDriver(t *testing.T) {
	if kfdsim.InChild(t) {
		e, err := kfdsim.RegisterExecutor("") // before rocsync opens HSA
		require.NoError(t, err)
		defer e.Close()
		devs, err := OpenAll(Options{Backend: ROCm, Policy: DeviceSide, LogLevel: LogOff})
		require.NoError(t, err)
		gpuMemoryFault(t, devs, func() func() { return holdSimulatedGPU(t) })
		st := e.Stats()
		t.Logf("executor stats: %d kernels run, %d faults", st.Runs, st.Faults)
		require.Equal(t, uint64(1), st.Faults, "the one faulting dispatch")
		return
	}
	parentOfSimulatedDriver(t)
	out := kfdsim.Run(t, twoSimulatedGPUs, t.Name(), kfdsim.Options{Release: simRelease(t), Env: simblasEnv(t)})
	require.NotContains(t, out, "Memory access fault by GPU", "ROCr's abort path ran")
	if testing.Verbose() {
		t.Log(out)
	}
}

// The same with the simulated driver evicting the faulting queue silently,
// as KFD without the debugger interface does: ROCr's system event alone
// must wake the read-back.
func TestGPUMemoryFaultWithoutQueueErrorOnSimulatedDriver(t *testing.T) {
	if kfdsim.InChild(t) {
		e, err := kfdsim.RegisterExecutor("")
		require.NoError(t, err)
		defer e.Close()
		devs, err := OpenAll(Options{Backend: ROCm, Policy: DeviceSide, LogLevel: LogOff})
		require.NoError(t, err)
		gpuMemoryFault(t, devs, func() func() { return holdSimulatedGPU(t) })
		return
	}
	parentOfSimulatedDriver(t)
	out := kfdsim.Run(t, twoSimulatedGPUs, t.Name(),
		kfdsim.Options{Release: simRelease(t), Env: append(simblasEnv(t), kfdsim.EnvVMFaultQueueError+"=0")})
	require.Contains(t, out, "rocmdev: gpu0: hsa: GPU memory access fault", "the read-back's error")
	require.NotContains(t, out, "queue error: hsa: queue", "the queue reported the fault after all")
	require.NotContains(t, out, "Memory access fault by GPU", "ROCr's abort path ran")
}

// Real ROCr reports its agents' queue sizes, and a QueueSize outside them
// is ErrInvalid at Open, whether ROCm is asked for or Auto finds it; Auto
// does not fall back to the emulator over a wrong option.
func TestQueueSizeOutsideTheGPUsOnSimulatedDriver(t *testing.T) {
	if kfdsim.InChild(t) {
		e, err := kfdsim.RegisterExecutor("") // before rocsync opens HSA
		require.NoError(t, err)
		defer e.Close()
		for _, b := range []Backend{ROCm, Auto} {
			_, err := Open(Options{Backend: b, QueueSize: 1 << 18, LogLevel: LogOff})
			require.ErrorIs(t, err, ErrInvalid, "%v", b)
			require.ErrorContains(t, err, "outside the GPU's queue sizes")
			t.Logf("%v: %v", b, err)
		}
		d, err := Open(Options{Backend: ROCm, QueueSize: 1 << 17, LogLevel: LogOff})
		require.NoError(t, err)
		x, err := d.FromFloat32(1, 2, []float32{1, 2})
		require.NoError(t, err)
		y, err := d.DefaultTask().Add(x, x)
		require.NoError(t, err)
		got, err := y.Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{2, 4}, got)
		require.NoError(t, d.Close())
		return
	}
	parentOfSimulatedDriver(t)
	out := kfdsim.Run(t, "gfx90a", t.Name(), kfdsim.Options{Release: simRelease(t), Env: simblasEnv(t)})
	if testing.Verbose() {
		t.Log(out)
	}
}

package rocsync

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/nccl"
)

// Collectives on NVIDIA GPUs through NCCL: ROCSYNC_GPU=1
// ROCSYNC_BACKEND=cuda (NCCL_NVLS_ENABLE=0 is set by rocsync before NCCL
// loads, and refused otherwise).

func collGPUOn(t *testing.T) {
	t.Helper()
	if !testenv.OnCUDA() {
		t.Skip("set ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda to run collectives through NCCL on NVIDIA GPUs")
	}
}

// openCollGPU opens the CUDA GPUs (at least min of them, else it skips
// saying why) under p, with a task on each of the first n.
func openCollGPU(t *testing.T, p Policy, n int) ([]*Device, []*Task) {
	t.Helper()
	collGPUOn(t)
	devs, err := OpenAll(Options{Backend: CUDA, Policy: p, LogLevel: LogOff})
	require.NoError(t, err)
	for _, d := range devs {
		t.Cleanup(func() { _ = d.Close() })
	}
	if len(devs) < n {
		t.Skipf("needs %d NVIDIA GPUs, this machine has %d (the nvidia-h200-x2 kind has 2)", n, len(devs))
	}
	devs = devs[:n]
	tasks := make([]*Task, n)
	for i, d := range devs {
		tasks[i], err = d.NewTask()
		require.NoError(t, err)
	}
	return devs, tasks
}

// One GPU: a communicator of one rank (ncclCommInitAll over one device,
// and ncclCommInitRank with a unique id), the three collectives as ops
// between kernels, under the policies that cross streams differently.
func TestGPUCollectivesOneGPU(t *testing.T) {
	for _, p := range []Policy{DeviceSide, DeviceBridge, Unified, WaitAlways} {
		t.Run(p.String(), func(t *testing.T) {
			devs, tasks := openCollGPU(t, p, 1)
			checkCollectivesAsOps(t, devs, tasks)

			id, err := devs[0].NewUniqueID()
			require.NoError(t, err)
			comm, err := JoinCommunicator(tasks[0], id, 0, 1)
			require.NoError(t, err)
			x, err := devs[0].FromFloat32(2, 2, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			y, err := tasks[0].Scale(3, x)
			require.NoError(t, err)
			require.NoError(t, comm.AllReduce(ReduceSum, y))
			z, err := tasks[0].Add(y, x)
			require.NoError(t, err)
			got, err := z.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{4, 8, 12, 16}, got)
			require.NoError(t, comm.Close())
			require.Equal(t, "0", os.Getenv(nccl.EnvNVLS))
		})
	}
}

// Host waits that collectives add under DeviceBridge and Unified on CUDA:
// none (the all-reduce waits for the kernel stream with an event).
func TestGPUCollectiveNoHostWaits(t *testing.T) {
	for _, p := range []Policy{DeviceBridge, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			devs, tasks := openCollGPU(t, p, 1)
			comm, err := NewCommunicator(tasks...)
			require.NoError(t, err)
			defer comm.Close()
			x, err := devs[0].FromFloat32(1, 4, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			before := devs[0].Stats()
			y, err := tasks[0].Scale(2, x)
			require.NoError(t, err)
			require.NoError(t, comm.AllReduce(ReduceSum, y))
			z, err := tasks[0].Scale(1, y)
			require.NoError(t, err)
			require.Zero(t, devs[0].Stats().Sub(before).HostWaitsTotal(), "host waits while submitting")
			got, err := z.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{2, 4, 6, 8}, got)
		})
	}
}

// Two GPUs of one process (ncclCommInitAll): skips on one GPU.
func TestGPUCollectivesTwoGPUs(t *testing.T) {
	for _, p := range []Policy{DeviceSide, DeviceBridge, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			devs, tasks := openCollGPU(t, p, 2)
			checkCollectivesAsOps(t, devs, tasks)
		})
	}
}

// The variables that make a child of TestGPUJoinCommunicatorTwoProcesses
// rank 1.
const (
	envCollChild = "ROCSYNC_COLL_TEST_ID"
)

// Two processes with one GPU each meet through a unique id in text form
// (ncclCommInitRank): each all-reduces an array written by a kernel and
// reads the sum. The child's environment goes through nccl.ChildEnv, so
// NCCL_NVLS_ENABLE=0 holds there too.
func TestGPUJoinCommunicatorTwoProcesses(t *testing.T) {
	collGPUOn(t)
	if text := os.Getenv(envCollChild); text != "" {
		require.NoError(t, collRank(text, 1))
		t.Log("rank 1 of 2: all-reduce ok")
		return
	}
	devs, _ := openCollGPU(t, DeviceSide, 2)
	id, err := devs[0].NewUniqueID()
	require.NoError(t, err)
	for _, d := range devs {
		require.NoError(t, d.Close())
	}
	env, err := nccl.ChildEnv(append(os.Environ(), envCollChild+"="+id.String()))
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestGPUJoinCommunicatorTwoProcesses$", "-test.v")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	rankErr := collRank(id.String(), 0)
	if rankErr != nil {
		_ = cmd.Process.Kill() // it would wait for rank 0 on the device
	}
	werr := cmd.Wait()
	require.NoError(t, errors.Join(rankErr, werr), "child:\n%s", out.String())
	require.Contains(t, out.String(), "rank 1 of 2: all-reduce ok")
}

// collRank is rank `rank` of 2 on GPU `rank`: it all-reduces an array a
// kernel wrote and checks the sum a kernel reads.
func collRank(text string, rank int) error {
	id, err := ParseUniqueID(text)
	if err != nil {
		return err
	}
	d, err := Open(Options{Backend: CUDA, Device: rank, LogLevel: LogOff})
	if err != nil {
		return err
	}
	defer d.Close()
	tk, err := d.NewTask()
	if err != nil {
		return err
	}
	comm, err := JoinCommunicator(tk, id, rank, 2)
	if err != nil {
		return err
	}
	defer comm.Close()
	const n = 1 << 16
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(rank+1) * float32(i%1000)
	}
	x, err := d.FromFloat32(1, n, host)
	if err != nil {
		return err
	}
	y, err := tk.Scale(2, x) // kernel stream
	if err != nil {
		return err
	}
	if err := comm.AllReduce(ReduceSum, y); err != nil { // library stream
		return err
	}
	z, err := tk.Scale(1, y)
	if err != nil {
		return err
	}
	got, err := z.Float32s()
	if err != nil {
		return err
	}
	for i, v := range got {
		if want := 2 * 3 * float32(i%1000); v != want {
			return fmt.Errorf("rank %d element %d = %g, want %g", rank, i, v, want)
		}
	}
	return comm.Close()
}

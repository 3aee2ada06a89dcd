package rocsync

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/nccl"
)

// envFakeColl makes a child of TestCollectivesThroughFakeNCCL run the
// checks: the fake libraries are loaded in the child only, so that no
// other test of this process sees a fake CUDA driver or NCCL.
const envFakeColl = "ROCSYNC_COLL_TEST_FAKE"

// The real-library path of Communicator (the purego NCCL binding,
// ncclCommInitAll, ncclCommInitRank on a thread where the device is
// current, one thread per rank, library calls on cudadev's streams)
// against the test-only C libraries: nccl/testdata/fakenccl.c (whose
// collectives wait for their peers outside a group, and whose
// communicator init fails unless NCCL_NVLS_ENABLE is "0") and the fake
// CUDA driver and cuBLAS with two GPUs. The fake streams are synchronous,
// so this checks calls and results, not ordering (the emulator does).
func TestCollectivesThroughFakeNCCL(t *testing.T) {
	if os.Getenv(envFakeColl) == "1" {
		fakeCollChild(t)
		return
	}
	if gpuRun() {
		t.Skip("running on the hardware suite")
	}
	p := buildFakeCUDA(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is missing: the fake NCCL cannot be built")
	}
	lib := filepath.Join(t.TempDir(), nccl.SonameNCCL)
	src := filepath.Join("nccl", "testdata", "fakenccl.c")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-I", filepath.Dir(src), "-o", lib, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	env := append(os.Environ(), envFakeColl+"=1", cuda.EnvLibCUDA+"="+p.CUDA, cublas.EnvLibCUBLAS+"="+p.CUBLAS,
		nccl.EnvLibNCCL+"="+lib, "TMPDIR="+t.TempDir())
	env, err = nccl.ChildEnv(env)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCollectivesThroughFakeNCCL$", "-test.v", "-test.count=1")
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	require.NoError(t, cmd.Run(), "child:\n%s", buf.String())
	require.Contains(t, buf.String(), "fake NCCL: collectives checked", "child:\n%s", buf.String())
}

func fakeCollChild(t *testing.T) {
	// Before NCCL is loaded: a missing library names the path tried, and
	// a request for NVLink multicast is refused.
	{
		devs, err := OpenAll(Options{Backend: CUDA, LogLevel: LogOff})
		require.NoError(t, err)
		tk, err := devs[0].NewTask()
		require.NoError(t, err)
		lib := os.Getenv(nccl.EnvLibNCCL)
		require.NoError(t, os.Setenv(nccl.EnvLibNCCL, "/nonexistent/libnccl.so.2"))
		_, err = NewCommunicator(tk)
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorIs(t, err, nccl.ErrNotFound)
		require.ErrorContains(t, err, "/nonexistent/libnccl.so.2")
		require.NoError(t, os.Setenv(nccl.EnvLibNCCL, lib))
		require.NoError(t, os.Setenv(nccl.EnvNVLS, "1"))
		_, err = devs[0].NewUniqueID()
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorIs(t, err, nccl.ErrNVLSEnabled)
		require.NoError(t, os.Setenv(nccl.EnvNVLS, "0"))
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	}
	var marksBeforeLaunch *int32
	for _, p := range []Policy{DeviceSide, Unified} {
		devs, err := OpenAll(Options{Backend: CUDA, Policy: p, LogLevel: LogOff})
		require.NoError(t, err)
		require.Len(t, devs, 2)
		tasks := make([]*Task, 2)
		for i, d := range devs {
			tasks[i], err = d.NewTask()
			require.NoError(t, err)
		}
		checkCollectivesAsOps(t, devs, tasks)
		checkCollectivesAsOps(t, devs[:1], tasks[:1]) // one rank
		if marksBeforeLaunch == nil {
			// The calls of a group whose stream recorded a fence before
			// ncclGroupEnd (rocsync has loaded the library by now).
			h, err := purego.Dlopen(os.Getenv(nccl.EnvLibNCCL), purego.RTLD_NOW|purego.RTLD_GLOBAL)
			require.NoError(t, err)
			sym, err := purego.Dlsym(h, "fakenccl_marks_before_launch")
			require.NoError(t, err)
			marksBeforeLaunch = (*int32)(cmem.Ptr(sym))
		}
		require.Zero(t, *marksBeforeLaunch, "a fence recorded between a group's call and ncclGroupEnd")

		// Two ranks joined from one unique id, each on its own goroutine.
		id, err := devs[0].NewUniqueID()
		require.NoError(t, err)
		var comms [2]*Communicator
		var errs [2]error
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Go(func() { comms[r], errs[r] = JoinCommunicator(tasks[r], id, r, 2) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs[:]...))
		var xs [2]*Array
		for r := range 2 {
			xs[r], err = devs[r].FromFloat32(1, 3, []float32{1, 2, float32(r)})
			require.NoError(t, err)
		}
		for r := range 2 {
			wg.Go(func() { errs[r] = comms[r].AllReduce(ReduceMax, xs[r]) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs[:]...))
		for r := range 2 {
			got, err := xs[r].Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{1, 2, 1}, got)
			require.NoError(t, comms[r].Close())
		}
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	}
	// The fake counts a fence recorded inside the group: with a mark
	// after every op (MaxInFlight 4), one per part when the fences are
	// recorded before ncclGroupEnd, none when after.
	for _, early := range []bool{false, true} {
		devs, err := OpenAll(Options{Backend: CUDA, MaxInFlight: 4, LogLevel: LogOff})
		require.NoError(t, err)
		tasks := make([]*Task, 2)
		xs := make([]*Array, 2)
		for i, d := range devs {
			tasks[i], err = d.NewTask()
			require.NoError(t, err)
			xs[i], err = d.FromFloat32(1, 2, []float32{1, float32(i)})
			require.NoError(t, err)
		}
		comm, err := NewCommunicator(tasks...)
		require.NoError(t, err)
		require.NoError(t, comm.SetSubmit(SubmitGroup))
		comm.fenceInGroup = early
		before := *marksBeforeLaunch
		for range 4 {
			require.NoError(t, comm.AllReduce(ReduceSum, xs...))
		}
		if early {
			require.Positive(t, *marksBeforeLaunch-before, "the fake must see fences recorded inside the group")
		} else {
			require.Equal(t, before, *marksBeforeLaunch, "a fence recorded between a group's call and ncclGroupEnd")
		}
		require.NoError(t, comm.Close())
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	}
	require.Equal(t, "0", os.Getenv(nccl.EnvNVLS))
	t.Log("fake NCCL: collectives checked")
}

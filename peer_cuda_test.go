package rocsync

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
	"github.com/rocsync/rocsync/internal/testhooks"
)

// The CUDA backend's peer copies through the real purego bindings, over
// the fake libcuda (two devices, work run at the call): the chain's copies
// go through cuDeviceCanAccessPeer, cuCtxEnablePeerAccess and
// cuMemcpyPeerAsync, or, forced, through portable pinned memory, and the
// results equal the CPU reference. The ordering itself is what the
// emulator's tests check; on two NVIDIA GPUs the same tests run with
// ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda.
func TestCopyPeerOnFakeCUDA(t *testing.T) {
	if gpuRun() {
		t.Skip("the fake libcuda stands in for a GPU")
	}
	p := buildFakeCUDA(t)
	t.Setenv(cuda.EnvLibCUDA, p.CUDA)
	t.Setenv(cublas.EnvLibCUBLAS, p.CUBLAS)
	for _, staged := range []bool{false, true} {
		devs, err := OpenAll(Options{Backend: CUDA, Policy: DeviceSide, LogLevel: LogOff, test: testhooks.Device{StagePeerCopies: staged}})
		require.NoError(t, err)
		require.Len(t, devs, 2)
		direct, err := devs[0].PeerAccess(devs[1])
		require.NoError(t, err)
		require.Equal(t, !staged, direct)
		pc := newPeerChain(t, devs, nil)
		for s := 0; s < 3; s++ {
			require.NoError(t, pc.Step())
		}
		pc.Check(t, 3)
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	}
}

// buildFakeCUDA builds the test-only libcuda and libcublas
// (internal/cudadev/fakelib), or skips the test where gcc is missing.
func buildFakeCUDA(t testing.TB) fakelib.Paths {
	t.Helper()
	p, err := fakelib.Build()
	if errors.Is(err, fakelib.ErrNoCompiler) {
		t.Skip(err)
	}
	require.NoError(t, err)
	return p
}

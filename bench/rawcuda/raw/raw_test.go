package raw

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakelib.Cleanup()
	os.Exit(code)
}

func TestValidate(t *testing.T) {
	good := Config{N: 8, Iters: 1, Repeat: 3, Programs: Programs}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Config{
		{N: 0, Iters: 1, Repeat: 3},
		{N: 8, Iters: 0, Repeat: 3},
		{N: 8, Iters: 1, Warmup: -1, Repeat: 3},
		{N: 8, Iters: 1, Repeat: 0},
		{N: 8, Iters: 1, Repeat: 3, Programs: []string{"mixed"}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
		if _, err := Run(bad); err == nil {
			t.Errorf("%+v: Run ran", bad)
		}
	}
}

func TestRunWithoutDriver(t *testing.T) {
	t.Setenv(cuda.EnvLibCUDA, filepath.Join(t.TempDir(), "libcuda.so.1"))
	if _, err := Run(Config{N: 8, Iters: 1, Repeat: 3, Programs: Programs}); !errors.Is(err, cuda.ErrNoDriver) {
		t.Fatalf("got %v, want cuda.ErrNoDriver", err)
	}
}

// Every program on the fake libcuda and libcublas (host memory, kernels
// and sgemm on the CPU), checked against the CPU reference by Run.
func TestRunOnFakeCUDA(t *testing.T) {
	p, err := fakelib.Build()
	if errors.Is(err, fakelib.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(cuda.EnvLibCUDA, p.CUDA)
	t.Setenv(cublas.EnvLibCUBLAS, p.CUBLAS)
	for _, perCall := range []bool{false, true} {
		out, err := Run(Config{N: 8, Iters: 3, Warmup: 1, Repeat: 2, Seed: 1, PerCall: perCall, Programs: Programs})
		if err != nil {
			t.Fatal(err)
		}
		if out.Meta.Device == "" || out.Meta.ContextPerCall != perCall || len(out.Results) != len(Programs) {
			t.Fatalf("%+v", out)
		}
		sums := map[string]float64{}
		for _, r := range out.Results {
			if r.TotalMedianUS <= 0 || r.Checksum == 0 || r.MaxRelErr > 1e-5 || r.Iterations != 3 {
				t.Errorf("%+v", r)
			}
			sums[r.Program] = r.Checksum
		}
		// The three mixed shapes compute the same thing.
		if sums["mixed/event"] != sums["mixed/one-stream"] || sums["mixed/host-wait"] != sums["mixed/one-stream"] {
			t.Errorf("mixed checksums differ: %v", sums)
		}
	}
}

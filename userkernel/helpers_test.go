package userkernel

import (
	"os"
	"os/exec"
	"testing"

	"github.com/rocsync/rocsync/kernels"
)

// saxpySource is the user kernel most tests build: y = a*x + y.
const saxpySource = `
kernel void saxpy(global float* y, global const float* x, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}
`

// needClang skips a test on a machine without the compiler (CI installs
// clang-22 and lld-22).
func needClang(t testing.TB) {
	t.Helper()
	if os.Getenv("ROCSYNC_CLANG") != "" {
		return
	}
	for _, n := range clangNames {
		if _, err := exec.LookPath(n); err == nil {
			return
		}
	}
	t.Skip("no clang-22 or clang in PATH")
}

func newBuilder(t testing.TB) *Builder {
	t.Helper()
	needClang(t)
	return NewBuilder(Options{CacheDir: t.TempDir()})
}

func saxpy(t testing.TB) *Source {
	t.Helper()
	src, err := OpenCL(saxpySource)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// acceptOnly makes a Device.Accepts that takes one code-object version.
func acceptOnly(v kernels.CodeObjectVersion) func(kernels.CodeObjectVersion) bool {
	return func(x kernels.CodeObjectVersion) bool { return x == v }
}

func buildKernel(t testing.TB, b *Builder, src *Source, dev Device, name string) *Signature {
	t.Helper()
	img, err := b.Build(src, dev)
	if err != nil {
		t.Fatal(err)
	}
	k, err := img.Kernel(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

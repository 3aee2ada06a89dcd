// Package fakelib builds, for tests, the stand-ins for libcuda.so.1 and
// libcublas.so.13 whose C sources are cuda/testdata/fakecuda.c and
// cublas/testdata/fakecublas.c, so that the purego bindings and the CUDA
// driver can be exercised on a machine without an NVIDIA GPU.
package fakelib

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// ErrNoCompiler is returned when gcc is not installed, or the C sources are
// not at hand (a test binary run away from the source tree): tests skip
// then.
var ErrNoCompiler = errors.New("fakelib: gcc or the C sources are missing, so the fake CUDA libraries cannot be built")

// Paths are the built libraries.
type Paths struct {
	CUDA, CUBLAS string
}

var built struct {
	once  sync.Once
	paths Paths
	err   error
}

// Build compiles both fakes once per process into a temporary directory
// (removed by Cleanup) and returns their paths.
func Build() (Paths, error) {
	built.once.Do(func() { built.paths, built.err = build() })
	return built.paths, built.err
}

var tmpDir string

// Cleanup removes what Build made.
func Cleanup() {
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
}

// moduleRoot finds the directory holding the C sources: from the working
// directory upwards (go test runs in the package's directory), then from
// this file's compile-time path.
func moduleRoot() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, self, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(self))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "cuda", "testdata", "fakecuda.c")); err == nil {
				if _, err := os.Stat(filepath.Join(d, "cublas", "testdata", "fakecublas.c")); err == nil {
					return d
				}
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ""
}

func build() (Paths, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return Paths{}, ErrNoCompiler
	}
	root := moduleRoot()
	if root == "" {
		return Paths{}, ErrNoCompiler
	}
	srcCUDA := filepath.Join(root, "cuda", "testdata", "fakecuda.c")
	srcBLAS := filepath.Join(root, "cublas", "testdata", "fakecublas.c")
	if tmpDir, err = os.MkdirTemp("", "fakecuda"); err != nil {
		return Paths{}, err
	}
	p := Paths{CUDA: filepath.Join(tmpDir, "libcuda.so.1"), CUBLAS: filepath.Join(tmpDir, "libcublas.so.13")}
	// No -soname: a later dlopen by bare name must not find a fake through
	// the loader's list of loaded objects.
	for _, job := range [][2]string{{p.CUDA, srcCUDA}, {p.CUBLAS, srcBLAS}} {
		cmd := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-ffp-contract=off", "-Wall", "-Werror", "-o", job[0], job[1], "-lm", "-ldl")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return Paths{}, errors.New("fakelib: building " + filepath.Base(job[1]) + ": " + err.Error() + "\n" + string(msg))
		}
	}
	return p, nil
}

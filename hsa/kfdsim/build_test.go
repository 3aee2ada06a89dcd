package kfdsim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
)

func buildOrSkip(t *testing.T, dir string) string {
	t.Helper()
	d, err := Build(dir)
	if errors.Is(err, ErrUnavailable) && os.Getenv(EnvRequired) != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A cache entry is reused when it verifies, and a corrupt one is rebuilt,
// never handed out.
func TestBuildCachesAndRebuildsCorruptEntry(t *testing.T) {
	cache := t.TempDir()
	d1 := buildOrSkip(t, cache)
	lib := filepath.Join(d1, LibraryName)
	st, err := os.Stat(d1)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("entry dir mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
	fst, err := os.Stat(lib)
	if err != nil || fst.Mode().Perm() != 0o600 {
		t.Fatalf("library mode %v (%v), want 0600", fst.Mode().Perm(), err)
	}
	good, _ := os.ReadFile(lib)
	if d2 := buildOrSkip(t, cache); d2 != d1 {
		t.Errorf("second build in %s, first in %s", d2, d1)
	}
	if st2, _ := os.Stat(lib); !st2.ModTime().Equal(fst.ModTime()) {
		t.Error("a verified entry was rebuilt")
	}
	for _, corrupt := range []func(){
		func() { _ = os.WriteFile(lib, append(bytes.Clone(good), 0), 0o600) },
		func() { _ = os.WriteFile(lib, good[:len(good)/2], 0o600) },
		func() { _ = os.Remove(filepath.Join(d1, hashFile)) },
	} {
		corrupt()
		if verify(d1) {
			t.Fatal("corrupted entry still verifies")
		}
		if d3 := buildOrSkip(t, cache); d3 != d1 {
			t.Errorf("rebuilt into %s, want %s", d3, d1)
		}
		if got, _ := os.ReadFile(lib); !bytes.Equal(got, good) || !verify(d1) {
			t.Error("corrupt entry was not rebuilt to the same library")
		}
	}
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".build-") {
			t.Errorf("temporary build directory left behind: %s", e.Name())
		}
	}
}

func TestBuildWithoutGCCIsUnavailable(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Build(t.TempDir())
	var ue *UnavailableError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) || !strings.Contains(ue.Missing, "gcc") {
		t.Fatalf("Build without gcc: %v, want an *UnavailableError naming gcc", err)
	}
}

// A compiler error is a *BuildError with the compiler's output, not
// ErrUnavailable (which tests would skip on).
func TestBuildFailureIsBuildError(t *testing.T) {
	for _, h := range requiredHeaders {
		if _, err := os.Stat(h); err != nil {
			t.Skipf("%s missing", h)
		}
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo fake-gcc 1.0; exit 0; fi\necho 'fake-gcc: boom' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "gcc"), []byte(fake), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	cache := t.TempDir()
	_, err := Build(cache)
	var be *BuildError
	if !errors.As(err, &be) || errors.Is(err, ErrUnavailable) || !strings.Contains(be.Output, "boom") {
		t.Fatalf("Build with a failing compiler: %v, want a *BuildError with its output", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("failed build left %d entries in the cache", len(ents))
	}
}

func TestCacheKeyCoversSourcesAndCompiler(t *testing.T) {
	files, err := sourceFiles()
	if err != nil {
		t.Fatal(err)
	}
	if _, stub := files["stub_exec.c"]; stub == HasExecutor() {
		t.Errorf("stub_exec.c in the build = %v with exec.c present = %v", stub, HasExecutor())
	}
	k := cacheKey(files, "gcc 12")
	if cacheKey(files, "gcc 13") == k {
		t.Error("key ignores the compiler version")
	}
	for name, b := range files {
		changed := map[string][]byte{}
		for n, c := range files {
			changed[n] = c
		}
		changed[name] = append(bytes.Clone(b), ' ')
		if cacheKey(changed, "gcc 12") == k {
			t.Errorf("key ignores %s", name)
		}
	}
}

// The child inherits the parent's environment (NCCL, HSA, ...) with the
// simulated driver's variables set over it.
func TestChildEnv(t *testing.T) {
	parent := []string{"NCCL_DEBUG=INFO", "LD_PRELOAD=/opt/x.so", "LD_LIBRARY_PATH=/opt/lib", "HSA_ENABLE_SDMA=1",
		"KFDSIM_GPUS=old", "HOME=/h"}
	env := childEnv(parent, "/cache/k", "gfx90a", "TestX", Options{Env: []string{"EXTRA=1"}})
	for _, want := range []string{"NCCL_DEBUG=INFO", "HOME=/h", "LD_PRELOAD=/cache/k/" + LibraryName + ":/opt/x.so",
		"LD_LIBRARY_PATH=/opt/lib", "HSA_ENABLE_SDMA=0",
		"KFDSIM_GPUS=gfx90a", EnvChild + "=TestX", "EXTRA=1"} {
		if !slices.Contains(env, want) {
			t.Errorf("child env lacks %s: %v", want, env)
		}
	}
	seen := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if seen[k] {
			t.Errorf("%s set twice in %v", k, env)
		}
		seen[k] = true
	}
	// Inside a release's root the loader preloads the driver (--preload):
	// no LD_PRELOAD of it, and KFDSIM_ROCM names the release's ROCr.
	env = childEnv(parent, "/cache/k", "gfx90a", "TestX",
		Options{Release: Release{Name: "sid", Root: &rocmroot.Root{Dir: "/r"}, KFD: "6.4", HIPMajor: 6}})
	if !slices.Contains(env, EnvROCm+"=6.4") || slices.Contains(env, "LD_PRELOAD=/cache/k/"+LibraryName+":/opt/x.so") {
		t.Errorf("in a root: %v", env)
	}
	if _, err := LookupRelease(context.Background(), "bookworm"); !errors.Is(err, ErrUnknownRelease) {
		t.Errorf("LookupRelease(bookworm) = %v, want ErrUnknownRelease", err)
	}
	if r, err := LookupRelease(context.Background(), ""); err != nil || r.Name != "5.2.3" || r.Root != nil || r.HIPMajor != 5 {
		t.Errorf("LookupRelease(\"\") = %+v, %v", r, err)
	}
	env = childEnv([]string{"HSA_ENABLE_SDMA=0"}, "/cache/k", "gfx90a", "TestX", Options{SDMA: true})
	if !slices.Contains(env, "HSA_ENABLE_SDMA=1") || !slices.Contains(env, "LD_PRELOAD=/cache/k/"+LibraryName) {
		t.Errorf("with SDMA: %v", env)
	}
}

package kfdsim

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/rocsync/rocsync/internal/diskcache"
)

// csrc holds the simulated driver's C sources. exec.c (the shader executor)
// replaces stub_exec.c whenever it is present.
//
//go:embed csrc
var csrc embed.FS

// LibraryName is the file the cache directory holds: the simulated driver,
// an LD_PRELOAD library (and its soname, under which a process that preloads
// it finds it again with dlopen).
const LibraryName = "libkfdsim.so"

// ErrUnavailable is matched (errors.Is) by the error Build returns when
// this machine cannot build the simulated driver: gcc or the headers it
// compiles against (libhsakmt-dev's hsakmt.h for the topology's bit
// fields, libhsa-runtime-dev's hsa/amd_hsa_queue.h for the AQL queue) are
// missing.
var ErrUnavailable = errors.New("kfdsim: cannot build the simulated driver here")

// UnavailableError says what is missing.
type UnavailableError struct{ Missing string }

func (e *UnavailableError) Error() string {
	return "kfdsim: cannot build the simulated driver: " + e.Missing
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// BuildError is a failed compilation, with gcc's output.
type BuildError struct {
	Output string
	Err    error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("kfdsim: gcc failed: %v\n%s", e.Err, e.Output)
}

func (e *BuildError) Unwrap() error { return e.Err }

// gccFlags are part of the cache key.
var gccFlags = []string{
	"-std=gnu11", "-O2", "-g", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
	"-shared", "-Wl,-soname," + LibraryName, "-pthread",
}

// requiredHeaders are checked before compiling, so a machine without them
// gets ErrUnavailable rather than a compiler error.
var requiredHeaders = []string{"/usr/include/hsakmt.h", "/usr/include/hsa/amd_hsa_queue.h"}

// sourceFiles returns the C files to compile (name -> content) and the
// other files (headers, version script) the build reads.
func sourceFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(csrc, "csrc", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := csrc.ReadFile(path)
		if err != nil {
			return err
		}
		files[filepath.Base(path)] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, ok := files["exec.c"]; ok {
		delete(files, "stub_exec.c")
	}
	return files, nil
}

func gccVersion(gcc string) (string, error) {
	out, err := exec.Command(gcc, "--version").Output()
	if err != nil {
		return "", &UnavailableError{Missing: fmt.Sprintf("%s --version: %v", gcc, err)}
	}
	return string(out), nil
}

// cacheKey hashes the sources, the gcc version and the flags.
func cacheKey(files map[string][]byte, gccVer string) string {
	h := sha256.New()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	fmt.Fprintf(h, "gcc\x00%s\x00flags\x00%s", gccVer, strings.Join(gccFlags, " "))
	return hex.EncodeToString(h.Sum(nil))
}

const hashFile = LibraryName + ".sha256"

// entryManifest is the manifest of a cache entry: the library's hash,
// recorded beside it when it was built.
var entryManifest = diskcache.Manifest{Name: hashFile, Files: []string{LibraryName}}

// verify reports whether dir holds a library whose content matches the
// hash recorded beside it when it was built.
func verify(dir string) bool { return entryManifest.Verify(dir) == nil }

// DefaultCacheDir is os.UserCacheDir()/rocsync/kfdsim.
func DefaultCacheDir() (string, error) { return diskcache.UserDir("kfdsim") }

// Build compiles the simulated driver into cacheDir/<key>/libkfdsim.so, where key is
// the SHA-256 of the sources, gcc's version and the flags, and returns that
// directory (LD_PRELOAD names the library in it). An entry that exists and verifies is
// reused; a corrupt one is rebuilt (internal/diskcache: built in a
// temporary directory and renamed into place, so a reader never sees a half
// written one). cacheDir "" means DefaultCacheDir.
func Build(cacheDir string) (string, error) {
	if cacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return "", &UnavailableError{Missing: "a user cache directory: " + err.Error()}
		}
		cacheDir = d
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", &UnavailableError{Missing: "gcc (apt-get install gcc): " + err.Error()}
	}
	for _, h := range requiredHeaders {
		if _, err := os.Stat(h); err != nil {
			return "", &UnavailableError{Missing: h + " (apt-get install libhsakmt-dev libhsa-runtime-dev)"}
		}
	}
	files, err := sourceFiles()
	if err != nil {
		return "", err
	}
	ver, err := gccVersion(gcc)
	if err != nil {
		return "", err
	}
	return diskcache.Get(cacheDir, cacheKey(files, ver), entryManifest, func(dir string) error {
		return compile(gcc, files, dir)
	})
}

// compile builds the library from files into dir/libkfdsim.so.
func compile(gcc string, files map[string][]byte, dir string) error {
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o700); err != nil {
		return err
	}
	var cfiles []string
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(src, name), b, 0o600); err != nil {
			return err
		}
		if strings.HasSuffix(name, ".c") {
			cfiles = append(cfiles, filepath.Join(src, name))
		}
	}
	sort.Strings(cfiles)
	args := append([]string{}, gccFlags...)
	// The temporary source path must not reach the debug info: a rebuild
	// of the same key gives the same bytes.
	args = append(args, "-ffile-prefix-map="+src+"=kfdsim/csrc",
		"-Wl,--version-script="+filepath.Join(src, "shim.map"), "-o", filepath.Join(dir, LibraryName))
	args = append(args, cfiles...)
	args = append(args, "-ldl")
	cmd := exec.Command(gcc, args...)
	var msg bytes.Buffer
	cmd.Stdout = &msg
	cmd.Stderr = &msg
	if err := cmd.Run(); err != nil {
		return &BuildError{Output: msg.String(), Err: err}
	}
	return os.RemoveAll(src)
}

// HasExecutor reports whether the built library contains the real shader
// executor (csrc/exec.c). Without it every kernel dispatch faults its queue,
// so HIP calls that run ROCr's or HIP's blit kernels cannot work.
func HasExecutor() bool {
	_, err := fs.Stat(csrc, "csrc/exec.c")
	return err == nil
}

var (
	libOnce sync.Once
	libDir  string
	libErr  error
)

// Library is Build(""), done once per process.
func Library() (string, error) {
	libOnce.Do(func() { libDir, libErr = Build("") })
	return libDir, libErr
}

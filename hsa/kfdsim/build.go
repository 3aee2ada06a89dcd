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
)

// csrc holds the thunk's C sources. exec.c (the shader executor) replaces
// stub_exec.c whenever it is present.
//
//go:embed csrc
var csrc embed.FS

// LibraryName is the file the cache directory holds: the soname ROCr loads.
const LibraryName = "libhsakmt.so.1"

// ErrUnavailable is matched (errors.Is) by the error Build returns when
// this machine cannot build the simulated driver: gcc or the headers it
// compiles against (libhsakmt-dev's hsakmt.h, libhsa-runtime-dev's
// hsa/amd_hsa_queue.h) are missing.
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

// verify reports whether dir holds a library whose content matches the
// hash recorded beside it when it was built.
func verify(dir string) bool {
	lib, err := os.ReadFile(filepath.Join(dir, LibraryName))
	if err != nil {
		return false
	}
	want, err := os.ReadFile(filepath.Join(dir, hashFile))
	if err != nil {
		return false
	}
	sum := sha256.Sum256(lib)
	return strings.TrimSpace(string(want)) == hex.EncodeToString(sum[:])
}

// DefaultCacheDir is os.UserCacheDir()/rocsync/kfdsim.
func DefaultCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "rocsync", "kfdsim"), nil
}

// Build compiles the thunk into cacheDir/<key>/libhsakmt.so.1, where key is
// the SHA-256 of the sources, gcc's version and the flags, and returns that
// directory (for LD_LIBRARY_PATH). An entry that exists and verifies is
// reused; a corrupt one is removed and rebuilt. Entries are built in a
// temporary directory and renamed into place, so a reader never sees a half
// written one. cacheDir "" means DefaultCacheDir.
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
	final := filepath.Join(cacheDir, cacheKey(files, ver))
	if verify(final) {
		return final, nil
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return "", err
	}
	if _, err := os.Stat(final); err == nil {
		// Present but not verified: corrupt or truncated. Never load it.
		if err := os.RemoveAll(final); err != nil {
			return "", fmt.Errorf("kfdsim: removing corrupt cache entry %s: %w", final, err)
		}
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := os.Chmod(tmp, 0o700); err != nil {
		return "", err
	}
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o700); err != nil {
		return "", err
	}
	var cfiles []string
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(src, name), b, 0o600); err != nil {
			return "", err
		}
		if strings.HasSuffix(name, ".c") {
			cfiles = append(cfiles, filepath.Join(src, name))
		}
	}
	sort.Strings(cfiles)
	out := filepath.Join(tmp, LibraryName)
	args := append([]string{}, gccFlags...)
	// The temporary source path must not reach the debug info: a rebuild
	// of the same key gives the same bytes.
	args = append(args, "-ffile-prefix-map="+src+"=kfdsim/csrc",
		"-Wl,--version-script="+filepath.Join(src, "libhsakmt.map"), "-o", out)
	args = append(args, cfiles...)
	cmd := exec.Command(gcc, args...)
	var msg bytes.Buffer
	cmd.Stdout = &msg
	cmd.Stderr = &msg
	if err := cmd.Run(); err != nil {
		return "", &BuildError{Output: msg.String(), Err: err}
	}
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	lib, err := os.ReadFile(out)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(out, 0o600); err != nil {
		return "", err
	}
	sum := sha256.Sum256(lib)
	if err := os.WriteFile(filepath.Join(tmp, hashFile), []byte(hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process may have renamed its identical build first.
		if verify(final) {
			return final, nil
		}
		return "", err
	}
	return final, nil
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

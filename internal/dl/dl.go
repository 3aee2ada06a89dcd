// Package dl finds and opens the ROCm and CUDA shared libraries with purego,
// searching $ROCM_PATH/lib, /opt/rocm/lib and then the system paths, and
// reports every place it looked when none works.
package dl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// ErrNotFound is matched by errors.Is for every *NotFoundError.
var ErrNotFound = errors.New("shared library not found")

// NotFoundError lists where a library was looked for.
type NotFoundError struct {
	Library string   // what was wanted, e.g. "libhsa-runtime64"
	Tried   []string // each path or soname tried, in order
	Last    string   // the last dlopen error text
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s not found; %s", e.Library, e.Attempts())
}

// Attempts says where the library was looked for: "tried a, b (last
// error: text)". The bindings' own not-found errors end with it.
func (e *NotFoundError) Attempts() string {
	msg := "tried " + strings.Join(e.Tried, ", ")
	if e.Last != "" {
		msg += " (last error: " + e.Last + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// SearchDirs returns the directories searched before the system paths:
// $ROCM_PATH/lib (when set), then /opt/rocm/lib, then extra.
func SearchDirs(extra ...string) []string {
	var dirs []string
	if p := os.Getenv("ROCM_PATH"); p != "" {
		dirs = append(dirs, filepath.Join(p, "lib"))
	}
	dirs = append(dirs, "/opt/rocm/lib")
	return append(dirs, extra...)
}

// CUDAToolkitDirs returns the CUDA toolkits' library directories under
// /usr/local: /usr/local/cuda's, then each /usr/local/cuda-<version>'s,
// newest first.
func CUDAToolkitDirs() []string {
	dirs := []string{"/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/lib64"}
	found, _ := filepath.Glob("/usr/local/cuda-*/targets/x86_64-linux/lib")
	slices.Sort(found)
	slices.Reverse(found)
	return append(dirs, found...)
}

// Dlopen is purego.Dlopen on one locked OS thread. purego reads a failed
// dlopen's text with a second call to dlerror, and glibc keeps that text
// per thread (POSIX dlerror): a goroutine moved to another thread between
// the two calls, as a loaded scheduler does, gets no text or another
// thread's.
func Dlopen(path string, mode int) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(path, mode)
}

// Dlsym is purego.Dlsym on one locked OS thread, for the same reason as
// Dlopen: a missing symbol's error text is read by a second call.
func Dlsym(handle uintptr, name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlsym(handle, name)
}

// Library is an opened shared library.
type Library struct {
	Handle uintptr
	Path   string // the path or soname that opened
}

// Open tries each soname in each directory, then each bare soname through the
// dynamic loader's own search (system paths, LD_LIBRARY_PATH).
func Open(library string, sonames []string, dirs []string) (*Library, error) {
	nf := &NotFoundError{Library: library}
	try := func(path string) *Library {
		nf.Tried = append(nf.Tried, path)
		h, err := Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			nf.Last = err.Error()
			return nil
		}
		return &Library{Handle: h, Path: path}
	}
	for _, d := range dirs {
		for _, s := range sonames {
			p := filepath.Join(d, s)
			if _, err := os.Stat(p); err != nil {
				nf.Tried = append(nf.Tried, p)
				continue
			}
			if l := try(p); l != nil {
				return l, nil
			}
		}
	}
	for _, s := range sonames {
		if l := try(s); l != nil {
			return l, nil
		}
	}
	return nil, nf
}

// MissingSymbolsError lists the symbols a library does not export.
type MissingSymbolsError struct {
	Library string
	Missing []string
}

func (e *MissingSymbolsError) Error() string {
	return fmt.Sprintf("%s lacks symbols: %s", e.Library, strings.Join(e.Missing, ", "))
}

// Symbols resolves every name and returns the addresses in the same order,
// or a *MissingSymbolsError naming all that failed.
func (l *Library) Symbols(names []string) ([]uintptr, error) {
	addrs := make([]uintptr, len(names))
	var missing []string
	for i, n := range names {
		a, err := Dlsym(l.Handle, n)
		if err != nil || a == 0 {
			missing = append(missing, n)
			continue
		}
		addrs[i] = a
	}
	if len(missing) > 0 {
		return nil, &MissingSymbolsError{Library: l.Path, Missing: missing}
	}
	return addrs, nil
}

// LazySymbols is a set of optional entry points resolved together on first
// use, so that a library without them still opens and only the calls that
// need them fail. Its zero value is ready; it is safe for concurrent use.
type LazySymbols struct {
	once sync.Once
	addr []uintptr
	err  error
}

// Addr returns the address of names[i] in the library (handle, opened as
// path), resolving every one of names on the first call. When the library
// lacks any of them, every call returns one error, made on the first:
// unavailable (for errors.Is), the path and the names missing. Every call
// must pass the same names.
func (s *LazySymbols) Addr(handle uintptr, path string, names []string, i int, unavailable error) (uintptr, error) {
	s.once.Do(func() {
		s.addr = make([]uintptr, len(names))
		var missing []string
		for j, name := range names {
			a, err := Dlsym(handle, name)
			if err != nil || a == 0 {
				missing = append(missing, name)
				continue
			}
			s.addr[j] = a
		}
		if missing != nil {
			s.err = fmt.Errorf("%w: %s lacks %v", unavailable, path, missing)
		}
	})
	if s.err != nil {
		return 0, s.err
	}
	return s.addr[i], nil
}

package nccl

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/rocsync/rocsync/internal/cmem"
	"github.com/rocsync/rocsync/internal/dl"
)

// EnvNVLS is the variable with which NCCL enables its NVLink multicast
// (NVLS) algorithms. NCCL reads it with getenv when a communicator is
// first made; values in ~/.nccl.conf or /etc/nccl.conf apply only to
// variables that are not set, so setting it first also overrides them.
const EnvNVLS = "NCCL_NVLS_ENABLE"

// ErrNVLSEnabled is matched by errors.Is when the environment asks for
// NVLink multicast and Open therefore refuses to load the library.
var ErrNVLSEnabled = errors.New("nccl: NVLink multicast requested")

// NVLSError says which environment asked for NVLink multicast.
//
// Why refuse rather than override: the value is the user's explicit
// request, and a job that relies on it would silently run differently if
// rocsync changed it, with a log line as the only trace. Multicast can take
// a shared host's GPUs out of service for a long time, so rocsync never
// runs NCCL with it; refusing keeps both promises and says how to proceed.
type NVLSError struct {
	Value string // what NCCL_NVLS_ENABLE holds
	Where string // "Go environment", "C environment" or "child environment"
}

func (e *NVLSError) Error() string {
	return fmt.Sprintf("nccl: %s=%q in the %s: rocsync runs NCCL only with NVLink multicast off, "+
		"because a program that uses multicast can take the GPUs of a shared host out of service; "+
		"unset %s or set it to 0", EnvNVLS, e.Value, e.Where, EnvNVLS)
}

// Is makes errors.Is(err, ErrNVLSEnabled) true.
func (e *NVLSError) Is(target error) bool { return target == ErrNVLSEnabled }

// nvlsAllowed reports whether a value of NCCL_NVLS_ENABLE may be replaced
// by "0": unset or empty (NCCL then uses its default, which enables NVLS
// where the hardware has it), or "0" itself. Anything else, "1" or a value
// NCCL would not parse, is a request rocsync refuses.
func nvlsAllowed(v string) bool { return v == "" || v == "0" }

var libcEnv struct {
	once           sync.Once
	getenv, setenv uintptr
	err            error
}

func loadLibcEnv() error {
	s := &libcEnv
	s.once.Do(func() {
		var h uintptr
		if h, s.err = cmem.OpenLibc(); s.err != nil {
			s.err = fmt.Errorf("nccl: cannot open libc to set %s: %w", EnvNVLS, s.err)
			return
		}
		if s.getenv, s.err = dl.Dlsym(h, "getenv"); s.err != nil {
			return
		}
		s.setenv, s.err = dl.Dlsym(h, "setenv")
	})
	if s.err != nil {
		return s.err
	}
	return cmem.Libc()
}

// cString copies s into C memory with a NUL; the caller frees it.
func cString(s string) unsafe.Pointer {
	p := cmem.Alloc(uintptr(len(s) + 1))
	if p != nil {
		copy(unsafe.Slice((*byte)(p), len(s)), s)
	}
	return p
}

// cGetenv is libc's getenv: what C code in this process sees.
func cGetenv(name string) (string, bool) {
	n := cString(name)
	defer cmem.Free(n)
	p := cmem.Call(libcEnv.getenv, uintptr(n))
	if p == 0 {
		return "", false
	}
	return cmem.GoString(p), true
}

func cSetenv(name, value string) error {
	n, v := cString(name), cString(value)
	defer cmem.Free(n)
	defer cmem.Free(v)
	if int32(cmem.Call(libcEnv.setenv, uintptr(n), uintptr(v), 1)) != 0 {
		return fmt.Errorf("nccl: setenv(%s) failed", name)
	}
	return nil
}

var nvlsMu sync.Mutex

// DisableNVLS makes NCCL_NVLS_ENABLE "0" in both the Go and the C
// environment of this process, or returns an *NVLSError (matching
// ErrNVLSEnabled) when either holds another non-empty value. Open calls it
// before loading the library; it is safe to call again.
//
// In a binary without cgo, purego's fake runtime/cgo installs libc's
// setenv as the runtime's hook, so os.Setenv reaches the C environ as it
// does with cgo. DisableNVLS still reads the value back with libc's getenv
// and calls libc's setenv itself when it differs, so the guarantee does
// not rest on that hook.
func DisableNVLS() error {
	if err := loadLibcEnv(); err != nil {
		return err
	}
	nvlsMu.Lock()
	defer nvlsMu.Unlock()
	if v := os.Getenv(EnvNVLS); !nvlsAllowed(v) {
		return &NVLSError{Value: v, Where: "Go environment"}
	}
	if v, _ := cGetenv(EnvNVLS); !nvlsAllowed(v) {
		return &NVLSError{Value: v, Where: "C environment"}
	}
	if os.Getenv(EnvNVLS) != "0" {
		if err := os.Setenv(EnvNVLS, "0"); err != nil {
			return err
		}
	}
	if v, _ := cGetenv(EnvNVLS); v != "0" {
		if err := cSetenv(EnvNVLS, "0"); err != nil {
			return err
		}
	}
	if v, ok := cGetenv(EnvNVLS); !ok || v != "0" {
		return fmt.Errorf("nccl: %s reads %q in the C environment after setting it to 0", EnvNVLS, v)
	}
	return nil
}

// ChildEnv returns a copy of env (in os.Environ form) for a process that
// may load NCCL: every NCCL_NVLS_ENABLE entry is replaced by one
// NCCL_NVLS_ENABLE=0. It returns an *NVLSError when env asks for another
// value. Use it for every worker process (exec.Cmd.Env), so that a child
// built with its own environment keeps multicast off too.
func ChildEnv(env []string) ([]string, error) {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k != EnvNVLS {
			out = append(out, kv)
			continue
		}
		if !nvlsAllowed(v) {
			return nil, &NVLSError{Value: v, Where: "child environment"}
		}
	}
	return append(out, EnvNVLS+"=0"), nil
}

package rocmroot

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The environment Command gives a program, so that it can start itself
// again inside the same root (SelfCommand): through the root's loader,
// /proc/self/exe and os.Executable() name the loader, not the program.
const (
	envRoot    = "ROCSYNC_ROCM_ROOT"
	envProgram = "ROCSYNC_ROCM_ROOT_PROGRAM"
	envPreload = "ROCSYNC_ROCM_ROOT_PRELOAD"
)

// Loader is the root's own dynamic loader.
func (r *Root) Loader() string { return filepath.Join(r.Dir, loaderPath) }

// LibraryPath is the root's library folders, for the loader's
// --library-path.
func (r *Root) LibraryPath() []string {
	var out []string
	for _, d := range libraryDirs {
		p := filepath.Join(r.Dir, d)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// RunOptions configure Command.
type RunOptions struct {
	// Preload are libraries the loader loads before the program's own
	// (ld.so --preload, as LD_PRELOAD but for this program only): the
	// simulated driver's interposer, for example. Paths are made
	// absolute.
	Preload []string
	// Env is the program's environment; nil is os.Environ(). LD_PRELOAD,
	// LD_LIBRARY_PATH and LD_AUDIT are removed from it: the root's loader
	// gets its configuration from its arguments, which, unlike the
	// environment, do not reach the host tools the program starts.
	Env []string
}

// Command returns a command that runs prog inside the root: the root's
// loader starts it with the root's library path, so that the program and
// every library it loads (its dlopen calls included) come from the root.
// Programs built with CGO_ENABLED=0 and purego run this way; argv[0] is
// prog. The environment carries the root, the program and the preloads so
// that the program can start itself again inside the root (SelfCommand).
func (r *Root) Command(ctx context.Context, o RunOptions, prog string, args ...string) *exec.Cmd {
	if abs, err := filepath.Abs(prog); err == nil && strings.ContainsRune(prog, filepath.Separator) {
		prog = abs
	} else if p, err := exec.LookPath(prog); err == nil {
		prog, _ = filepath.Abs(p)
	}
	var pre []string
	for _, p := range o.Preload {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		pre = append(pre, p)
	}
	argv := []string{"--library-path", strings.Join(r.LibraryPath(), ":")}
	if len(pre) > 0 {
		argv = append(argv, "--preload", strings.Join(pre, ":"))
	}
	argv = append(argv, prog)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, r.Loader(), argv...)
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(HostEnv(env), envRoot+"="+r.Dir, envProgram+"="+prog, envPreload+"="+strings.Join(pre, ":"))
	return cmd
}

// HostEnv returns env without what configures a root's loader or names a
// root (LD_LIBRARY_PATH, LD_PRELOAD, LD_AUDIT, ROCSYNC_ROCM_ROOT*). Host
// tools (gcc, /bin/true) started from a program that runs in a root with
// the root's LD_LIBRARY_PATH fail to load (the root's libc is not theirs:
// "__tunable_is_initialized, version GLIBC_PRIVATE not found"); start them
// with this environment.
func HostEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT", envRoot, envProgram, envPreload:
			continue
		}
		out = append(out, kv)
	}
	return out
}

// HostCommand is exec.CommandContext with HostEnv(os.Environ()).
func HostCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = HostEnv(os.Environ())
	return cmd
}

// Current returns the root this process runs in, started by Command, and
// the program's path; ok is false when the process was not started so
// (its executable is not the root's loader).
func Current() (r *Root, program string, ok bool) {
	dir, prog := os.Getenv(envRoot), os.Getenv(envProgram)
	if dir == "" || prog == "" {
		return nil, "", false
	}
	r = &Root{Dir: dir}
	exe, err := os.Executable()
	if err != nil {
		return nil, "", false
	}
	exe, err1 := filepath.EvalSymlinks(exe)
	loader, err2 := filepath.EvalSymlinks(r.Loader())
	if err1 != nil || err2 != nil || exe != loader {
		return nil, "", false
	}
	return r, prog, true
}

// Executable is os.Executable, but inside a root (Current) the program's
// path rather than the loader's.
func Executable() (string, error) {
	if _, prog, ok := Current(); ok {
		return prog, nil
	}
	return os.Executable()
}

// SelfCommand returns a command that starts this program again with args:
// inside the same root, with the same preloads, when this process runs in
// one (Current), else as os.Executable(). The environment is the
// process's own.
func SelfCommand(ctx context.Context, args ...string) (*exec.Cmd, error) {
	if r, prog, ok := Current(); ok {
		var pre []string
		if p := os.Getenv(envPreload); p != "" {
			pre = strings.Split(p, ":")
		}
		return r.Command(ctx, RunOptions{Preload: pre}, prog, args...), nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, exe, args...), nil
}

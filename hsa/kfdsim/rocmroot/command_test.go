package rocmroot

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var probe struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if probe.dir != "" {
		os.RemoveAll(probe.dir)
	}
	os.Exit(code)
}

// probeBinary builds cmd/rocmprobe with CGO_ENABLED=0 (purego), once.
func probeBinary(t *testing.T) string {
	t.Helper()
	probe.once.Do(func() {
		probe.dir, probe.err = os.MkdirTemp("", "rocmroot-probe-")
		if probe.err != nil {
			return
		}
		probe.path = filepath.Join(probe.dir, "rocmprobe")
		goTool, err := exec.LookPath("go")
		if err != nil {
			probe.err = fmt.Errorf("building cmd/rocmprobe: %w", err)
			return
		}
		cmd := HostCommand(context.Background(), goTool, "build", "-o", probe.path, "./cmd/rocmprobe")
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			probe.err = fmt.Errorf("go build ./cmd/rocmprobe: %v\n%s", err, out)
		}
	})
	if probe.err != nil {
		t.Fatal(probe.err)
	}
	return probe.path
}

// parseProbe reads the probe's "key=value" lines.
func parseProbe(out string) map[string]string {
	kv := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// hostRoot makes a root of copies of this machine's loader and the
// libraries the probe needs, so that Command can be checked without the
// network.
func hostRoot(t *testing.T) *Root {
	t.Helper()
	hostLib := "/lib/x86_64-linux-gnu"
	loader, err := filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2")
	if err != nil {
		t.Skip("no host loader:", err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "usr/lib/x86_64-linux-gnu")
	if err := os.MkdirAll(lib, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "usr/lib64"), 0o700); err != nil {
		t.Fatal(err)
	}
	copyFile := func(src, dst string, mode os.FileMode) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Skip("host library missing:", err)
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(loader, filepath.Join(lib, "ld-linux-x86-64.so.2"), 0o700)
	if err := os.Symlink("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", filepath.Join(dir, loaderPath)); err != nil {
		t.Fatal(err)
	}
	for _, so := range []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "libz.so.1"} {
		copyFile(filepath.Join(hostLib, so), filepath.Join(lib, so), 0o600)
	}
	r := &Root{Release: "host", Dir: dir}
	if err := r.checkLoader(); err != nil {
		t.Fatal(err)
	}
	return r
}

// A program run by Command comes up through the root's loader with the
// root's libraries and the preloads, sees its own path as argv[0] and as
// Executable, has no LD_ variables from the caller, starts host tools
// cleanly, and SelfCommand starts it again the same way.
func TestCommandRunsProgramInsideRoot(t *testing.T) {
	prog := probeBinary(t)
	r := hostRoot(t)
	pre := filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/libz.so.1")
	env := append(os.Environ(), "LD_LIBRARY_PATH=/nonexistent", "LD_PRELOAD=/nonexistent/libx.so")
	cmd := r.Command(context.Background(), RunOptions{Preload: []string{pre}, Env: env}, prog,
		"-self", "-mapped", "libc.so.6", "-mapped", "libz.so.1", "-host", "/bin/true", "-reexec")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kv := parseProbe(string(out))
	loader, _ := filepath.EvalSymlinks(r.Loader())
	for k, want := range map[string]string{
		"exe": loader, "program": prog, "argv0": prog,
		"env LD_LIBRARY_PATH": "unset", "env LD_PRELOAD": "unset",
		"mapped libc.so.6": filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/libc.so.6"),
		"mapped libz.so.1": pre,
		"host /bin/true":   "ok",
		// The child, started by SelfCommand from inside the root.
		"child exe": loader, "child program": prog, "child argv0": prog,
		"child mapped libc.so.6": filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/libc.so.6"),
		"child mapped libz.so.1": pre,
	} {
		if kv[k] != want {
			t.Errorf("%s=%q, want %q", k, kv[k], want)
		}
	}
	if t.Failed() {
		t.Logf("probe output:\n%s", out)
	}
}

// Outside a root, Executable and SelfCommand are os.Executable's.
func TestSelfCommandOutsideRoot(t *testing.T) {
	t.Setenv(envRoot, "/nonexistent")
	t.Setenv(envProgram, "/nonexistent/prog")
	if _, _, ok := Current(); ok {
		t.Error("Current claims a root the process was not started in")
	}
	exe, _ := os.Executable()
	if got, err := Executable(); err != nil || got != exe {
		t.Errorf("Executable = %q, %v; want %q", got, err, exe)
	}
	cmd, err := SelfCommand(context.Background(), "-x")
	if err != nil || cmd.Path != exe || strings.Join(cmd.Args[1:], " ") != "-x" {
		t.Errorf("SelfCommand = %v, %v", cmd, err)
	}
}

func TestHostEnvDropsLoaderVariables(t *testing.T) {
	got := HostEnv([]string{"A=1", "LD_LIBRARY_PATH=/r/lib", "LD_PRELOAD=/x.so", "LD_AUDIT=/a.so", envRoot + "=/r", "PATH=/bin", "LD_BIND_NOW=1"})
	if strings.Join(got, " ") != "A=1 PATH=/bin LD_BIND_NOW=1" {
		t.Errorf("HostEnv = %v", got)
	}
	if cmd := HostCommand(context.Background(), "true"); cmd.Env == nil {
		t.Error("HostCommand inherits the environment unfiltered")
	}
}

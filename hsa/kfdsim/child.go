package kfdsim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
)

// Environment variables of the child processes.
const (
	// EnvChild marks a child test process; its value is the test it runs.
	EnvChild = "ROCSYNC_KFDSIM_CHILD"
	// EnvRequired set to 1 (as .ci/run does) turns "cannot build the
	// simulated driver here" from a skip into a failure.
	EnvRequired = "ROCSYNC_KFDSIM_REQUIRED"
	// EnvGPUs is read by the simulated driver when the process did not call
	// kfdsim_configure.
	EnvGPUs = "KFDSIM_GPUS"
	// EnvDebug set to 1 makes the simulated driver trace every ioctl,
	// queue packet and fault to stderr.
	EnvDebug = "KFDSIM_DEBUG"
	// EnvVMFaultQueueError set to 0 makes a VM fault stop the faulting
	// queue without a queue error, as KFD without the debugger interface
	// evicts it: the MEMORY event (ROCr's system event) is the only report.
	EnvVMFaultQueueError = "KFDSIM_VMFAULT_QUEUE_ERROR"
	// EnvRuleOff lists enforced KFD rules to switch off (comma separated:
	// "evict", "access"), so a test can show that it depends on the rule.
	EnvRuleOff = "KFDSIM_RULE_OFF"
	// EnvROCm names the ROCm release the topology is for (default 5.2):
	// only the GPU targets that release knows are accepted.
	EnvROCm = "KFDSIM_ROCM"
)

// ChildTimeout bounds one child process: a simulated-driver test that hangs
// fails instead of hanging the test binary.
const ChildTimeout = 2 * time.Minute

// IsChild reports whether this process is a child started by Command.
func IsChild() bool { return os.Getenv(EnvChild) != "" }

// InChild reports whether this process is the child started for test t.
func InChild(t testing.TB) bool { return os.Getenv(EnvChild) == t.Name() }

// Options change the child's environment.
type Options struct {
	// SDMA runs the child with HSA_ENABLE_SDMA=1, so ROCr copies between
	// host and device with the simulated SDMA engine. By default children
	// run with HSA_ENABLE_SDMA=0: ROCr then copies with its blit kernels,
	// the path that exercises the shader executor (exec.c), and the same on
	// every GPU target.
	SDMA bool
	// Env is added last (KEY=VALUE), overriding inherited values.
	Env []string
	// Release is the ROCm user space the child runs; the zero value is
	// the host's libraries with the driver's default KFD release. With a
	// Root, the child runs inside it (rocmroot.Root.Command: the root's
	// loader and libraries, the simulated driver as --preload instead of
	// LD_PRELOAD); KFD sets KFDSIM_ROCM.
	Release Release
}

// LibraryOrSkip returns the simulated driver's directory, skipping t where this machine
// cannot build it, unless ROCSYNC_KFDSIM_REQUIRED=1 (CI), where it fails.
func LibraryOrSkip(t testing.TB) string {
	t.Helper()
	dir, err := Library()
	if err == nil {
		return dir
	}
	if errors.Is(err, ErrUnavailable) && os.Getenv(EnvRequired) != "1" {
		t.Skipf("%v (set %s=1 to make this a failure)", err, EnvRequired)
	}
	t.Fatalf("building the simulated driver: %v", err)
	return ""
}

// Command returns the command that re-runs this test binary as a child
// under the simulated driver with the GPUs of spec, running only the test
// named testName (an exact top-level name, or "Parent/sub"). The child
// inherits this process's environment (NCCL_*, HSA_*, ROCM_PATH, ...) with
// LD_PRELOAD prefixed by the simulated driver (so the real ROCm libraries the
// child loads find /dev/kfd, the render nodes and the KFD topology), and
// KFDSIM_GPUS, EnvChild and HSA_ENABLE_SDMA (0, or 1 with opts.SDMA) set.
func Command(t testing.TB, spec, testName string, opts Options) *exec.Cmd {
	t.Helper()
	dir := LibraryOrSkip(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	parts := strings.Split(testName, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	ctx, cancel := context.WithTimeout(context.Background(), ChildTimeout)
	t.Cleanup(cancel)
	args := []string{"-test.run=" + strings.Join(parts, "/"), "-test.v", "-test.count=1",
		"-test.timeout=" + (ChildTimeout - 5*time.Second).String()}
	env := childEnv(os.Environ(), dir, spec, testName, opts)
	if r := opts.Release.Root; r != nil {
		return r.Command(ctx, rocmroot.RunOptions{Preload: []string{filepath.Join(dir, LibraryName)}, Env: env}, exe, args...)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = env
	return cmd
}

func childEnv(parent []string, dir, spec, testName string, opts Options) []string {
	set := map[string]string{
		EnvChild: testName,
		EnvGPUs:  spec,
	}
	pre := filepath.Join(dir, LibraryName)
	for _, kv := range parent {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok && v != "" {
			pre = pre + ":" + v
		}
	}
	set["LD_PRELOAD"] = pre
	if opts.Release.Root != nil {
		// The root's loader preloads the driver (--preload); LD_PRELOAD
		// would reach the host tools the child starts.
		delete(set, "LD_PRELOAD")
	}
	if opts.Release.KFD != "" {
		set[EnvROCm] = opts.Release.KFD
	}
	set["HSA_ENABLE_SDMA"] = "0"
	if opts.SDMA {
		set["HSA_ENABLE_SDMA"] = "1"
	}
	env := make([]string, 0, len(parent)+len(set)+len(opts.Env))
	for _, kv := range parent {
		k, _, _ := strings.Cut(kv, "=")
		if _, override := set[k]; !override {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return append(env, opts.Env...)
}

// Result is a finished child: its combined output and exit error.
type Result struct {
	Output string
	Err    error
}

// Start runs the child for testName and returns its result; it does not
// judge it (see Run).
func Start(t testing.TB, spec, testName string, opts Options) Result {
	t.Helper()
	cmd := Command(t, spec, testName, opts)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return Result{Output: out.String(), Err: err}
}

// Run runs testName in a child under the simulated driver and fails t if
// the child fails or did not actually run the test (a skipped or filtered
// child test is not a pass). It returns the child's output.
func Run(t testing.TB, spec, testName string, opts Options) string {
	t.Helper()
	r := Start(t, spec, testName, opts)
	if r.Err != nil {
		t.Fatalf("child %s (GPUs %q) failed: %v\n%s", testName, spec, r.Err, r.Output)
	}
	if !strings.Contains(r.Output, "--- PASS: "+testName) {
		t.Fatalf("child %s (GPUs %q) did not pass the test (skipped or not found):\n%s", testName, spec, r.Output)
	}
	return r.Output
}

package rocsync

import (
	"os/exec"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The front package imports no runtime binding, no concrete driver and no
// test-only package, directly or through another package: drivers
// register with package driver and a program gets them from package
// backends, as database/sql gets its drivers.
func TestFrontImportsNoDriver(t *testing.T) {
	cmd := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}}", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps .")
	deps := strings.Fields(string(out))
	require.Contains(t, deps, modulePath, "go list lists the package itself")
	for _, p := range deps {
		require.Empty(t, forbiddenDep(p), "the front package depends on %s", p)
	}
}

const modulePath = "github.com/rocsync/rocsync"

// forbiddenDep says why the front package must not depend on package p
// ("" if it may).
func forbiddenDep(p string) string {
	if p == "github.com/ebitengine/purego" || p == "C" {
		return "a runtime binding's foreign calls"
	}
	rel, ok := strings.CutPrefix(p, modulePath+"/")
	if !ok {
		return ""
	}
	// Pure Go parts of a binding's tree, with no foreign call.
	pure := map[string]bool{"nccl/ncclid": true}
	for _, b := range []string{"hsa", "hip", "rocblas", "cuda", "cublas", "nccl", "queue", "stream", "tls"} {
		if (rel == b || strings.HasPrefix(rel, b+"/")) && !pure[rel] {
			return "a runtime binding"
		}
	}
	switch rel {
	case "internal/rocmdev", "internal/cudadev", "internal/rocmdev/emu", "internal/drivers", "internal/collective", "backends":
		return "a concrete driver"
	case "internal/tracecheck", "internal/hiptest", "internal/reference":
		return "a test-only package"
	}
	if base := path.Base(rel); strings.HasSuffix(base, "test") || strings.Contains(base, "fake") {
		return "a test-only package"
	}
	return ""
}

// The rule itself refuses what it must.
func TestForbiddenDepRefuses(t *testing.T) {
	for _, p := range []string{"github.com/rocsync/rocsync/hsa", "github.com/rocsync/rocsync/hsa/kfdsim", "github.com/rocsync/rocsync/nccl",
		"github.com/rocsync/rocsync/internal/rocmdev/emu", "github.com/rocsync/rocsync/internal/rocmdev", "github.com/rocsync/rocsync/internal/cudadev",
		"github.com/rocsync/rocsync/internal/tracecheck", "github.com/rocsync/rocsync/internal/hiptest", "github.com/ebitengine/purego"} {
		require.NotEmpty(t, forbiddenDep(p), p)
	}
	for _, p := range []string{"github.com/rocsync/rocsync/driver", "github.com/rocsync/rocsync/syncstate", "github.com/rocsync/rocsync/nccl/ncclid", "github.com/rs/zerolog"} {
		require.Empty(t, forbiddenDep(p), p)
	}
}

// A program that imports no drivers gets an ErrUnavailable error from
// Open, whatever the backend, naming the import that brings them.
func TestOpenWithoutDriversSaysWhatToImport(t *testing.T) {
	out, err := exec.Command(goTool(t), "run", "./testdata/nodrivers").CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 4, "%s", out)
	for _, l := range lines {
		require.Regexp(t, `rocsync: Open: backend unavailable: no "(rocm|emulator|cuda)" driver is registered: import _ "github.com/rocsync/rocsync/backends"$`, l)
	}
}

// goTool returns the go command (go test puts GOROOT/bin first on the
// PATH of the binary it runs), or skips t where the machine has none: a
// test binary carried to a GPU machine.
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on this machine (%v): the test needs the go tool and the sources", err)
	}
	return p
}

package kfdsim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
)

// ReleaseName maps the names a user gives a ROCm release (its ROCr or HIP
// version, or its Debian suite) to the release's name: "5.2.3" or
// "bookworm" is 5.2.3 (the host's libraries), "6.1.2", "5.7.1" or
// "trixie" is trixie (ROCr 6.1.2, HIP 5.7.1), "6.4.3" or "sid" is sid.
func ReleaseName(name string) (string, error) {
	switch name {
	case "", "5.2.3", "5.2", "bookworm":
		return "5.2.3", nil
	case "6.1.2", "6.1", "5.7.1", "5.7", "trixie":
		return "trixie", nil
	case "6.4.3", "6.4", "sid":
		return "sid", nil
	}
	return "", fmt.Errorf("%w %q (want 5.2.3, 6.1.2 (trixie) or 6.4.3 (sid))", ErrUnknownRelease, name)
}

// ProgramOptions configure ProgramCommand.
type ProgramOptions struct {
	// GPUs is the GPU spec (see the package comment): "" is one gfx90a.
	GPUs string
	// SDMA lets ROCr copy with the simulated SDMA engines
	// (HSA_ENABLE_SDMA=1); by default it copies with its blit kernels.
	SDMA bool
	// Env is added to the program's environment last (KEY=VALUE), after
	// this process's own.
	Env []string
}

// ProgramCommand returns a command that runs prog over the simulated driver
// with rel's ROCm libraries: the host's for 5.2.3 (the driver as
// LD_PRELOAD), otherwise the release's root (rocmroot: prog starts through
// the root's loader, with the driver as --preload, so that prog and every
// library it loads come from the root). It builds the driver when its cache
// has none. The simulated GPU runs ROCr's and HIP's own blit kernels by
// name; any other kernel faults its queue unless the program registers an
// executor (RegisterExecutor, from Go).
func ProgramCommand(ctx context.Context, rel Release, o ProgramOptions, prog string, args ...string) (*exec.Cmd, error) {
	dir, err := Library()
	if err != nil {
		return nil, err
	}
	lib := filepath.Join(dir, LibraryName)
	spec := o.GPUs
	if spec == "" {
		spec = "gfx90a"
	}
	set := map[string]string{EnvGPUs: spec, "HSA_ENABLE_SDMA": "0"}
	if o.SDMA {
		set["HSA_ENABLE_SDMA"] = "1"
	}
	if rel.KFD != "" {
		set[EnvROCm] = rel.KFD
	}
	env := make([]string, 0, len(os.Environ())+len(set)+len(o.Env)+1)
	preload := lib
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok {
			continue
		}
		if k == "LD_PRELOAD" {
			if v != "" {
				preload += ":" + v
			}
			continue
		}
		env = append(env, kv)
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	env = append(env, o.Env...)
	if rel.Root != nil {
		return rel.Root.Command(ctx, rocmroot.RunOptions{Preload: []string{lib}, Env: env}, prog, args...), nil
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(env, "LD_PRELOAD="+preload)
	return cmd, nil
}

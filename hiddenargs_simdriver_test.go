//go:build linux && (amd64 || arm64)

package rocsync

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/hiptest"
	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// The HIP test kernels on Debian's real ROCr and HIP 5.2.3 over the
// simulated driver (gfx90a), under every policy, through rocsync's public
// API: the v4 object loads (into HIP too, under Unified, which fills its
// hidden arguments itself) and every kernel equals its CPU expectation
// (hiddenArgsProgram). The v5 and v6 objects do not load through rocsync
// on this release, by the release rules: ROCr 5.2 reports library version
// 1.5 like ROCm 5.0 and 5.1, whose loader refuses v5 (kernels.ROCrAccepts),
// HIP 5.2.3's comgr cannot name a v5 ELF's ISA (hipErrorSharedObjectInitFailed,
// kernels.HIPAccepts), and v6 needs ROCr 6.2; ROCr 5.2.3 itself runs the v5
// object on this driver (hsa/kfdsim TestExecHIPHiddenArgsOverRealROCr).
func TestHIPKernelsHiddenArgsOnSimulatedDriver(t *testing.T) {
	versions := []kernels.CodeObjectVersion{kernels.CodeObjectV4, kernels.CodeObjectV5, kernels.CodeObjectV6}
	objects := map[kernels.CodeObjectVersion][]byte{}
	if !kfdsim.InChild(t) {
		// Built here and handed over: the child then compiles nothing
		// under its own timeout.
		dir := t.TempDir()
		for _, v := range versions {
			require.NoError(t, os.WriteFile(filepath.Join(dir, hipTestObjectFile(v)), hipTestKernels(t, v), 0o600))
		}
		parentOfSimulatedDriver(t)
		env := append(simblasEnv(t), testenv.HIPTestObjects+"="+dir)
		out := kfdsim.Run(t, simulatedSuiteRuns[0].gpus, t.Name(), kfdsim.Options{Release: simRelease(t), Env: env})
		logChildSummary(t, out)
		return
	}
	for _, v := range versions {
		if dir := os.Getenv(testenv.HIPTestObjects); dir != "" {
			co, err := os.ReadFile(filepath.Join(dir, hipTestObjectFile(v)))
			require.NoError(t, err)
			objects[v] = co
		} else {
			objects[v] = hipTestKernels(t, v)
		}
	}
	e, err := kfdsim.RegisterExecutor("")
	require.NoError(t, err)
	defer e.Close()
	seen := &noargsSeen{}
	refs := &userkernel.References{}
	require.NoError(t, hiptest.Register(refs, seen.add))
	e.UseReferences(refs)
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			devs, err := OpenAll(Options{Backend: ROCm, Policy: p, LogLevel: LogOff})
			require.NoError(t, err)
			require.Len(t, devs, 1)
			d := devs[0]
			defer func() { require.NoError(t, d.Close()) }()
			before := e.Stats()
			hiddenArgsProgram(t, d, objects[kernels.CodeObjectV4], seen)
			require.NoError(t, d.Synchronize())
			after := e.Stats()
			require.Greater(t, after.Runs, before.Runs)
			require.Equal(t, before.Unknown, after.Unknown, "the executor ran every kernel: %v", e.LastRefusal())
			require.Equal(t, before.Faults, after.Faults)
			// v5 and v6 load where the release's runtimes take them
			// (kernels.ROCrAccepts, and kernels.HIPAccepts under
			// Unified): neither on 5.2.3; v5 on trixie (ROCr 6.1.2,
			// HIP 5.7.1); v5 and v6 on sid (6.4.3). A loaded one runs
			// the whole program.
			rocr, hipVersion := simulatedRuntimeVersions(t)
			for _, v := range []kernels.CodeObjectVersion{kernels.CodeObjectV5, kernels.CodeObjectV6} {
				accepted := kernels.ROCrAccepts(rocr, v) && (p != Unified || kernels.HIPAccepts(hipVersion, v))
				if accepted {
					hiddenArgsProgram(t, d, objects[v], seen)
					require.NoError(t, d.Synchronize())
					continue
				}
				src, err := userkernel.CodeObjects(objects[v])
				require.NoError(t, err)
				_, err = d.LoadKernel(src, "geom")
				require.ErrorIs(t, err, userkernel.ErrTarget, "%s on ROCr %v, HIP %d", v, rocr, hipVersion)
				require.ErrorIs(t, err, ErrInvalid)
			}
		})
	}
}

// hipTestObjectFile names code object v's file in testenv.HIPTestObjects.
func hipTestObjectFile(v kernels.CodeObjectVersion) string {
	return fmt.Sprintf("v%d.hsaco", int(v))
}

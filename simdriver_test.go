//go:build linux && (amd64 || arm64)

package rocsync

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/internal/dl"
	"github.com/rocsync/rocsync/rocblas/simblas"
)

// The simulated GPUs of each run. PCI locations are given so that the two
// GPUs of the matching run enumerate in a known order (see
// OnSimulatedGPUs).
var simulatedSuiteRuns = []struct{ name, gpus string }{
	{"gfx90a", "gfx90a@0000:83:00.0"},
	{"gfx1030", "gfx1030@0000:03:00.0"},
}

// OnSimulatedGPUs runs body on the ROCm backend over Debian's real
// libhsa-runtime64 and libamdhip64, on the simulated kernel driver, once
// per simulated GPU target of simulatedSuiteRuns, each a subtest named by
// the target: the parent builds the driver and simblas and re-runs this
// test binary as a child with KFDSIM_GPUS and ROCM_PATH set; the child
// registers the Go shader executor before rocsync opens HSA and runs body.
// The release is 5.2.3 (the host's libraries) unless ROCSYNC_KFDSIM_ROCM
// names trixie (ROCr 6.1.2, HIP 5.7.1) or sid (ROCr and HIP 6.4.3): then
// the child runs inside that release's root, through its loader
// (simRelease).
func OnSimulatedGPUs(t *testing.T, body func(t *testing.T)) {
	for _, run := range simulatedSuiteRuns {
		t.Run(run.name, func(t *testing.T) {
			if kfdsim.InChild(t) {
				runSuiteInChild(t, body)
				return
			}
			parentOfSimulatedDriver(t)
			out := kfdsim.Run(t, run.gpus, t.Name(), kfdsim.Options{Release: simRelease(t), Env: simblasEnv(t)})
			logChildSummary(t, out)
		})
	}
}

// parentOfSimulatedDriver skips where the parent must not start children:
// inside a child, on hardware, or where the ROCm release the children run
// (simRelease) is not there: Debian's ROCm 5.2.3 libraries not installed,
// or a release's root that cannot be fetched (a failure instead with
// ROCSYNC_KFDSIM_REQUIRED=1, as in CI).
func parentOfSimulatedDriver(t *testing.T) {
	t.Helper()
	switch suiteOn() {
	case onSimulatedDriver:
		t.Skip("a child runs only the test it was started for")
	case onHardware:
		t.Skip("ROCSYNC_GPU=1: the suite runs on the real GPU instead")
	}
	if simRelease(t).Root == nil {
		for _, open := range []func() error{
			func() error { _, err := hsa.Open(); return err },
			func() error { _, err := hip.Open(); return err },
		} {
			err := open()
			if errors.Is(err, dl.ErrNotFound) && os.Getenv(kfdsim.EnvRequired) != "1" {
				t.Skipf("Debian's ROCm 5.2.3 libraries are not installed: %v (set %s=1 to make this a failure)", err, kfdsim.EnvRequired)
			}
			require.NoError(t, err)
		}
	}
	kfdsim.LibraryOrSkip(t)
}

var simReleaseOnce struct {
	sync.Mutex
	done bool
	rel  kfdsim.Release
}

// simRelease is the ROCm release the simulated-driver children run, named
// by ROCSYNC_KFDSIM_ROCM: 5.2.3 (the host's libraries, the default),
// trixie (ROCr 6.1.2, HIP 5.7.1) or sid (ROCr and HIP 6.4.3), each of the
// latter two in its private root (kfdsim.SelectedRelease). It is looked up
// once per test binary.
func simRelease(t *testing.T) kfdsim.Release {
	t.Helper()
	simReleaseOnce.Lock()
	defer simReleaseOnce.Unlock()
	if !simReleaseOnce.done {
		simReleaseOnce.rel = kfdsim.SelectedRelease(t)
		simReleaseOnce.done = true
	}
	return simReleaseOnce.rel
}

// simblasEnv builds the test-only rocBLAS for the release's HIP and
// returns ROCM_PATH for it.
func simblasEnv(t *testing.T) []string {
	t.Helper()
	root, err := simblas.BuildFor("", simRelease(t).HIPMajor)
	if errors.Is(err, simblas.ErrToolMissing) && os.Getenv(kfdsim.EnvRequired) != "1" {
		t.Skipf("building simblas: %v", err)
	}
	require.NoError(t, err, "building simblas")
	return []string{"ROCM_PATH=" + root}
}

var childResult = regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`)

// logChildSummary logs how many of the child's tests passed and which were
// skipped, with their reasons on the lines that follow.
func logChildSummary(t *testing.T, out string) {
	t.Helper()
	counts := map[string]int{}
	var skipped []string
	for _, m := range childResult.FindAllStringSubmatch(out, -1) {
		counts[m[1]]++
		if m[1] == "SKIP" {
			skipped = append(skipped, m[2])
		}
	}
	t.Logf("child: %d passed, %d failed, %d skipped %v", counts["PASS"], counts["FAIL"], counts["SKIP"], skipped)
	if testing.Verbose() {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "needs the emulator") || strings.Contains(l, "executor stats") {
				t.Log(strings.TrimSpace(l))
			}
		}
	}
}

// runSuiteInChild registers the Go executor (rocsync's kernels and
// simblas's gemms, by name) with the thunk ROCr is about to load, before
// any test opens HSA, then runs the suite.
func runSuiteInChild(t *testing.T, suite func(t *testing.T)) {
	e, err := kfdsim.RegisterExecutor("")
	require.NoError(t, err)
	defer e.Close()
	start := time.Now()
	suite(t)
	st := e.Stats()
	t.Logf("executor stats: %d kernels run, %d faults, %d unknown (%v)", st.Runs, st.Faults, st.Unknown, time.Since(start))
	require.NotZero(t, st.Runs, "no kernel reached the simulated GPU")
}

// holdSimulatedGPU pauses the simulated GPU's command processors until the
// returned function is called (see kfdsim.Hold).
func holdSimulatedGPU(t *testing.T) func() {
	t.Helper()
	release, err := kfdsim.Hold("")
	require.NoError(t, err)
	return release
}

// childTest runs body in a child under the simulated driver with the GPUs
// of spec (extra environment in env), with the Go executor registered
// before rocsync opens HSA; in the parent it starts that child and fails
// if the child does.
func childTest(t *testing.T, spec string, env []string, body func(t *testing.T)) {
	t.Helper()
	if kfdsim.InChild(t) {
		e, err := kfdsim.RegisterExecutor("")
		require.NoError(t, err)
		defer e.Close()
		body(t)
		return
	}
	parentOfSimulatedDriver(t)
	kfdsim.Run(t, spec, t.Name(), kfdsim.Options{Release: simRelease(t), Env: append(simblasEnv(t), env...)})
}

// openSimulatedROCm opens the ROCm backend over the simulated driver.
func openSimulatedROCm(t *testing.T, p Policy) []*Device {
	t.Helper()
	devs, err := OpenAll(Options{Backend: ROCm, Policy: p, LogLevel: LogOff})
	require.NoError(t, err)
	return devs
}

// The missing-access test on the real ROCr: with the test-only switch that
// removes queue/'s hsa_amd_agents_allow_access, the first dispatch reads its
// kernargs from memory not mapped to the GPU, and the next wait returns the
// queue's fault as a typed error, without hanging.
func TestKernargWithoutAllowAccessFaultsOnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		kernargFault(t, func(t *testing.T) *Device { return openSimulatedROCm(t, DeviceSide)[0] })
	})
}

// Two simulated GPUs whose HIP order (HIP_VISIBLE_DEVICES=1,0) is the
// reverse of HSA's: rocsync must pair each GPU agent with the HIP device
// at the same PCI location. A wrong pairing would allocate with hipMalloc
// on one GPU and dispatch on the other's queue, which the simulated GPU
// faults (hipMalloc memory is mapped to its own GPU only), and would load
// the other target's code objects.
//
// "partitioned" is one GPU split in two KFD nodes (an MI300X in DPX mode):
// one PCI bus and device, functions 0 and 1. HIP 5.2.3 prints ".0" for
// both (clr before 6.2), so the partitions pair in agent order, HIP's.
func TestDeviceMatchingByPCILocationOnSimulatedDriver(t *testing.T) {
	const gpus = "gfx90a@0000:83:00.0,gfx1030@0000:03:00.0"
	for _, tc := range []struct {
		name, gpus, visible string
		targets             []string
	}{
		{"reversed", gpus, "1,0", []string{"gfx90a", "gfx1030"}},
		{"filtered", gpus, "1", []string{"gfx1030"}},
		{"partitioned", "gfx90a@0000:83:00.0,gfx90a@0000:83:00.1", "", []string{"gfx90a", "gfx90a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var env []string
			if tc.visible != "" {
				env = []string{"HIP_VISIBLE_DEVICES=" + tc.visible}
			}
			childTest(t, tc.gpus, env, func(t *testing.T) {
				for _, p := range []Policy{DeviceSide, Unified} {
					devs := openSimulatedROCm(t, p)
					var targets []string
					for _, d := range devs {
						targets = append(targets, d.Target())
						x, err := d.FromFloat32(2, 3, []float32{1, 2, 3, 4, 5, 6})
						require.NoError(t, err)
						y, err := d.DefaultTask().Mul(x, x) // HSA queue (HIP stream under Unified)
						require.NoError(t, err)
						z, err := d.DefaultTask().MatMul(y, y, false, true) // rocBLAS on the HIP device
						require.NoError(t, err)
						got, err := z.Float32s()
						require.NoError(t, err, "%s", d.Target())
						// y = [1 4 9; 16 25 36], y·yᵀ
						require.Equal(t, []float32{98, 440, 440, 2177}, got, "%s %v", d.Target(), p)
					}
					require.Len(t, targets, len(tc.targets), "%v: %v", p, targets)
					for i, want := range tc.targets {
						require.Regexp(t, "--"+want+"(:|$)", targets[i], "%v: GPUs in HSA's order, those HIP presents", p)
					}
					for _, d := range devs {
						require.NoError(t, d.Close())
					}
				}
			})
		})
	}
}

// aroundThousandAdds reads a counter of the simulated driver (read, for
// every GPU: "") before and after thousandAdds' 1,000 dispatches and
// read-back.
func aroundThousandAdds[T any](t *testing.T, read func(string) (T, error)) (before, after T) {
	get := func(v *T) func() {
		return func() {
			var err error
			*v, err = read("")
			require.NoError(t, err)
		}
	}
	thousandAdds(t, get(&before), get(&after))
	return before, after
}

// thousandAdds opens a DeviceSide device on the simulated driver, makes
// y = x + x and reads it back, then calls before, submits 1,000 y += x,
// reads y back (checking it), and calls after.
func thousandAdds(t *testing.T, before, after func()) {
	d, err := Open(Options{Backend: ROCm, Policy: DeviceSide, LogLevel: LogOff})
	require.NoError(t, err)
	defer d.Close()
	tk := d.DefaultTask()
	x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := tk.Add(x, x)
	require.NoError(t, err)
	_, err = y.Float32s()
	require.NoError(t, err)
	before()
	for range 1000 {
		require.NoError(t, tk.AddInto(y, y, x))
	}
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1002, 2004, 3006, 4008}, got)
	after()
}

// Only packets a host blocks on raise end-of-pipe interrupts on the
// simulated driver, which raises one per completed packet whose
// completion signal has an event mailbox, as the CP does: 1,000
// dispatches and a read-back raise a handful (the read-back's marker and
// HIP's copy), not one per dispatch.
func TestDispatchInterruptsOnSimulatedDriver(t *testing.T) {
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		before, after := aroundThousandAdds(t, kfdsim.EOPInterrupts)
		t.Logf("1,000 dispatches and a read-back raised %d end-of-pipe interrupts", after-before)
		require.LessOrEqual(t, after-before, uint64(10))
	})
}

// The fence scopes of the AQL packets 1,000 dispatches and a read-back
// cost on the simulated driver, whose command processor counts them by
// packet kind (rocsync's packets and ROCr's and HIP's own): with
// agent-scope fences (the default) the kernels release at agent scope, and
// only the packets that hand work to the host at system scope, where each
// would write back the L2 on gfx90a and gfx942; they acquire at agent
// scope too, x having been read on the queue before (only the first
// kernel to read what the host wrote acquires at system scope, which
// invalidates the L2), and the read-back's marker acquires nothing. With
// every packet at system scope (the switch), every kernel writes the L2
// back and invalidates it. Run with -v for the tables (the parent prints
// the child's).
func TestDispatchFenceScopesOnSimulatedDriver(t *testing.T) {
	if !kfdsim.InChild(t) {
		parentOfSimulatedDriver(t)
		out := kfdsim.Run(t, simulatedSuiteRuns[0].gpus, t.Name(), kfdsim.Options{Release: simRelease(t), Env: simblasEnv(t)})
		for rest := out; ; {
			i := strings.Index(rest, "fence scopes of")
			if i < 0 {
				break
			}
			table := rest[i:]
			for _, end := range []string{"--- ", "=== ", "fence scopes of"} {
				if j := strings.Index(table[1:], end); j >= 0 {
					table = table[:j+1]
				}
			}
			t.Logf("child: %s", strings.TrimSpace(table))
			rest = rest[i+len("fence scopes of"):]
		}
		return
	}
	childTest(t, simulatedSuiteRuns[0].gpus, nil, func(t *testing.T) {
		t.Run("system scope", func(t *testing.T) {
			systemScopeFences(t)
			before, after := aroundThousandAdds(t, kfdsim.FenceScopes)
			c := after.Sub(before)
			t.Logf("fence scopes of 1,000 dispatches and a read-back, every packet at system scope:\n%s", c.Table())
			require.GreaterOrEqual(t, c.Release[hsa.FenceKindDispatch][hsa.FenceScopeSystem], uint64(1000))
			require.GreaterOrEqual(t, c.Acquire[hsa.FenceKindDispatch][hsa.FenceScopeSystem], uint64(1000))
		})
		before, after := aroundThousandAdds(t, kfdsim.FenceScopes)
		c := after.Sub(before)
		t.Logf("fence scopes of 1,000 dispatches and a read-back:\n%s", c.Table())
		require.GreaterOrEqual(t, c.Packets(hsa.FenceKindDispatch), uint64(1000))
		// Kernels release at agent scope; what the read-back reads is
		// released at system scope by the marker its host wait adds.
		var system uint64
		for k := range c.Release {
			system += c.Release[k][hsa.FenceScopeSystem]
		}
		require.LessOrEqual(t, system, uint64(5), "system-scope releases")
		require.GreaterOrEqual(t, c.Release[hsa.FenceKindDispatch][hsa.FenceScopeAgent], uint64(1000))
		// The kernels acquire at agent scope and the markers not at all;
		// any system-scope acquire is HIP's or ROCr's own (a blit kernel's,
		// HIP's barrier before its copy).
		var acquires uint64
		for k := range c.Acquire {
			acquires += c.Acquire[k][hsa.FenceScopeSystem]
		}
		require.LessOrEqual(t, acquires, uint64(5), "system-scope acquires")
		require.GreaterOrEqual(t, c.Acquire[hsa.FenceKindDispatch][hsa.FenceScopeAgent], uint64(1000))
	})
}

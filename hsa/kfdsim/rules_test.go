//go:build linux && (amd64 || arm64)

package kfdsim_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/hsa/kfdsim"
)

// The KFD rules the simulated driver enforces, each shown to matter: the
// same test fails when the rule is switched off (kfdsim.EnvRuleOff).

// stoppedQueues asks the driver how many of the process's queues on a GPU
// node process nothing any more, of how many.
func (k *thunk) stoppedQueues(t *testing.T, node uint32) (stopped, total int) {
	t.Helper()
	var all int32
	r, _, _ := purego.SyscallN(k.sym(t, "kfdsim_test_stopped_queues"), uintptr(node), uintptr(unsafe.Pointer(&all)))
	return int(int32(r)), int(all)
}

// A VM fault evicts EVERY user queue of the process on the faulting GPU,
// not only the queue whose access faulted: ROCr's own queues and any other
// queue there stop for good (amdgpu kfd_int_process_v9.c,
// event_interrupt_wq_v9 -> kfd_dqm_evict_pasid). Queues on other GPUs run
// on. A queue made on the faulting GPU later starts evicted.
func TestVMFaultEvictsEveryQueueOnTheGPU(t *testing.T) {
	if kfdsim.InChild(t) {
		evictionChild(t)
		return
	}
	runtimeOrSkip(t)
	kfdsim.Run(t, twoGPUs, t.Name(), kfdsim.Options{})
	off := kfdsim.Start(t, twoGPUs, t.Name(), kfdsim.Options{Env: []string{kfdsim.EnvRuleOff + "=evict"}})
	if off.Err == nil || !strings.Contains(off.Output, "queues stopped on the faulting GPU") {
		t.Fatalf("with the eviction rule off the test still passes (err %v):\n%s", off.Err, off.Output)
	}
}

func evictionChild(t *testing.T) {
	r := initRuntime(t)
	r.registerFaultHandler()
	node := func(a hsa.Agent) uint32 {
		n, err := r.lib.AgentInfoUint32(a, hsa.AgentInfoNode)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	faulting, qe := r.queue(r.gpus[0])
	bystander, _ := r.queue(r.gpus[0])
	other, otherErr := r.queue(r.gpus[1])
	karg := r.alloc(r.pool(r.cpu, hsa.GlobalFlagKernargInit), 4096)
	*(*int64)(karg) = 1
	*(*int64)(unsafe.Add(karg, 8)) = 1
	done := r.signal(1)
	r.submit(faulting, barrierAnd(done, uint64(uintptr(karg))))
	if ok, st, gotErr := r.waitOrError(done, qe, 10*time.Second); ok || !gotErr || st != 41 {
		t.Fatalf("completed=%v error=%v status %#x, want MEMORY_APERTURE_VIOLATION", ok, gotErr, st)
	}
	stopped, total := r.k.stoppedQueues(t, node(r.gpus[0]))
	// ROCr's internal queue, the faulting one and the bystander at least.
	if total < 3 || stopped != total {
		t.Fatalf("%d of %d queues stopped on the faulting GPU, want all (at least 3)", stopped, total)
	}
	_ = bystander
	// A queue made there afterwards starts evicted: nothing restores the
	// process on that GPU (kfd_device_queue_manager.c, create_queue_cpsch).
	r.queue(r.gpus[0])
	if s, n := r.k.stoppedQueues(t, node(r.gpus[0])); n != total+1 || s != n {
		t.Fatalf("after a new queue: %d of %d queues stopped on the faulting GPU, want all %d", s, n, total+1)
	}
	if s, _ := r.k.stoppedQueues(t, node(r.gpus[1])); s != 0 {
		t.Fatalf("%d queues stopped on the other GPU, want none", s)
	}
	// The other GPU runs on.
	done2 := r.signal(1)
	r.submit(other, barrierAnd(done2))
	if ok, st, bad := r.waitOrError(done2, otherErr, 10*time.Second); !ok {
		t.Fatalf("barrier on the other GPU did not complete (queue error %v %#x)", bad, st)
	}
}

// A partitioned GPU (an MI300X in CPX mode) is several KFD nodes of one PCI
// device: KFD reports each with location_id = the device's PCI id | the
// partition (amdgpu kfd_topology.c, kfd_topology_add_device), so they differ
// in the function bits only. Read through the simulated driver's sysfs by a
// plain C program (cat), as any tool would.
func TestPartitionedGPUTopology(t *testing.T) {
	dir := kfdsim.LibraryOrSkip(t)
	script := "for n in 1 2 3 4 5 6 7 8; do echo node $n; cat /sys/devices/virtual/kfd/kfd/topology/nodes/$n/properties " +
		"/sys/devices/virtual/kfd/kfd/topology/nodes/$n/gpu_id || exit 1; done"
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LD_PRELOAD=" + dir + "/" + kfdsim.LibraryName,
		kfdsim.EnvGPUs + "=gfx942@0000:c1:00.0/cpx", kfdsim.EnvROCm + "=6.4"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	nodes := strings.Split(string(out), "node ")[1:]
	if len(nodes) != 8 {
		t.Fatalf("%d nodes, want 8:\n%s", len(nodes), out)
	}
	ids := map[string]bool{}
	for i, n := range nodes {
		props := map[string]string{}
		lines := strings.Split(strings.TrimSpace(n), "\n")
		for _, l := range lines[1:] {
			if k, v, ok := strings.Cut(l, " "); ok {
				props[k] = v
			}
		}
		ids[lines[len(lines)-1]] = true
		if want := fmt.Sprint(0xc1<<8 | i); props["location_id"] != want {
			t.Errorf("node %d: location_id %s, want %s (bus c1, device 0, function = partition %d)", i+1,
				props["location_id"], want, i)
		}
		if props["domain"] != "0" || props["device_id"] != strconv.Itoa(0x74a1) || props["gfx_target_version"] != "90402" {
			t.Errorf("node %d: domain %s device_id %s gfx_target_version %s", i+1, props["domain"], props["device_id"],
				props["gfx_target_version"])
		}
		if props["simd_count"] != strconv.Itoa(304/8*4) {
			t.Errorf("node %d: simd_count %s, want the CUs split 8 ways (%d)", i+1, props["simd_count"], 304/8*4)
		}
	}
	if len(ids) != 8 {
		t.Errorf("gpu_ids not distinct: %v", ids)
	}
}

// A forked child is a new KFD process: Debian's real thunk reopens /dev/kfd
// in it (openclose.c, clear_after_fork) and gets working events and device
// memory of its own, while the parent's event and buffer contents are
// untouched (testdata/fork_child.c).
func TestForkedChildReopensTheDevice(t *testing.T) {
	dir := kfdsim.LibraryOrSkip(t)
	bin := filepath.Join(t.TempDir(), "fork_child")
	build := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "fork_child.c"), "-lhsakmt")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"LD_PRELOAD=" + filepath.Join(dir, kfdsim.LibraryName), kfdsim.EnvGPUs + "=gfx90a"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child: ok") || !strings.Contains(string(out), "parent: ok") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// The ioctls as the thunks of ROCm 6.x issue them, raw (testdata/kfd_ioctls.c):
// AVAILABLE_MEMORY follows VRAM allocations, the event age of KFD 1.14 lets
// a waiter that missed a set return at once, and CREATE_QUEUE comes in both
// sizes (6.4.3 adds sdma_engine_id).
func TestKFDIoctlsOfROCm6(t *testing.T) {
	dir := kfdsim.LibraryOrSkip(t)
	bin := filepath.Join(t.TempDir(), "kfd_ioctls")
	build := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "kfd_ioctls.c"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"LD_PRELOAD=" + filepath.Join(dir, kfdsim.LibraryName), kfdsim.EnvGPUs + "=gfx90a",
		kfdsim.EnvROCm + "=6.4"}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%v\n%s", err, out)
	}
}

// The DRM nodes of two GPUs are card0, card1, renderD128 and renderD129,
// and no card128: libdrm 2.4.12x and later type a render fd by which of
// /dev/dri/card<minor> and /dev/dri/renderD<minor> exists (xf86drm.c,
// drmGetMinorType), so trixie's and sid's libdrm took renderD128 for a
// primary node and failed amdgpu_device_initialize (testdata/drm_nodes.c).
func TestDRMNodesAsLibdrmTypesThem(t *testing.T) {
	dir := kfdsim.LibraryOrSkip(t)
	bin := filepath.Join(t.TempDir(), "drm_nodes")
	build := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "drm_nodes.c"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"LD_PRELOAD=" + filepath.Join(dir, kfdsim.LibraryName), kfdsim.EnvGPUs + "=" + twoGPUs}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%v\n%s", err, out)
	}
}

package cudadev

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// hostFunc runs fn on the task's host lane, reading and writing the
// arrays given, through the same Begin/Submit/Commit as every op.
func (tk *htask) hostFunc(reads, writes []*harr, fn func() error) {
	h := tk.h
	var sop syncstate.Op
	for _, a := range reads {
		sop.Read(a.st)
	}
	for _, a := range writes {
		sop.Write(a.st)
	}
	if err := sop.Begin(&h.eng, tk.tk.Timeline(driver.LaneHost), tk.sinks); err != nil {
		h.t.Fatal(err)
	}
	ticket, err := tk.tk.Submit(&driver.HostFuncOp{Func: fn})
	if err != nil {
		sop.Abort()
		h.t.Fatal(err)
	}
	if err := sop.Commit(ticket, tk.sinks); err != nil {
		h.t.Fatal(err)
	}
}

// emuHostWait is the Go emulation without stream memory operations, as on
// a driver or device that lacks them: streams wait for host lanes on the
// host.
var emuHostWait = backendKind{"emu-hostwait", func(t testing.TB, cfg driver.DeviceConfig) (*Device, *emuBackend) {
	e := newEmu()
	e.noMemOps = errors.New("emulated: no stream memory operations")
	d, err := newDevice(e, cfg, 0, "emulated GPU", 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d, e
}}

// hostWaitPolicy says whether a policy waits for a host lane on the host
// whatever the backend can do (its definition: a host wait at every
// crossing, or after every op).
func hostWaitPolicy(p syncstate.Policy) bool {
	return p == syncstate.WaitAlways || p == syncstate.SkipSameQueue
}

// hostFuncChain runs kernel → host function → kernel: the kernel before
// it writes x, the function computes y = x + 1 on the host (synchronous
// copies from the lane's goroutine, with the context made current there),
// and the kernel after it reads y. It returns the counts of the kernel
// after the function and whether z = (a²+1)² came out right.
//
// With hold, the function starts only once the kernel after it has been
// submitted, so that kernel finds the function pending and has to wait
// for it: a function that finished first left nothing to wait for, and
// under load that happened (TestHostFuncOnCUDA/emu/Unified counted a
// device wait with no cuStreamWaitValue64 made, in the issue-21 series).
// Only where the kernel waits on the device: a host wait would block on
// the held function for ever.
func hostFuncChain(h *harness, hold bool) (syncstate.Snapshot, bool) {
	tk := h.task()
	host := randVals(3, side*side)
	a := h.upload(host)
	x := h.alloc(side*side, kernels.F32)
	y := h.alloc(side*side, kernels.F32)
	z := h.alloc(side*side, kernels.F32)
	tk.mul(x, a, a)
	size := uint64(4 * side * side)
	gate := make(chan struct{})
	if !hold {
		close(gate)
	}
	tk.hostFunc([]*harr{x}, []*harr{y}, func() error {
		<-gate
		v := make([]float32, side*side)
		if err := h.d.CopyDtoH(unsafe.Pointer(&v[0]), x.ptr, size); err != nil {
			return err
		}
		for i := range v {
			v[i]++
		}
		return h.d.CopyHtoD(y.ptr, unsafe.Pointer(&v[0]), size)
	})
	before := h.stats.Snapshot()
	tk.mul(z, y, y)
	mid := h.stats.Snapshot().Sub(before)
	if hold {
		close(gate)
	}
	got := h.read(z)
	for i, v := range host {
		want := (v*v + 1) * (v*v + 1)
		if d := got[i] - want; d > 1e-5 || d < -1e-5 {
			return mid, false
		}
	}
	return mid, true
}

// A host function between two kernels on every CUDA backend and policy.
// Where the driver has 64-bit stream memory operations (the emulation,
// an H100) the kernel after it waits on the device (cuStreamWaitValue64
// on the lane's published ticket): no host wait. Without them (the fake C
// driver, emu-hostwait), and under the policies that host-wait at every
// crossing, it is one boundary wait.
func TestHostFuncOnCUDA(t *testing.T) {
	for _, kind := range append(backendKinds, emuHostWait) {
		for _, p := range syncstate.Policies {
			t.Run(fmt.Sprintf("%s/%s", kind.name, p), func(t *testing.T) {
				h := newHarnessConfig(t, kind, driver.DeviceConfig{Policy: p, StreamWaitsForHostLanes: true})
				onDevice := h.d.HostWaitsOnDevice() == nil && !hostWaitPolicy(p)
				// Held only on the emulation: on a GPU the function's
				// synchronous copies may queue behind the stream that
				// waits for the function (TestHostFuncWaitsOnTheHostByDefault).
				hold := onDevice && h.emu != nil
				mid, ok := hostFuncChain(h, hold)
				if !ok {
					t.Fatal("the kernel after the host function read stale data")
				}
				if kind.name == "gpu" {
					t.Logf("stream memory operations: %v", h.d.HostWaitsOnDevice())
				}
				switch {
				case hold && (mid.HostWaitsFor(syncstate.ReasonBoundary) != 0 || mid.DeviceWaits != 1):
					t.Errorf("the kernel after the held host function: %v, want one device wait and no host wait", mid)
				case onDevice && (mid.HostWaitsFor(syncstate.ReasonBoundary) != 0 || mid.DeviceWaits+mid.SkippedWaits != 1):
					t.Errorf("the kernel after the host function: %v, want one device wait (or a skipped one) and no host wait", mid)
				case !onDevice && (mid.DeviceWaits != 0 || mid.HostWaitsFor(syncstate.ReasonBoundary)+mid.SkippedWaits != 1):
					t.Errorf("the kernel after the host function: %v, want one boundary wait or a skipped one", mid)
				}
				if hold && h.emu.valueWaits == 0 {
					t.Error("no cuStreamWaitValue64 was made")
				}
			})
		}
	}
}

// The device-side wait is what orders the kernel after the host function:
// with the emulation dropping cuStreamWaitValue64, the kernel runs first
// (the emulated device runs the newest runnable op) and reads stale data.
func TestHostFuncDeviceWaitIsNeeded(t *testing.T) {
	bad := 0
	for range 5 {
		h := newHarnessConfig(t, backendKinds[0], driver.DeviceConfig{Policy: syncstate.DeviceSide, StreamWaitsForHostLanes: true})
		h.emu.dropValueWaits = true
		if _, ok := hostFuncChain(h, true); !ok {
			bad++
		}
	}
	if bad == 0 {
		t.Fatal("without the device-side wait the kernel still read the host function's output")
	}
}

// By default a stream waits for a host function on the host, even where
// the driver has stream memory operations (the emulation does): the
// function in hostFuncChain copies device memory, and on an H100 such a
// copy queued behind the stream that waited for its function on the
// device, and both hung (TestOpSetAcceptanceCUDA).
func TestHostFuncWaitsOnTheHostByDefault(t *testing.T) {
	h := newHarness(t, backendKinds[0], syncstate.DeviceSide)
	if err := h.d.HostWaitsOnDevice(); !errors.Is(err, ErrHostLaneWaitsOff) {
		t.Fatalf("HostWaitsOnDevice: %v, want ErrHostLaneWaitsOff", err)
	}
	mid, ok := hostFuncChain(h, false)
	if !ok {
		t.Fatal("the kernel after the host function read stale data")
	}
	if mid.DeviceWaits != 0 || mid.HostWaitsFor(syncstate.ReasonBoundary)+mid.SkippedWaits != 1 || h.emu.valueWaits != 0 {
		t.Fatalf("the kernel after the host function: %v, %d value waits; want one boundary wait (or a skipped one)", mid, h.emu.valueWaits)
	}
}

// CUDA has no HSA signals: its tasks are not driver.SignalFencers, which
// rocsync's ExportSignal and ImportSignal turn into ErrUnavailable errors.
func TestNoHSASignals(t *testing.T) {
	var tk driver.Task = &Task{}
	if _, ok := tk.(driver.SignalFencer); ok {
		t.Fatal("a CUDA task claims to exchange HSA signals")
	}
}

package cudadev

import (
	"errors"
	"testing"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/reference"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/syncstate"
)

// Two CUDA devices on one adversarial emulated backend (work runs only
// when the host blocks, the op submitted last first, streams ordered by
// cuStreamWaitEvent only): a chain that crosses between the devices both
// ways, within a stream kind and across the kernel/cuBLAS boundary. Each
// device's streams carry its own place, so syncstate sees the crossings as
// cross-device: events recorded with one device's API and waited for by
// the other's stream where the policy waits on the device, one
// cross-device host wait per crossing elsewhere. Results equal the CPU
// reference under every policy; without the cross-device waits they do
// not.
func TestCrossDeviceChainOnEmulatedCUDA(t *testing.T) {
	for _, p := range []syncstate.Policy{syncstate.DeviceSide, syncstate.SkipSameQueue, syncstate.DeviceBridge, syncstate.Unified} {
		for _, disable := range []bool{false, true} {
			name := p.String()
			if disable {
				name += "/without-cross-device-waits"
			}
			t.Run(name, func(t *testing.T) {
				e := newEmu()
				var stats syncstate.Stats
				cfg := driver.DeviceConfig{Policy: p, Stats: &stats}
				dA, err := newDevice(e, cfg, 0, "emulated GPU 0", 9, 0)
				if err != nil {
					t.Fatal(err)
				}
				dB, err := newDevice(e, cfg, 1, "emulated GPU 1", 9, 0)
				if err != nil {
					t.Fatal(err)
				}
				eng := syncstate.Engine{Policy: p, Test: testhooks.Engine{DisableCrossDeviceWaits: disable}}
				hA := &harness{t: t, d: dA, emu: e, eng: eng, stats: &stats}
				hB := &harness{t: t, d: dB, emu: e, eng: eng, stats: &stats}
				ta, tb := hA.task(), hB.task()
				host := randVals(7, side*side)
				x := hA.upload(host)
				y, z, c, w := hA.alloc(side*side, x.dt), hB.alloc(side*side, x.dt), hB.alloc(side*side, x.dt), hA.alloc(side*side, x.dt)
				ta.mul(y, x, x)    // gpu0 kernels
				tb.mul(z, y, x)    // gpu1 kernels read gpu0's y (one stream kind)
				tb.matmul(c, z, x) // gpu1 cuBLAS
				ta.mul(w, c, c)    // gpu0 kernels read gpu1's c (across the boundary)
				ta.mul(x, x, x)    // gpu0 overwrites x, which gpu1 read
				got := hA.read(w)
				xr := reference.Widen(host)
				cr := reference.MatMul(reference.Mul(reference.Mul(xr, xr), xr), xr, side)
				ref := reference.Mul(cr, cr)
				ok := closeTo(ref, got, 1e-4) < 0
				st := stats.Snapshot()
				for _, h := range []*harness{hA, hB} {
					for _, tk := range h.tasks {
						if err := tk.tk.Close(); err != nil {
							t.Fatal(err)
						}
					}
					for _, a := range h.arrays {
						if err := h.d.Free(a.ptr); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := errors.Join(dA.Close(), dB.Close()); err != nil {
					t.Fatal(err)
				}
				if disable {
					if ok {
						t.Fatal("the result is right without the cross-device waits: the emulated device does not catch them")
					}
					return
				}
				if !ok {
					t.Fatalf("wrong result under %v (%v)", p, st)
				}
				if errs := e.errors(); len(errs) > 0 {
					t.Fatalf("the emulated device saw errors: %v", errs)
				}
				cross := st.HostWaits[syncstate.ReasonCrossDevice]
				switch p {
				case syncstate.DeviceBridge, syncstate.Unified:
					if cross != 0 || st.HostWaitsTotal() != st.HostWaits[syncstate.ReasonReadBack] {
						t.Fatalf("host waits where every crossing can wait on the device: %v", st)
					}
				case syncstate.DeviceSide:
					// gpu1's kernels wait for gpu0's with an event; gpu0's
					// kernels host-wait for gpu1's cuBLAS (the boundary,
					// between devices), which also completes gpu1's reads
					// of x (the device makes no progress on its own).
					if cross != 1 || st.DeviceWaits != 1 {
						t.Fatalf("want 1 cross-device host wait and 1 device wait, got %v", st)
					}
				case syncstate.SkipSameQueue:
					// Both crossings between the devices wait on the host.
					if cross != 2 || st.DeviceWaits != 0 {
						t.Fatalf("want 2 cross-device host waits, got %v", st)
					}
				}
			})
		}
	}
}

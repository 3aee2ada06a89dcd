package rocsync

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/internal/reference"
	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

// openEmu opens every emulated GPU with the checker and delays on.
func openEmu(t *testing.T, p Policy, e EmulatorOptions) []*Device {
	t.Helper()
	e.HazardChecker, e.MaxDelay, e.Seed = true, 30e3, 11
	devs, err := OpenAll(Options{Backend: Emulator, Policy: p, LogLevel: LogOff, Emulator: e})
	require.NoError(t, err)
	return devs
}

// hsa_shut_down balances hsa_init once the last device of a runtime
// closes, and not before; a second Close changes nothing.
func TestHSAShutDownWhenLastDeviceCloses(t *testing.T) {
	devs := openEmu(t, DeviceSide, EmulatorOptions{Devices: 2})
	h := devs[0].machine().HSA()
	x, err := devs[0].FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	_, err = devs[0].DefaultTask().Mul(x, x)
	require.NoError(t, err)
	require.Equal(t, 1, h.InitCount())
	require.NoError(t, devs[0].Close())
	require.Equal(t, 1, h.InitCount(), "shut down while gpu1 is open")
	require.NoError(t, devs[1].Close())
	require.Equal(t, 0, h.InitCount(), "hsa_init not balanced by hsa_shut_down")
	require.NoError(t, devs[1].Close())
	require.Equal(t, 0, h.InitCount())

	// Open of one device closes the others at once: they must not
	// shut the runtime down under it.
	d, err := Open(Options{Backend: Emulator, Device: 1, LogLevel: LogOff, Emulator: EmulatorOptions{Devices: 3}})
	require.NoError(t, err)
	require.Equal(t, 1, d.machine().HSA().InitCount())
	y, err := d.FromFloat32(1, 2, []float32{1, 2})
	require.NoError(t, err)
	z, err := d.DefaultTask().Mul(y, y)
	require.NoError(t, err)
	got, err := z.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4}, got)
	require.NoError(t, d.Close())
	require.Equal(t, 0, d.machine().HSA().InitCount())
}

// Unified launches pass no dynamic LDS: HIP adds the kernel's static LDS
// (its group segment size) itself. With kernels that use 40 KiB of static
// LDS, passing it again as sharedMemBytes makes 80 KiB, over the 64 KiB
// limit, and the launch fails.
func TestUnifiedPassesNoDynamicLDS(t *testing.T) {
	d := openEmu(t, Unified, EmulatorOptions{KernelGroupSegmentSize: 40 << 10})[0]
	defer func() { require.NoError(t, d.Close()) }()
	x, err := d.FromFloat32(1, 3, []float32{1, 2, 3})
	require.NoError(t, err)
	y, err := d.DefaultTask().Mul(x, x)
	require.NoError(t, err)
	got, err := y.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 4, 9}, got)
	require.Zero(t, d.machine().HIP().MaxDynamicSharedMem())
	require.Empty(t, d.Hazards())
}

// kernargFault runs one dispatch on a device whose kernarg ring the GPU was
// never allowed to access. The next wait must return the queue's fault as a
// typed error, promptly. open picks the backend (the emulator here; the
// simulated driver runs the same check).
func kernargFault(t *testing.T, open func(t *testing.T) *Device) {
	// Queues are made with the task, so the switch stays on until then.
	testhooks.SkipKernargAllowAccess.Store(true)
	t.Cleanup(func() { testhooks.SkipKernargAllowAccess.Store(false) })
	d := open(t)
	tk := d.DefaultTask()
	testhooks.SkipKernargAllowAccess.Store(false)
	x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	y, err := tk.Mul(x, x)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := y.Float32s()
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the wait hung on a faulted queue")
	}
	require.Error(t, err)
	var re *Error
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, queue.ErrQueueBroken)
	require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorMemoryApertureViolation})
	_ = d.Close() // must return; what it reports the failure tests check
}

func TestKernargWithoutAllowAccessFaults(t *testing.T) {
	kernargFault(t, func(t *testing.T) *Device {
		d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, Emulator: EmulatorOptions{HazardChecker: true}})
		require.NoError(t, err)
		return d
	})
}

// With allow_access (the default) the same dispatch runs: the kernarg ring
// is mapped to the queue's GPU only.
func TestKernargAllowedToQueueGPU(t *testing.T) {
	devs := openEmu(t, DeviceSide, EmulatorOptions{Devices: 2})
	for _, d := range devs {
		x, err := d.FromFloat32(1, 2, []float32{3, 4})
		require.NoError(t, err)
		y, err := d.DefaultTask().Mul(x, x)
		require.NoError(t, err)
		got, err := y.Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{9, 16}, got)
	}
	for _, d := range devs {
		require.NoError(t, d.Close())
	}
}

// HIP's device order need not be HSA's: with HIP_VISIBLE_DEVICES=1,0 HIP
// device 0 is the second GPU agent. Each rocsync device must pair its GPU
// agent with the HIP device at the same PCI location, or its kernels read
// memory of the other GPU.
func TestHIPDeviceOrderDiffersFromHSA(t *testing.T) {
	devs := openEmu(t, DeviceSide, EmulatorOptions{Devices: 2, HIPVisibleDevices: []int{1, 0}})
	for i, d := range devs {
		tk := d.DefaultTask()
		x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, float32(i)})
		require.NoError(t, err)
		y, err := tk.Mul(x, x) // HSA queue on the agent
		require.NoError(t, err)
		z, err := tk.MatMul(y, x, false, false) // rocBLAS on the HIP device
		require.NoError(t, err)
		got, err := z.Float32s()
		require.NoError(t, err, "gpu%d", i)
		sq := []float32{1, 4, 9, float32(i * i)}
		x4 := []float32{1, 2, 3, float32(i)}
		want := []float32{sq[0]*x4[0] + sq[1]*x4[2], sq[0]*x4[1] + sq[1]*x4[3], sq[2]*x4[0] + sq[3]*x4[2], sq[2]*x4[1] + sq[3]*x4[3]}
		require.Equal(t, want, got, "gpu%d", i)
	}
	for _, d := range devs {
		require.NoError(t, d.Close())
		require.Empty(t, d.Hazards())
	}
}

// A GPU agent that HIP does not present is left out, with one logged
// reason; the others work.
func TestGPUWithoutHIPDeviceIsSkipped(t *testing.T) {
	var buf bytes.Buffer
	devs, err := OpenAll(Options{Backend: Emulator, LogHandler: jsonLog(&buf, slog.LevelDebug), Emulator: EmulatorOptions{Devices: 3, HIPVisibleDevices: []int{2, 0}}})
	require.NoError(t, err)
	require.Len(t, devs, 2)
	require.Equal(t, 1, strings.Count(buf.String(), "skipping a GPU that HIP does not present"), buf.String())
	require.Contains(t, buf.String(), `"agent":1`)
	for _, d := range devs {
		x, err := d.FromFloat32(1, 2, []float32{2, 3})
		require.NoError(t, err)
		y, err := d.DefaultTask().MatMul(x, x, false, true)
		require.NoError(t, err)
		got, err := y.Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{13}, got)
		require.NoError(t, d.Close())
	}
	require.Equal(t, 0, devs[0].machine().HSA().InitCount())
}

// The code object's memory outlives its executable: ROCr records its
// address in the loaded code object (where debuggers and profilers read
// it), so the reader is destroyed only after the executable, at Close; the
// HIP module is unloaded then too.
func TestCodeObjectOutlivesExecutable(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			d := openEmu(t, p, EmulatorOptions{})[0]
			h := d.machine().HSA()
			x, err := d.FromFloat32(1, 2, []float32{1, 2})
			require.NoError(t, err)
			y, err := d.DefaultTask().Mul(x, x)
			require.NoError(t, err)
			got, err := y.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{1, 4}, got)
			require.Empty(t, h.CodeObjectStorageFaults(), "storage released while loaded")
			require.Equal(t, 1, h.LiveExecutables())
			require.NoError(t, d.Close())
			require.Empty(t, h.CodeObjectStorageFaults())
			require.Zero(t, h.LiveExecutables(), "executable not destroyed at Close")
			require.Zero(t, d.machine().HIP().LiveModules(), "HIP module not unloaded at Close")
		})
	}
}

// On HIP before 5.6 the stream memory operations refuse HSA signal memory,
// so DeviceBridge crosses the boundary with host waits, says so once, and
// stays correct; on a current HIP it crosses on the device.
//
// Each crossing must find its producer pending, whatever the load: the
// emulator holds the gemms and the kernel before they run, and a host wait
// releases the producer it waits for as it begins (the sync-debug warning
// comes just before it); what is still held runs once the last op is
// submitted.
func TestDeviceBridgeByHIPVersion(t *testing.T) {
	for _, tc := range []struct {
		version        int
		boundary, devw uint64
	}{{50_221_153, 2, 0}, {0, 0, 2}} {
		t.Run(fmt.Sprint(tc.version), func(t *testing.T) {
			gemms, muls := make(chan struct{}), make(chan struct{})
			var gemmsOnce, mulsOnce sync.Once
			releaseGemms := func() { gemmsOnce.Do(func() { close(gemms) }) }
			releaseMuls := func() { mulsOnce.Do(func() { close(muls) }) }
			defer releaseGemms()
			defer releaseMuls()
			var waits atomic.Int32
			var buf bytes.Buffer
			hook := msgHook{Handler: jsonLog(&buf, slog.LevelDebug), fn: func(msg string) {
				if msg != "rocsync: implicit host wait" {
					return
				}
				switch waits.Add(1) {
				case 1: // Mul waits for the first gemm
					releaseGemms()
				case 2: // the second gemm waits for Mul
					releaseMuls()
				}
			}}
			d, err := Open(Options{Backend: Emulator, Policy: DeviceBridge, LogHandler: hook, SyncDebug: SyncDebugWarn, Emulator: EmulatorOptions{
				HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 5, HIPVersion: tc.version}})
			require.NoError(t, err)
			tk := d.DefaultTask()
			host := randMatrix(8, 16)
			x, err := d.FromFloat32(16, 16, host)
			require.NoError(t, err)
			mul := kernels.Mul.KernelName(kernels.F32)
			d.machine().SetFaultInjector(func(op string) bool {
				switch op {
				case "rocblas_sgemm":
					<-gemms
				case mul:
					<-muls
				}
				return false
			})
			before := d.Stats()
			y, err := tk.MatMul(x, x, false, false) // HIP
			require.NoError(t, err)
			z, err := tk.Mul(y, x) // HSA after HIP
			require.NoError(t, err)
			w, err := tk.MatMul(z, x, false, false) // HIP after HSA
			require.NoError(t, err)
			st := d.Stats().Sub(before)
			releaseGemms()
			releaseMuls()
			require.Equal(t, tc.boundary, st.HostWaits[ReasonBoundary], "%v", st)
			require.Equal(t, tc.boundary, st.HostWaitsTotal(), "%v", st)
			require.Equal(t, tc.devw, st.DeviceWaits, "%v", st)
			require.EqualValues(t, tc.boundary, waits.Load(), "host waits warned of")
			got, err := w.Float32s()
			require.NoError(t, err)
			hx := reference.Widen(host)
			requireClose(t, reference.MatMul(reference.Mul(reference.MatMul(hx, hx, 16), hx), hx, 16), got, 1e-4)
			require.NoError(t, d.Close())
			require.Empty(t, d.Hazards())
			n := strings.Count(buf.String(), "DeviceBridge falls back to host waits")
			if tc.boundary > 0 {
				require.Equal(t, 1, n, buf.String())
				require.Contains(t, buf.String(), "HIP 5.2.21153 refuses HSA signal memory")
			} else {
				require.Zero(t, n, buf.String())
			}
		})
	}
}

// Under DeviceBridge a read-back blocks instead of polling (ROCr
// busy-waits on the non-interrupt signals that have a value address): on
// the interrupt signal of the marker the queue submits for it.
func TestDeviceBridgeHostWaitsBlock(t *testing.T) {
	d := openStrict(t, DeviceBridge)
	emulatorOnly(t, d, "counts busy host waits")
	tk := d.DefaultTask()
	host := randMatrix(9, 16)
	x, err := d.FromFloat32(16, 16, host)
	require.NoError(t, err)
	busy(t, d, tk)
	before := d.Stats()
	y, err := tk.MatMul(x, x, false, false)
	require.NoError(t, err)
	z, err := tk.Mul(y, x) // HIP→HSA on the device
	require.NoError(t, err)
	w, err := tk.MatMul(z, x, false, false) // HSA→HIP on the device
	require.NoError(t, err)
	st := d.Stats().Sub(before)
	require.Zero(t, st.HostWaitsTotal(), "%v", st)
	require.EqualValues(t, 2, st.DeviceWaits, "%v", st)
	h := d.machine().HSA()
	busyBefore := h.BusyHostWaits()
	gotZ, err := z.Float32s() // waits for the kernel's completion signal
	require.NoError(t, err)
	require.Equal(t, busyBefore, h.BusyHostWaits(), "the read-back polled a non-interrupt signal")
	gotW, err := w.Float32s()
	require.NoError(t, err)
	hx := reference.Widen(host)
	wantZ := reference.Mul(reference.MatMul(hx, hx, 16), hx)
	requireClose(t, wantZ, gotZ, 1e-4)
	requireClose(t, reference.MatMul(wantZ, hx, 16), gotW, 1e-4)
}

// Only a packet a host blocks on raises an interrupt: 1,000 dispatches
// and a read-back cost one end-of-pipe interrupt, not 1,001, under every
// policy that puts kernels on HSA queues (WaitAlways one more per host
// wait it makes), and no host wait makes ROCr poll.
func TestDispatchesRaiseNoInterrupts(t *testing.T) {
	for _, p := range syncstate.Policies {
		if p == Unified {
			continue // rocsync's kernels run on HIP streams
		}
		t.Run(p.String(), func(t *testing.T) {
			d := openStrict(t, p)
			emulatorOnly(t, d, "counts interrupts")
			tk := d.DefaultTask()
			x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			y, err := tk.Add(x, x)
			require.NoError(t, err)
			h := d.machine().HSA()
			before, busyBefore, stats := h.Interrupts(), h.BusyHostWaits(), d.Stats()
			for range 1000 {
				require.NoError(t, tk.AddInto(y, y, x))
			}
			waits := d.Stats().Sub(stats).HostWaitsTotal() // WaitAlways: one per op
			got, err := y.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{1002, 2004, 3006, 4008}, got)
			// WaitAlways's read-back finds the work done: its last op waited.
			require.LessOrEqual(t, h.Interrupts()-before, waits+1,
				"interrupts for 1,000 dispatches, %d host waits among them, and one read-back", waits)
			if p != WaitAlways {
				require.EqualValues(t, 1, h.Interrupts()-before, "interrupts for 1,000 dispatches and one read-back")
			}
			require.Equal(t, busyBefore, h.BusyHostWaits(), "a host wait polled a non-interrupt signal")
		})
	}
}

// A partitioned GPU (an MI300X in CPX mode: several KFD nodes on one PCI
// bus and device, told apart by the function) opens as one rocsync device
// per partition, each paired with its own HIP device: by the function
// where HIP reports it (6.2 on), in HIP's order (reversed here) too; in
// agent order where HIP prints ".0" for every partition (before 6.2).
func TestPartitionedGPUOpens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		visible []int
	}{
		{"hip6.2-reversed", 60_200_000, []int{3, 2, 1, 0}},
		{"hip6.1", 60_100_000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs := openEmu(t, DeviceSide, EmulatorOptions{Devices: 4, Partitions: 2, HIPVersion: tc.version, HIPVisibleDevices: tc.visible})
			require.Len(t, devs, 4)
			for i, d := range devs {
				x, err := d.FromFloat32(2, 2, []float32{1, 2, 3, float32(i)})
				require.NoError(t, err)
				y, err := d.DefaultTask().Mul(x, x) // HSA queue on the agent
				require.NoError(t, err)
				z, err := d.DefaultTask().MatMul(y, x, false, false) // rocBLAS on the HIP device
				require.NoError(t, err)
				got, err := z.Float32s()
				require.NoError(t, err, "gpu%d", i)
				f := float32(i)
				require.Equal(t, []float32{1 + 4*3, 2 + 4*f, 9 + f*f*3, 18 + f*f*f}, got, "gpu%d", i)
			}
			for _, d := range devs {
				require.NoError(t, d.Close())
				require.Empty(t, d.Hazards())
			}
		})
	}
}

// Before HIP 6.2 the partitions of one GPU report one PCI bus id; when
// HIP_VISIBLE_DEVICES reorders HIP's devices, which partition is which HIP
// device cannot be told, and rocsync leaves them out (with a logged
// reason) rather than pair a queue of one with memory of the other.
func TestPartitionsLeftOutWhenHIPReordersThemUnseen(t *testing.T) {
	t.Setenv("HIP_VISIBLE_DEVICES", "1,0")
	var buf bytes.Buffer
	_, err := OpenAll(Options{Backend: Emulator, LogHandler: jsonLog(&buf, slog.LevelDebug), Emulator: EmulatorOptions{Devices: 2, Partitions: 2,
		HIPVersion: 60_100_000, HIPVisibleDevices: []int{1, 0}}})
	require.ErrorIs(t, err, ErrUnavailable)
	require.Equal(t, 2, strings.Count(buf.String(), "skipping a GPU partition"), buf.String())
}

// Close may run beside a task's first launch, which loads the kernels: the
// load and Close's unload are ordered, so the executable never outlives
// the device, whichever comes first.
func TestCloseRacesFirstKernelLoad(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified} {
		for i := 0; i < 50; i++ {
			d := openEmu(t, p, EmulatorOptions{})[0]
			x, err := d.FromFloat32(1, 2, []float32{1, 2})
			require.NoError(t, err)
			task := d.DefaultTask()
			done := make(chan error, 1)
			go func() {
				_, err := task.Mul(x, x)
				done <- err
			}()
			require.NoError(t, d.Close())
			if err := <-done; err != nil {
				require.ErrorIs(t, err, ErrClosed)
			}
			require.Zero(t, d.machine().HSA().LiveExecutables(), "%v run %d: executable loaded after Close", p, i)
			require.Zero(t, d.machine().HIP().LiveModules(), "%v run %d: HIP module loaded after Close", p, i)
		}
	}
}

// msgHook passes every record on to Handler and tells fn its message
// first: a test acts on a log line as it is written.
type msgHook struct {
	slog.Handler
	fn func(msg string)
}

func (h msgHook) Handle(ctx context.Context, r slog.Record) error {
	h.fn(r.Message)
	return h.Handler.Handle(ctx, r)
}

func (h msgHook) WithAttrs(a []slog.Attr) slog.Handler { return msgHook{h.Handler.WithAttrs(a), h.fn} }
func (h msgHook) WithGroup(g string) slog.Handler      { return msgHook{h.Handler.WithGroup(g), h.fn} }

package rocsync

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/syncstate"
)

// openPeers opens n devices together: on the emulator (checker and random
// delays on, peer access as given), or the GPUs of a ROCSYNC_GPU=1 run,
// skipping when there are fewer than n.
func openPeers(t *testing.T, p Policy, n int, mod ...func(*Options)) []*Device {
	t.Helper()
	o := Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		Emulator: EmulatorOptions{Devices: n, HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 13}}
	if gpuRun() {
		o.Backend = gpuBackend()
	}
	for _, f := range mod {
		f(&o)
	}
	devs, err := OpenAll(o)
	require.NoError(t, err)
	testcheck.KeepDevices(t, devs, n)
	return devs
}

// noPeerAccess is an emulated machine whose GPUs reach no other's memory:
// every copy between them is staged through host memory.
func noPeerAccess(o *Options) { o.Emulator.PeerAccess = func(int, int) bool { return false } }

// peerChain is conformance.PeerChain (a data-parallel training step
// over the devices, with peer copies both ways), which the package's
// external tests hand in (conformance_helpers_test.go); settle, if not
// nil, runs after every op.
type peerChain interface {
	Step() error
	Check(t *testing.T, steps int)
}

var newPeerChain func(t *testing.T, devs []*Device, settle func()) peerChain

// A copy on device 1 of a buffer device 0's stream is still writing waits
// for it on the device under DeviceSide (an event from device 0 waited for
// by device 1's stream), and on the host, counted as cross-device, under
// SkipSameQueue. The producer is held so that it cannot have completed
// when the copy is ordered.
func TestCrossDeviceWaitDecision(t *testing.T) {
	for _, p := range []Policy{DeviceSide, SkipSameQueue, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			devs := openPeers(t, p, 2)
			emulatorOnly(t, devs[0], "it holds the device")
			a, b := devs[0], devs[1]
			src, err := a.NewBuffer(256)
			require.NoError(t, err)
			tmp, err := a.NewBuffer(256)
			require.NoError(t, err)
			dst, err := b.NewBuffer(256)
			require.NoError(t, err)
			in := make([]byte, 256)
			for i := range in {
				in[i] = byte(i)
			}
			ta, tb := a.DefaultTask(), b.DefaultTask()
			require.NoError(t, ta.Upload(tmp, in))
			require.NoError(t, ta.Synchronize())
			release := a.machine().Hold()
			require.NoError(t, ta.CopyBuffer(src, tmp)) // on gpu0's library stream, held
			sa, sb := a.Stats(), b.Stats()
			if p == SkipSameQueue {
				go func() { time.Sleep(20 * time.Millisecond); release() }()
			}
			require.NoError(t, tb.CopyPeer(dst, src))
			release()
			db := b.Stats().Sub(sb)
			switch p {
			case SkipSameQueue:
				require.EqualValues(t, 1, db.HostWaitsFor(ReasonCrossDevice), "%v", db)
				require.Zero(t, db.DeviceWaits)
			default:
				require.Zero(t, db.HostWaitsTotal(), "%v", db)
				require.EqualValues(t, 1, db.DeviceWaits, "%v", db)
			}
			// gpu0 overwrites src: it waits for gpu1's copy (a reader on
			// gpu1's stream) the same way.
			release = b.machine().Hold()
			if p == SkipSameQueue {
				go func() { time.Sleep(20 * time.Millisecond); release() }()
			}
			require.NoError(t, ta.Upload(src, make([]byte, 256)))
			release()
			da := a.Stats().Sub(sa)
			if p == SkipSameQueue {
				require.EqualValues(t, 1, da.HostWaitsFor(ReasonCrossDevice), "%v", da)
			} else {
				require.Zero(t, da.HostWaitsFor(ReasonCrossDevice), "%v", da)
				require.NotZero(t, da.DeviceWaits, "%v", da)
			}
			got, err := dst.Bytes()
			require.NoError(t, err)
			require.Equal(t, in, got)
			require.Empty(t, a.Hazards())
		})
	}
}

// The checker's self-test for this ordering: the same chain with only the
// cross-device waits removed races, and the checker reports it, naming
// queues of two devices. Direct and staged copies alike.
func TestCrossDeviceWaitRemovedIsARace(t *testing.T) {
	for _, access := range []struct {
		name string
		mod  func(*Options)
	}{{"direct", func(*Options) {}}, {"staged", noPeerAccess}} {
		t.Run(access.name, func(t *testing.T) {
			devs := openPeers(t, DeviceSide, 2, access.mod, func(o *Options) {
				o.test.DisableCrossDeviceWaits = true
				o.Emulator.MaxDelay = 200 * time.Microsecond
			})
			emulatorOnly(t, devs[0], "it needs the hazard checker")
			pc := newPeerChain(t, devs, devs[0].machine().Quiesce)
			for _, d := range devs {
				d.test.BetweenHalves = d.machine().Quiesce
			}
			for s := 0; s < 4; s++ {
				require.NoError(t, pc.Step())
			}
			for _, d := range devs {
				require.NoError(t, d.Synchronize())
			}
			hz := devs[0].Hazards()
			require.NotEmpty(t, hz, "no race reported without the cross-device waits")
			crossed := false
			for _, h := range hz {
				var he *emu.HazardError
				require.True(t, errors.As(h, &he), "%T", h)
				if strings.Contains(he.Queue+he.PriorQ, "gpu0") && strings.Contains(he.Queue+he.PriorQ, "gpu1") {
					crossed = true
				}
			}
			require.True(t, crossed, "no hazard between the two devices' queues: %v", hz)
		})
	}
}

// Bad input is a typed error and changes nothing.
func TestCopyPeerBadInput(t *testing.T) {
	devs := openPeers(t, DeviceSide, 2)
	a, b := devs[0], devs[1]
	tb := b.DefaultTask()
	src, err := a.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	dst, err := b.FromFloat32(2, 2, []float32{9, 9, 9, 9})
	require.NoError(t, err)
	small, err := b.Empty(1, 2, Float32)
	require.NoError(t, err)
	onA, err := a.Empty(2, 2, Float32)
	require.NoError(t, err)
	freed, err := a.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	o := Options{Backend: Emulator, LogLevel: LogOff, Emulator: EmulatorOptions{Devices: 2}}
	if gpuRun() {
		o.Backend = gpuBackend()
	}
	stranger, err := Open(o) // another Open call: not a peer
	require.NoError(t, err)
	defer func() { require.NoError(t, stranger.Close()) }()
	far, err := stranger.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	var nilArr *Array
	var nilBuf *Buffer
	for _, c := range []struct {
		name string
		kind error
		call func() error
	}{
		{"nil destination", ErrNilArray, func() error { return tb.CopyPeer(nil, src) }},
		{"nil source", ErrNilArray, func() error { return tb.CopyPeer(dst, nil) }},
		{"typed nil array", ErrNilArray, func() error { return tb.CopyPeer(nilArr, src) }},
		{"typed nil buffer", ErrNilArray, func() error { return tb.CopyPeer(dst, nilBuf) }},
		{"size mismatch", ErrShape, func() error { return tb.CopyPeer(small, src) }},
		{"destination not on the task's device", ErrDeviceMismatch, func() error { return tb.CopyPeer(onA, src) }},
		{"freed source", ErrFreed, func() error { return tb.CopyPeer(dst, freed) }},
		{"another Open's device", ErrDeviceMismatch, func() error { return tb.CopyPeer(dst, far) }},
		{"nil task", ErrInvalid, func() error { var z *Task; return z.CopyPeer(dst, src) }},
		{"peer of itself", ErrDeviceMismatch, func() error { _, err := a.PeerAccess(a); return err }},
		{"peer access to a nil device", ErrInvalid, func() error { _, err := a.PeerAccess(nil); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			require.ErrorIs(t, err, c.kind)
			var e *Error
			require.ErrorAs(t, err, &e)
		})
	}
	// Same device is CopyBuffer.
	require.NoError(t, a.DefaultTask().CopyPeer(onA, src))
	got, err := onA.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2, 3, 4}, got)
	// Nothing was written by the refused copies.
	got, err = dst.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{9, 9, 9, 9}, got)
	// A closed source device.
	require.NoError(t, a.Close())
	require.ErrorIs(t, tb.CopyPeer(dst, src), ErrClosed)
}

// Closing the source device waits for a copy another device's stream is
// still making out of its memory: the memory is not released under it.
func TestSourceCloseWaitsForPeerCopy(t *testing.T) {
	devs := openPeers(t, DeviceSide, 2)
	emulatorOnly(t, devs[0], "it holds the device")
	a, b := devs[0], devs[1]
	src, err := a.FromFloat32(4, 4, randMatrix(3, 4))
	require.NoError(t, err)
	want, err := src.Float32s()
	require.NoError(t, err)
	dst, err := b.Empty(4, 4, Float32)
	require.NoError(t, err)
	tb := b.DefaultTask()
	release := a.machine().Hold()
	require.NoError(t, tb.CopyPeer(dst, src))
	before := a.Stats()
	go func() { time.Sleep(20 * time.Millisecond); release() }()
	require.NoError(t, a.Close())
	lib := tb.drv.Timeline(driver.LaneLibrary)
	require.GreaterOrEqual(t, lib.Completed(), lib.LastTicket(), "gpu0 closed while gpu1 still copied out of it")
	require.EqualValues(t, 1, a.Stats().Sub(before).HostWaitsFor(ReasonSync), "one wait, for the copy out of it")
	got, err := dst.Float32s()
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Empty(t, b.Hazards())
}

// Copies each way between two devices while both close: every call
// returns (nil, or ErrClosed once its device or the source closed), and
// neither Close waits for the other forever.
func TestCopyPeerBothWaysWhileClosing(t *testing.T) {
	for round := 0; round < 5; round++ {
		devs, err := OpenAll(Options{Backend: Emulator, LogLevel: LogOff,
			Emulator: EmulatorOptions{Devices: 2, HazardChecker: true, MaxDelay: 20 * time.Microsecond, Seed: uint64(round)}})
		require.NoError(t, err)
		var bufs [2]*Buffer
		var tasks [2]*Task
		for i, d := range devs {
			bufs[i], err = d.NewBuffer(4096)
			require.NoError(t, err)
			tasks[i], err = d.NewTask()
			require.NoError(t, err)
		}
		done := make(chan error, 4)
		for i := range devs {
			go func(i int) {
				var err error
				for n := 0; n < 200 && err == nil; n++ {
					err = tasks[i].CopyPeer(bufs[i], bufs[1-i])
				}
				if err != nil && !errors.Is(err, ErrClosed) {
					done <- err
					return
				}
				done <- nil
			}(i)
		}
		for _, d := range devs {
			go func(d *Device) {
				time.Sleep(time.Duration(round) * 200 * time.Microsecond)
				done <- d.Close()
			}(d)
		}
		timeout := time.After(20 * time.Second)
		for range 4 {
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-timeout:
				t.Fatal("copies and Closes wait for one another")
			}
		}
		require.Empty(t, devs[0].Hazards())
	}
}

// One failed staged copy does not break copies out of its source device
// for good: the internal task that ran the failed first half is replaced,
// and later copies on a healthy task arrive whole, under every policy.
func TestStagedPeerCopyRecoversAfterAFault(t *testing.T) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			o := Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
				Emulator: EmulatorOptions{Devices: 2, HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 13}}
			noPeerAccess(&o)
			devs, err := OpenAll(o)
			require.NoError(t, err)
			defer func() {
				for _, d := range devs {
					_ = d.Close() // the faulted task's queue or stream reports its fault
				}
			}()
			src, err := devs[1].FromFloat32(1, 4, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			tk, err := devs[0].NewTask()
			require.NoError(t, err)
			dst, err := devs[0].Empty(1, 4, Float32)
			require.NoError(t, err)
			devs[1].machine().SetFaultInjector(func(op string) bool { return op == "hipMemcpyAsync(DtoH)" })
			err = tk.CopyPeer(dst, src)
			if err == nil {
				_, err = dst.Float32s()
			}
			require.ErrorIs(t, err, ErrFault)
			devs[1].machine().SetFaultInjector(nil)
			_ = tk.Close() // broken if it waited on the device for the failed half
			for i := range 3 {
				tk2, err := devs[0].NewTask()
				require.NoError(t, err)
				dst2, err := devs[0].Empty(1, 4, Float32)
				require.NoError(t, err)
				require.NoError(t, tk2.CopyPeer(dst2, src), "copy %d", i)
				got, err := dst2.Float32s()
				require.NoError(t, err, "copy %d", i)
				require.Equal(t, []float32{1, 2, 3, 4}, got, "copy %d", i)
				require.NoError(t, tk2.Close())
			}
			for _, d := range devs {
				require.Empty(t, d.Hazards())
			}
		})
	}
}

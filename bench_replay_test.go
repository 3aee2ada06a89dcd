package rocsync

import (
	"errors"
	"strconv"
	"testing"

	"github.com/rocsync/rocsync/internal/testenv"
	"github.com/rocsync/rocsync/syncstate"
)

// chainLen is the length of the replay benchmarks' 99-op chain.
const chainLen = 99

// scaleChain submits chainLen x = 1·x on t.
func scaleChain(t *Task, x *Array) error {
	for range chainLen {
		if err := t.ScaleInto(x, 1, x); err != nil {
			return err
		}
	}
	return nil
}

// benchHeld runs step b.N times, batch at a time with the emulated GPU
// held (the batch is all submitted before any of it runs), timing only the
// submissions, and stops the timer.
func benchHeld(b *testing.B, d *Device, t *Task, batch int, step func() error) {
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		must(b, t.Synchronize())
		release := d.machine().Hold()
		b.StartTimer()
		for i := 0; i < batch && done < b.N; i++ {
			must(b, step())
			done++
		}
		b.StopTimer()
		release()
		b.StartTimer()
	}
	b.StopTimer()
}

// BenchmarkReplayChain99 replays a recorded 99-op chain on one HSA queue
// (the emulator, checker and delays off, as the hot-path benchmarks):
// one op of the op path, 99 prebuilt AQL packets copied into the ring and
// one doorbell store. The timer runs only while the emulated GPU is held,
// ten replays at a time (990 packets fit the 1024-packet ring), so
// ns/packet is the host's cost per replayed packet, not the emulator's
// cost to execute it.
func BenchmarkReplayChain99(b *testing.B) {
	benchChain99(b, true)
}

// BenchmarkEagerChain99 submits the same 99 ops eagerly, timed the same
// way: the baseline (ns/packet is per op).
func BenchmarkEagerChain99(b *testing.B) {
	benchChain99(b, false)
}

func benchChain99(b *testing.B, replay bool) {
	d := benchDevice(b, DeviceSide)
	t := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	must(b, err)
	step := func() error { return scaleChain(t, x) }
	if replay {
		rec, err := t.Record(step)
		must(b, err)
		defer func() { must(b, rec.Close()) }()
		step = rec.Replay
	}
	for range 64 {
		must(b, step())
	}
	must(b, t.Synchronize())
	const batch = benchQueue / chainLen
	bells := d.machine().DoorbellStores()
	benchHeld(b, d, t, batch, step)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chainLen), "ns/packet")
	b.ReportMetric(float64(d.machine().DoorbellStores()-bells)/float64(b.N), "doorbells/replay")
	must(b, t.Synchronize())
}

// BenchmarkReplayChain99Fresh replays the H100 bench's chain99 shape: 99
// multiplies, each into a fresh array (t1 = x∘x, t(i+1) = x∘t(i)), so the
// recording's operands are 100 buffers and a replay's bookkeeping of them
// (the sync state of each operand) is what is timed, held as in
// BenchmarkReplayChain99.
func BenchmarkReplayChain99Fresh(b *testing.B) {
	d := benchDevice(b, DeviceSide)
	t := d.DefaultTask()
	x, err := d.FromFloat32(1, 64, make([]float32, 64))
	must(b, err)
	rec, err := t.Record(func() error {
		a := x
		for range chainLen {
			var err error
			if a, err = t.Mul(x, a); err != nil {
				return err
			}
		}
		return nil
	})
	must(b, err)
	defer func() { must(b, rec.Close()) }()
	for range 64 {
		must(b, rec.Replay())
	}
	must(b, t.Synchronize())
	benchHeld(b, d, t, benchQueue/chainLen, rec.Replay)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chainLen), "ns/packet")
	must(b, t.Synchronize())
}

// BenchmarkReplaySeed runs each seed program (into preallocated arrays,
// 32×32) eagerly and replayed, to completion (Synchronize) each
// iteration, under DeviceSide and Unified on the emulator.
func BenchmarkReplaySeed(b *testing.B) {
	for _, p := range replaySeedPrograms {
		for _, pol := range []Policy{DeviceSide, Unified} {
			for _, mode := range []string{"eager", "replay"} {
				b.Run(p.Name+"/"+pol.String()+"/"+mode, func(b *testing.B) {
					d := benchDevice(b, pol)
					t := d.DefaultTask()
					x, err := d.FromFloat32(32, 32, randMatrix(1, 32))
					must(b, err)
					o := make([]*Array, p.Outs)
					for i := range o {
						o[i], err = d.Empty(32, 32, Float32)
						must(b, err)
					}
					step := func() error { return p.Run(t, x, o) }
					if mode == "replay" {
						rec, err := t.Record(step)
						must(b, err)
						defer func() { must(b, rec.Close()) }()
						step = rec.Replay
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						must(b, errors.Join(step(), t.Synchronize()))
					}
				})
			}
		}
	}
}

// BenchmarkGPUReplay (ROCSYNC_GPU=1; ROCSYNC_BACKEND=cuda for NVIDIA)
// times the host's cost to submit one iteration, eager against replayed,
// for the 99-op chain and the seed programs at 128×128 under DeviceSide:
// the device drains every 64 iterations, with the timer stopped.
func BenchmarkGPUReplay(b *testing.B) {
	if !gpuRun() {
		b.Skip("set ROCSYNC_GPU=1 (and ROCSYNC_BACKEND=cuda on NVIDIA)")
	}
	const n = 128
	progs := append([]replayProgram{{"chain99", 1, func(t *Task, x *Array, o []*Array) error { return scaleChain(t, o[0]) }}},
		replaySeedPrograms...)
	for _, p := range progs {
		for _, mode := range []string{"eager", "replay"} {
			b.Run(p.Name+"/"+mode, func(b *testing.B) {
				d, err := Open(Options{Backend: gpuBackend(), Policy: DeviceSide, LogLevel: LogOff})
				must(b, err)
				defer d.Close()
				t := d.DefaultTask()
				x, err := d.FromFloat32(n, n, randMatrix(1, n))
				must(b, err)
				o := make([]*Array, p.Outs)
				for i := range o {
					o[i], err = d.FromFloat32(n, n, randMatrix(2, n))
					must(b, err)
				}
				step := func() error { return p.Run(t, x, o) }
				if mode == "replay" {
					rec, err := t.Record(step)
					must(b, err)
					defer func() { must(b, rec.Close()) }()
					step = rec.Replay
				}
				for range 64 {
					must(b, step())
				}
				must(b, t.Synchronize())
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if i%64 == 63 {
						b.StopTimer()
						must(b, t.Synchronize())
						b.StartTimer()
					}
					must(b, step())
				}
				b.StopTimer()
				must(b, t.Synchronize())
			})
		}
	}
}

// replayOperandCounts are BenchmarkReplayOperands' sizes.
var replayOperandCounts = []int{1, 10, 100, 1000}

// BenchmarkReplayOperands/N times one replay of a recording whose
// operands are N arrays, each read and written once (host functions of up
// to MaxOperands arrays each, in one host-lane segment: one submission
// whatever N), on the emulator under DeviceSide. The host lane is held
// (busy in an eager host function) while a batch of 64 replays is
// submitted, and the timer runs only then, so what is timed is the
// replay's submission: its bookkeeping of the operands' sync states and
// one queued function. ns/op should not grow with N.
// With ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda it runs on the NVIDIA GPU
// (host functions as graph nodes); otherwise on the emulator.
func BenchmarkReplayOperands(b *testing.B) {
	benchReplayOperands(b, false)
}

// BenchmarkReplayOperandsTouched/N is BenchmarkReplayOperands with an
// eager host function reading one of the operands before each replay
// (outside the timer), as a program's eager ops read a recording's inputs
// between its replays: the replay then looks at that operand alone, and
// ns/op should not grow with N either.
func BenchmarkReplayOperandsTouched(b *testing.B) {
	benchReplayOperands(b, true)
}

func benchReplayOperands(b *testing.B, touch bool) {
	for _, n := range replayOperandCounts {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var d *Device
			if testenv.OnCUDA() {
				var err error
				d, err = Open(Options{Backend: CUDA, Policy: DeviceSide, LogLevel: LogOff})
				must(b, err)
				b.Cleanup(func() { _ = d.Close() })
			} else {
				d = benchDevice(b, DeviceSide)
			}
			t := d.DefaultTask()
			xs := make([]*Array, n)
			for i := range xs {
				var err error
				xs[i], err = d.FromFloat32(1, 4, make([]float32, 4))
				must(b, err)
			}
			rec, err := t.Record(func() error {
				for i := 0; i < n; i += syncstate.MaxOperands {
					var args []Arg
					for _, x := range xs[i:min(n, i+syncstate.MaxOperands)] {
						args = append(args, InOut(x))
					}
					if err := t.HostFunc(args, func(*HostAccess) error { return nil }); err != nil {
						return err
					}
				}
				return nil
			})
			must(b, err)
			defer func() { must(b, rec.Close()) }()
			for range 64 {
				must(b, rec.Replay())
			}
			must(b, t.Synchronize())
			gate := make(chan struct{})
			hold := func(*HostAccess) error { <-gate; return nil }
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				b.StopTimer()
				must(b, t.HostFunc(nil, hold))
				b.StartTimer()
				for i := 0; i < 64 && done < b.N; i++ {
					if touch {
						b.StopTimer()
						must(b, t.HostFunc([]Arg{In(xs[0])}, func(*HostAccess) error { return nil }))
						b.StartTimer()
					}
					must(b, rec.Replay())
					done++
				}
				b.StopTimer()
				gate <- struct{}{}
				must(b, t.Synchronize())
				b.StartTimer()
			}
			b.StopTimer()
		})
	}
}

// BenchmarkReplayOperandsScale/N replays N arrays each scaled in place
// (x = 1·x: N AQL packets, one segment) with the emulated GPU held, as
// BenchmarkReplayChain99; ns/op grows with N only by the packets' copy
// into the ring (ns/packet is per operand).
func BenchmarkReplayOperandsScale(b *testing.B) {
	for _, n := range replayOperandCounts {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			d := benchDevice(b, DeviceSide)
			t := d.DefaultTask()
			xs := make([]*Array, n)
			for i := range xs {
				var err error
				xs[i], err = d.FromFloat32(1, 4, make([]float32, 4))
				must(b, err)
			}
			rec, err := t.Record(func() error {
				for _, x := range xs {
					if err := t.ScaleInto(x, 1, x); err != nil {
						return err
					}
				}
				return nil
			})
			must(b, err)
			defer func() { must(b, rec.Close()) }()
			for range 8 {
				must(b, rec.Replay())
				must(b, t.Synchronize())
			}
			benchHeld(b, d, t, max(1, (benchQueue-24)/n), rec.Replay)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/packet")
			must(b, t.Synchronize())
		})
	}
}

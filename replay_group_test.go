package rocsync

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testhooks"
)

// A recording's operands share one sync record (syncstate.Group): a
// replay that finds them as the previous replay left them records its
// fence there once, without touching them, and an op or a read-back that
// touches one of them later takes that fence from the group. These tests
// interleave replays with eager ops of the recording's task and of
// another task (another queue) on the operands, under the hazard checker
// and random delays, and compare every value with a model on the host.

// groupFixture is a recording over inputs xs (read only) and ys (each
// y += x), more operands than one Op holds, and an array z the recording
// does not touch. With mixed, a gemm g = xs[0]·xs[1] on the library
// stream splits the recording into three segments (the last one back on
// the first one's timeline).
type groupFixture struct {
	d      *Device
	a, b   *Task
	xs, ys []*Array
	g, z   *Array
	rec    *Recording
	// model holds every array's values as the program says.
	model map[*Array][]float32
}

const groupN = 4 // arrays are groupN×groupN

func newGroupFixture(t *testing.T, d *Device, mixed bool) *groupFixture {
	t.Helper()
	f := &groupFixture{d: d, model: map[*Array][]float32{}}
	var err error
	f.a, err = d.NewTask()
	require.NoError(t, err)
	f.b, err = d.NewTask()
	require.NoError(t, err)
	mk := func(seed int) *Array {
		v := make([]float32, groupN*groupN)
		for i := range v {
			v[i] = float32((seed + i) % 4)
		}
		x, err := d.FromFloat32(groupN, groupN, v)
		require.NoError(t, err)
		f.model[x] = slices.Clone(v)
		return x
	}
	for i := range 2 {
		f.xs = append(f.xs, mk(i))
	}
	for i := range 10 {
		f.ys = append(f.ys, mk(10+i))
	}
	f.g, f.z = mk(30), mk(31)
	f.rec, err = f.a.Record(func() error {
		for i, y := range f.ys {
			if mixed && i == len(f.ys)/2 {
				if err := f.a.MatMulInto(f.g, f.xs[0], f.xs[1], false, false); err != nil {
					return err
				}
			}
			if err := f.a.AddInto(y, y, f.xs[i%2]); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	if mixed && d.Policy() != Unified {
		require.Equal(t, 3, f.rec.Segments())
	}
	return f
}

func (f *groupFixture) close(t *testing.T) {
	require.NoError(t, f.rec.Close())
	require.NoError(t, f.a.Close())
	require.NoError(t, f.b.Close())
}

// replay replays and updates the model.
func (f *groupFixture) replay(t *testing.T) {
	t.Helper()
	require.NoError(t, f.rec.Replay())
	mixed := f.rec.Ops() > len(f.ys)
	for i, y := range f.ys {
		if mixed && i == len(f.ys)/2 {
			f.model[f.g] = matmulModel(f.model[f.xs[0]], f.model[f.xs[1]])
		}
		addModel(f.model[y], f.model[y], f.model[f.xs[i%2]])
	}
}

func addModel(out, a, b []float32) {
	for i := range out {
		out[i] = a[i] + b[i]
	}
}

func matmulModel(a, b []float32) []float32 {
	c := make([]float32, groupN*groupN)
	for i := range groupN {
		for j := range groupN {
			var s float64
			for k := range groupN {
				s += float64(a[i*groupN+k]) * float64(b[k*groupN+j])
			}
			c[i*groupN+j] = float32(s)
		}
	}
	return c
}

// check reads x back and compares it with the model.
func (f *groupFixture) check(t *testing.T, x *Array, what string) {
	t.Helper()
	got, err := x.Float32s()
	require.NoError(t, err)
	require.Equal(t, f.model[x], got, what)
}

// openGroupDevice opens the emulator with the hazard checker and random
// delays (the caller checks the hazards).
func openGroupDevice(t *testing.T, p Policy, seed uint64) *Device {
	t.Helper()
	d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
		Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: seed}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// groupScenarios are the orderings a replay that skips its operands must
// keep: each runs after two replays (the second one skipped the
// operands) with the device held, so that what it submits is pending
// together, and returns what to check.
var groupScenarios = []struct {
	name string
	run  func(t *testing.T, f *groupFixture) []*Array
}{
	// Another queue reads what a skipping replay wrote (read after write).
	{"other-queue-reads-output", func(t *testing.T, f *groupFixture) []*Array {
		f.replay(t)
		require.NoError(t, f.b.CopyInto(f.z, f.ys[3]))
		f.model[f.z] = slices.Clone(f.model[f.ys[3]])
		return []*Array{f.z}
	}},
	// Another queue overwrites what a skipping replay wrote (write after
	// write).
	{"other-queue-overwrites-output", func(t *testing.T, f *groupFixture) []*Array {
		f.replay(t)
		require.NoError(t, f.b.Fill(f.ys[9], 7))
		fillModel(f.model[f.ys[9]], 7)
		return []*Array{f.ys[9]}
	}},
	// Another queue overwrites what a skipping replay read (write after
	// read).
	{"other-queue-overwrites-input", func(t *testing.T, f *groupFixture) []*Array {
		f.replay(t)
		require.NoError(t, f.b.Fill(f.xs[1], 2))
		fillModel(f.model[f.xs[1]], 2)
		return f.ys
	}},
	// The next replay reads what another queue wrote in between (read
	// after write).
	{"replay-reads-other-queues-write", func(t *testing.T, f *groupFixture) []*Array {
		require.NoError(t, f.b.Fill(f.xs[0], 3))
		fillModel(f.model[f.xs[0]], 3)
		f.replay(t)
		return f.ys
	}},
	// The next replay overwrites what another queue read in between
	// (write after read).
	{"replay-overwrites-other-queues-read", func(t *testing.T, f *groupFixture) []*Array {
		require.NoError(t, f.b.CopyInto(f.z, f.ys[4]))
		f.model[f.z] = slices.Clone(f.model[f.ys[4]])
		f.replay(t)
		return []*Array{f.z, f.ys[4]}
	}},
	// The next replay overwrites what another queue wrote in between
	// (write after write: its add reads it too).
	{"replay-overwrites-other-queues-write", func(t *testing.T, f *groupFixture) []*Array {
		require.NoError(t, f.b.Fill(f.ys[0], 5))
		fillModel(f.model[f.ys[0]], 5)
		f.replay(t)
		return []*Array{f.ys[0]}
	}},
}

func fillModel(v []float32, x float32) {
	for i := range v {
		v[i] = x
	}
}

// runGroupScenario runs scenario i and reports whether every value
// matched the model and the hazard checker stayed quiet.
func runGroupScenario(t *testing.T, p Policy, i int, mixed bool) (sound bool, detail string) {
	d := openGroupDevice(t, p, uint64(7+i))
	f := newGroupFixture(t, d, mixed)
	f.replay(t)
	f.replay(t)
	require.NoError(t, d.Synchronize())
	// Hold the device where nothing waits on the host (a host wait on a
	// held device would never end), so that the scenario's work is
	// pending together.
	holds := (p == DeviceSide || p == DeviceBridge) && !mixed || p == Unified
	var release func()
	if holds {
		release = d.machine().Hold()
	}
	check := groupScenarios[i].run(t, f)
	if holds {
		release()
	}
	sound = true
	for _, x := range check {
		got, err := x.Float32s()
		require.NoError(t, err)
		if !slices.Equal(f.model[x], got) {
			sound = false
			detail += fmt.Sprintf("%v: got %v, want %v\n", x, got, f.model[x])
		}
	}
	require.NoError(t, d.Synchronize())
	if hz := d.Hazards(); len(hz) != 0 {
		sound = false
		detail += fmt.Sprintf("hazards: %v\n", hz)
	}
	f.close(t)
	return sound, detail
}

// Every ordering between a replay that skipped its operands and eager
// work on them around it holds, under every policy, one segment or three.
func TestReplayGroupOrdersEagerWork(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		for _, p := range allPolicies {
			for i, sc := range groupScenarios {
				t.Run(fmt.Sprintf("mixed=%v/%v/%s", mixed, p, sc.name), func(t *testing.T) {
					sound, detail := runGroupScenario(t, p, i, mixed)
					require.True(t, sound, detail)
				})
			}
		}
	}
}

// The scenarios fail when the group is broken: an op that does not take
// the replay's fence from the group (no fold) is not ordered after the
// replay, and a replay that is not told of an op on its operands in
// between (left settled) is not ordered after the op. The hazard checker
// (or a wrong value) shows each.
func TestReplayGroupBrokenIsCaught(t *testing.T) {
	if raceEnabled {
		// The unordered accesses really race: Go's race detector would
		// report the emulator's memory.
		t.Skip("unordered races on purpose; run without -race")
	}
	breaks := []struct {
		hook      interface{ Store(bool) }
		scenarios []string
	}{
		{&testhooks.Switches.SkipGroupFold, []string{"other-queue-reads-output", "other-queue-overwrites-output", "other-queue-overwrites-input"}},
		{&testhooks.Switches.SkipGroupUnsettle, []string{"replay-reads-other-queues-write", "replay-overwrites-other-queues-read", "replay-overwrites-other-queues-write"}},
	}
	for _, br := range breaks {
		for i, sc := range groupScenarios {
			if !slices.Contains(br.scenarios, sc.name) {
				continue
			}
			t.Run(sc.name, func(t *testing.T) {
				br.hook.Store(true)
				defer br.hook.Store(false)
				sound, detail := runGroupScenario(t, DeviceSide, i, false)
				require.False(t, sound, "the broken group went unnoticed")
				t.Log(detail)
			})
		}
	}
}

// A read-back after a replay that skipped its operands waits for it: the
// host read sees the replay's result, and the array reports the replay's
// fence as pending while the device is held.
func TestReplayGroupReadBackWaits(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified} {
		t.Run(p.String(), func(t *testing.T) {
			d := openGroupDevice(t, p, 11)
			f := newGroupFixture(t, d, false)
			f.replay(t)
			f.replay(t)
			require.NoError(t, d.Synchronize())
			release := d.machine().Hold()
			f.replay(t)
			require.Positive(t, f.ys[2].PendingFences(), "the skipped operand does not show the replay")
			release()
			f.check(t, f.ys[2], "read back after a skipping replay")
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
			f.close(t)
		})
	}
}

// Random interleavings of replays, eager ops of both tasks on the
// operands, and read-backs, under every policy, compared with the model
// after every read-back and at the end, with the hazard checker on.
// ROCSYNC_REPLAY_GROUP_SEEDS=n runs n seeds instead of 6.
func TestReplayGroupRandomInterleavings(t *testing.T) {
	seeds := 6
	if v, err := strconv.Atoi(os.Getenv("ROCSYNC_REPLAY_GROUP_SEEDS")); err == nil && v > 0 {
		seeds = v
	} else if testing.Short() {
		seeds = 2
	}
	for _, mixed := range []bool{false, true} {
		for _, p := range allPolicies {
			for seed := range seeds {
				t.Run(fmt.Sprintf("mixed=%v/%v/seed=%d", mixed, p, seed), func(t *testing.T) {
					runGroupInterleaving(t, p, uint64(seed), mixed)
				})
			}
		}
	}
}

func runGroupInterleaving(t *testing.T, p Policy, seed uint64, mixed bool) {
	d := openGroupDevice(t, p, seed+100)
	f := newGroupFixture(t, d, mixed)
	rng := rand.New(rand.NewPCG(seed, 23))
	members := append(append([]*Array{f.g}, f.xs...), f.ys...)
	task := func() *Task {
		if rng.IntN(2) == 0 {
			return f.a
		}
		return f.b
	}
	name := func(tk *Task) string {
		if tk == f.a {
			return "task a"
		}
		return "task b"
	}
	var log []string
	for step := range 60 {
		switch k := rng.IntN(10); {
		case k < 4:
			f.replay(t)
			log = append(log, "replay")
		case k == 4:
			y, x := f.ys[rng.IntN(len(f.ys))], f.xs[rng.IntN(2)]
			tk := task()
			require.NoError(t, tk.AddInto(y, y, x))
			addModel(f.model[y], f.model[y], f.model[x])
			log = append(log, fmt.Sprintf("%s: %v += %v", name(tk), y, x))
		case k == 5:
			x, v := f.xs[rng.IntN(2)], float32(rng.IntN(4))
			tk := task()
			require.NoError(t, tk.Fill(x, float64(v)))
			fillModel(f.model[x], v)
			log = append(log, fmt.Sprintf("%s: fill %v", name(tk), x))
		case k == 6:
			m := members[rng.IntN(len(members))]
			tk := task()
			require.NoError(t, tk.CopyInto(f.z, m))
			f.model[f.z] = slices.Clone(f.model[m])
			log = append(log, fmt.Sprintf("%s: z = %v", name(tk), m))
		case k == 7:
			y, v := f.ys[rng.IntN(len(f.ys))], float32(rng.IntN(4))
			tk := task()
			require.NoError(t, tk.Fill(y, float64(v)))
			fillModel(f.model[y], v)
			log = append(log, fmt.Sprintf("%s: fill %v", name(tk), y))
		default:
			x := append(members, f.z)[rng.IntN(len(members)+1)]
			got, err := x.Float32s()
			require.NoError(t, err)
			require.Equal(t, f.model[x], got, "step %d, read back %v after:\n%v", step, x, log)
		}
	}
	require.NoError(t, d.Synchronize())
	for _, x := range append(members, f.z) {
		f.check(t, x, fmt.Sprintf("at the end of:\n%v", log))
	}
	require.Empty(t, d.Hazards(), "hazard checker fired after:\n%v", log)
	f.close(t)
}

// A replay that skips its operands decides and counts what one that takes
// them all does: the same sequence of replays and eager ops, on a device
// where the recording has its group and on one where it has none (its
// operands are in another recording's group), gives the same counts,
// with the device held so that nothing completes in between (under
// WaitAlways everything has completed instead).
func TestReplayGroupCountsAsUngrouped(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified, DeviceBridge, WaitAlways} {
		t.Run(p.String(), func(t *testing.T) {
			var stats [2]Stats
			for i, grouped := range []bool{true, false} {
				d := openGroupDevice(t, p, 5)
				f := newGroupFixture(t, d, false)
				if !grouped {
					// Re-record after another recording took the
					// operands into its group.
					require.NoError(t, f.rec.Close())
					hog, err := f.b.Record(func() error {
						for _, y := range f.ys {
							if err := f.b.AddInto(y, y, f.xs[0]); err != nil {
								return err
							}
						}
						return f.b.AddInto(f.xs[1], f.xs[1], f.xs[1])
					})
					require.NoError(t, err)
					defer func() { require.NoError(t, hog.Close()) }()
					f.rec, err = f.a.Record(func() error {
						for i, y := range f.ys {
							if err := f.a.AddInto(y, y, f.xs[i%2]); err != nil {
								return err
							}
						}
						return nil
					})
					require.NoError(t, err)
					require.Nil(t, f.rec.grp)
				} else {
					require.NotNil(t, f.rec.grp)
				}
				f.replay(t)
				require.NoError(t, d.Synchronize())
				before := f.a.Stats()
				release := func() {}
				if p != WaitAlways {
					release = d.machine().Hold()
				}
				f.replay(t)
				if grouped {
					require.True(t, f.rec.grp.Settled(), "a replay after a replay skips the operands")
				}
				f.replay(t)
				require.NoError(t, f.b.Fill(f.xs[0], 1)) // another queue writes an input
				fillModel(f.model[f.xs[0]], 1)
				f.replay(t)
				f.replay(t)
				require.NoError(t, f.a.Fill(f.ys[1], 2)) // the same queue writes an output
				fillModel(f.model[f.ys[1]], 2)
				f.replay(t)
				f.replay(t)
				stats[i] = f.a.Stats().Sub(before)
				release()
				for _, y := range f.ys {
					f.check(t, y, "after the sequence")
				}
				require.NoError(t, d.Synchronize())
				require.Empty(t, d.Hazards())
				f.close(t)
			}
			require.Equal(t, stats[1], stats[0], "grouped (first) and ungrouped counts")
			require.Positive(t, stats[0].SkippedWaits)
		})
	}
}

// A fault in a replay that skipped its operands reaches them as one in a
// replay that took them would: the same errors, word for word, from the
// next replay, from ops and read-backs of what it wrote and read, on a
// device where the recording has its group and on one where it has none.
func TestReplayGroupFaultAsUngrouped(t *testing.T) {
	var outcomes [2][]string
	for i, grouped := range []bool{true, false} {
		d := openGroupDevice(t, DeviceSide, 9)
		f := newGroupFixture(t, d, false)
		if !grouped {
			require.NoError(t, f.rec.Close())
			hog, err := f.b.Record(func() error { return f.b.AddInto(f.ys[0], f.ys[0], f.xs[0]) })
			require.NoError(t, err)
			defer func() { require.NoError(t, hog.Close()) }()
			f.rec, err = f.a.Record(func() error {
				for i, y := range f.ys {
					if err := f.a.AddInto(y, y, f.xs[i%2]); err != nil {
						return err
					}
				}
				return nil
			})
			require.NoError(t, err)
			require.Nil(t, f.rec.grp)
		}
		f.replay(t)
		f.replay(t)
		require.NoError(t, d.Synchronize())
		if grouped {
			require.True(t, f.rec.grp.Settled())
		}
		// The fourth add of the next replay faults.
		var adds int
		d.machine().SetFaultInjector(func(op string) bool {
			if strings.Contains(op, "add") {
				adds++
				return adds == 4
			}
			return false
		})
		require.NoError(t, f.rec.Replay())
		errText := func(err error) string {
			if err == nil {
				return "<nil>"
			}
			return err.Error()
		}
		out := []string{errText(f.a.Synchronize())}
		d.machine().SetFaultInjector(nil)
		out = append(out, errText(f.rec.Replay()))
		out = append(out, errText(f.b.CopyInto(f.z, f.ys[5])), errText(f.b.CopyInto(f.z, f.xs[0])))
		for _, x := range append(append([]*Array{}, f.ys...), f.xs...) {
			_, err := x.Float32s()
			out = append(out, errText(x.Err()), errText(err))
		}
		out = append(out, errText(f.b.Fill(f.ys[6], 1)), errText(f.b.Synchronize()))
		_, err := f.ys[6].Float32s()
		out = append(out, errText(err))
		outcomes[i] = out
		_ = f.rec.Close()
		_ = f.a.Close()
		_ = f.b.Close()
	}
	require.Equal(t, outcomes[1], outcomes[0], "grouped (first) and ungrouped outcomes")
	require.NotEqual(t, "<nil>", outcomes[0][0], "the replay did not fault")
	t.Log(strings.Join(outcomes[0], "\n"))
}

// Another goroutine's task reads the operands and rewrites the inputs
// (with the values they hold) while the recording's task replays: every
// access stays ordered (the hazard checker; Go's race detector under
// -race) and the outputs end as the replays make them.
func TestReplayGroupConcurrentTask(t *testing.T) {
	for _, p := range []Policy{DeviceSide, Unified, SkipSameQueue} {
		t.Run(p.String(), func(t *testing.T) {
			d := openGroupDevice(t, p, 13)
			f := newGroupFixture(t, d, false)
			for _, x := range f.xs {
				require.NoError(t, f.a.Fill(x, 1))
				fillModel(f.model[x], 1)
			}
			const replays = 150
			done := make(chan error, 1)
			go func() {
				rng := rand.New(rand.NewPCG(3, 4))
				var err error
				for i := 0; i < replays && err == nil; i++ {
					switch rng.IntN(4) {
					case 0:
						err = f.b.Fill(f.xs[rng.IntN(2)], 1)
					case 1:
						err = f.b.CopyInto(f.z, f.ys[rng.IntN(len(f.ys))])
					case 2:
						_, err = f.ys[rng.IntN(len(f.ys))].Float32s()
					default:
						err = f.xs[rng.IntN(2)].Err()
					}
				}
				done <- errors.Join(err, f.b.Synchronize())
			}()
			for range replays {
				f.replay(t)
			}
			require.NoError(t, <-done)
			require.NoError(t, d.Synchronize())
			for _, y := range f.ys {
				f.check(t, y, "after the replays")
			}
			require.Empty(t, d.Hazards())
			f.close(t)
		})
	}
}

// Back-to-back replays of the mixed chain (kernels, a gemm, a user
// kernel, a library call, a host function and a reduction: segments on
// the HSA queue, the HIP stream and the host lane, the last one on the
// first one's timeline), which skip their operands after the first,
// under every policy: each replay is ordered after the one before (the
// hazard checker) and the results equal an eager run's.
func TestReplayGroupBackToBackMixedChain(t *testing.T) {
	for _, pol := range allPolicies {
		t.Run(pol.String(), func(t *testing.T) {
			d := openOpPath(t, pol)
			saxpy := loadSAXPY(t, d)
			tk, err := d.NewTask()
			require.NoError(t, err)
			const n = 16
			p := mixedChain(d, saxpy)
			x, err := d.FromFloat32(n, n, randMatrix(4, n))
			require.NoError(t, err)
			eager, replayed := outsFor(t, d, p, n), outsFor(t, d, p, n)
			rec, err := tk.Record(func() error { return p.Run(tk, x, replayed) })
			require.NoError(t, err)
			require.Greater(t, rec.Segments(), 2)
			settled := 0
			for range 4 {
				require.NoError(t, rec.Replay())
				if rec.grp.Settled() {
					settled++
				}
			}
			require.Equal(t, 4, settled, "every replay settles the group")
			require.Equal(t, rec.segs[0].tl, rec.segs[len(rec.segs)-1].tl,
				"the last segment is on the first one's timeline: replays after the first skip the operands")
			require.NoError(t, p.Run(tk, x, eager))
			for i := range eager {
				want, err := eager[i].Float32s()
				require.NoError(t, err)
				got, err := replayed[i].Float32s()
				require.NoError(t, err)
				require.Equal(t, want, got, "output %d", i)
			}
			require.NoError(t, rec.Close())
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards(), "hazard checker fired")
		})
	}
}

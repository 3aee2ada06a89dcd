package rocsync

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/syncstate"
)

// fenceScopeProgram runs kernels whose results leave the GPU every way
// there is: another task's queue on the same GPU (agent scope suffices),
// a host function, a gemm on the HIP stream, a read-back, and a copy to
// another GPU; it checks every value the host sees.
func fenceScopeProgram(t *testing.T, devs []*Device) {
	d := devs[0]
	const n = 256
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(i%7 + 1)
	}
	x, err := d.FromFloat32(16, 16, xs)
	require.NoError(t, err)
	t1, err := d.NewTask()
	require.NoError(t, err)
	defer func() { require.NoError(t, t1.Close()) }()
	t2, err := d.NewTask()
	require.NoError(t, err)
	defer func() { require.NoError(t, t2.Close()) }()
	y, err := t1.Add(x, x)
	require.NoError(t, err)
	for range 20 {
		require.NoError(t, t1.AddInto(y, y, x)) // y = 22x
	}
	z, err := t2.Mul(y, x) // another queue of the GPU: z = 22x²
	require.NoError(t, err)
	w, err := d.Empty(16, 16, Float32)
	require.NoError(t, err)
	require.NoError(t, t1.HostFunc([]Arg{In(y), Out(w)}, func(h *HostAccess) error {
		v, err := h.Float32s(y)
		if err != nil {
			return err
		}
		for i := range v {
			if v[i] != 22*xs[i] {
				t.Errorf("host function: y[%d] = %v, want %v", i, v[i], 22*xs[i])
				break
			}
			v[i]++
		}
		return h.SetFloat32s(w, v)
	}))
	u, err := t1.Mul(w, x) // after the host function: u = (22x+1)x
	require.NoError(t, err)
	g, err := t2.MatMul(z, x, false, false) // rocBLAS on the HIP stream
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, t1.AddInto(u, u, x)) // u = (22x+1)x + 5x
	}
	gotZ, err := z.Float32s()
	require.NoError(t, err)
	gotU, err := u.Float32s()
	require.NoError(t, err)
	gotG, err := g.Float32s()
	require.NoError(t, err)
	for i := range xs {
		require.Equal(t, 22*xs[i]*xs[i], gotZ[i], "z[%d]", i)
		require.Equal(t, (22*xs[i]+1)*xs[i]+5*xs[i], gotU[i], "u[%d]", i)
	}
	for r := range 16 {
		for c := range 16 {
			var want float32
			for k := range 16 {
				want += 22 * xs[r*16+k] * xs[r*16+k] * xs[k*16+c]
			}
			require.InDelta(t, want, gotG[r*16+c], 1e-3*float64(want), "g[%d,%d]", r, c)
		}
	}
	if len(devs) < 2 {
		return
	}
	t3, err := devs[1].NewTask()
	require.NoError(t, err)
	defer func() { require.NoError(t, t3.Close()) }()
	for range 3 {
		require.NoError(t, t1.AddInto(u, u, x)) // u = (22x+1)x + 8x, read by the other GPU
	}
	p, err := devs[1].Empty(16, 16, Float32)
	require.NoError(t, err)
	require.NoError(t, t3.CopyPeer(p, u))
	q, err := t3.Add(p, p)
	require.NoError(t, err)
	gotQ, err := q.Float32s()
	require.NoError(t, err)
	for i := range xs {
		require.Equal(t, 2*((22*xs[i]+1)*xs[i]+8*xs[i]), gotQ[i], "q[%d]", i)
	}
}

// systemScopeFences makes the ROCm driver's HSA queues release every
// packet at system scope for t (testhooks.SystemScopeFences), as before
// agent-scope fences became the default.
func systemScopeFences(t *testing.T) {
	testhooks.SystemScopeFences.Store(true)
	t.Cleanup(func() { testhooks.SystemScopeFences.Store(false) })
}

// With agent-scope fences on, kernels on HSA queues release at agent
// scope (queue.Config.AgentScope):
// what they write reaches the host, HIP's copies and other GPUs only
// through the system-scope releases queue/ puts where work leaves the GPU.
// Under every policy, with the hazard checker (which reports a visibility
// hazard for a read outside the GPU that no system-scope release
// precedes) and random delays, the host and the other GPU see the right
// values, on one GPU and on two.
func TestNarrowedFenceScopesKeepDataCorrect(t *testing.T) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			t.Run("one GPU", func(t *testing.T) { fenceScopeProgram(t, []*Device{openStrict(t, p)}) })
			t.Run("two GPUs", func(t *testing.T) {
				devs := openPeers(t, p, 2)
				fenceScopeProgram(t, devs)
				for _, d := range devs {
					require.Empty(t, d.Hazards(), "hazard checker fired")
				}
			})
		})
	}
}

// Without the system-scope releases (a test switch turns queue/'s
// markers into agent-scope ones and skips its flushes), the checker
// catches the host reading what a kernel left in the GPU's L2, naming
// the kernel, under every policy that puts kernels on HSA queues.
func TestMissingSystemScopeReleaseIsCaught(t *testing.T) {
	for _, p := range syncstate.Policies {
		if p == Unified {
			continue // kernels run on HIP streams, whose fences HIP sets
		}
		t.Run(p.String(), func(t *testing.T) {
			d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
				Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 7}})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			tk := d.DefaultTask()
			x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
			require.NoError(t, err)
			testhooks.SkipSystemRelease.Store(true)
			defer testhooks.SkipSystemRelease.Store(false)
			y, err := tk.Add(x, x)
			require.NoError(t, err)
			got, err := y.Float32s()
			require.NoError(t, err)
			require.Equal(t, []float32{2, 4, 6, 8}, got) // the emulator's memory has no L2: only the checker sees it
			require.True(t, hazardNamed(d, "visibility hazard", "rocsync_add"), "no visibility hazard in %v", d.Hazards())
		})
	}
}

// hazardNamed reports whether the checker found a hazard of kind (as its
// message names it) involving kernel.
func hazardNamed(d *Device, kind, kernel string) bool {
	for _, h := range d.Hazards() {
		if strings.Contains(h.Error(), kind) && strings.Contains(h.Error(), kernel) {
			return true
		}
	}
	return false
}

// droppingAcquires runs program under every policy that puts kernels on
// HSA queues, on the emulator with the hazard checker and random delays,
// with the system-scope acquires kept and dropped (the SkipSystemAcquire
// switch, set before program runs): kept, the checker finds nothing;
// dropped, it finds a stale read by kernel.
func droppingAcquires(t *testing.T, kernel string, program func(t *testing.T, d *Device)) {
	for _, p := range syncstate.Policies {
		if p == Unified {
			continue // kernels run on HIP streams, whose fences HIP sets
		}
		for _, skip := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/skip=%v", p, skip), func(t *testing.T) {
				d, err := Open(Options{Backend: Emulator, Policy: p, LogLevel: LogOff,
					Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 7}})
				require.NoError(t, err)
				defer func() { require.NoError(t, d.Close()) }()
				testhooks.SkipSystemAcquire.Store(skip)
				defer testhooks.SkipSystemAcquire.Store(false)
				program(t, d)
				if !skip {
					require.Empty(t, d.Hazards())
					return
				}
				require.True(t, hazardNamed(d, "stale read hazard", kernel), "no stale read hazard in %v", d.Hazards())
			})
		}
	}
}

// Without the system-scope acquires, the checker catches a kernel reading
// what the host wrote while its GPU's L2 may still hold an older copy,
// naming the kernel. With them, the same program trips nothing.
func TestMissingSystemScopeAcquireIsCaught(t *testing.T) {
	droppingAcquires(t, "rocsync_add", func(t *testing.T, d *Device) {
		x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
		require.NoError(t, err)
		y, err := d.DefaultTask().Add(x, x)
		require.NoError(t, err)
		got, err := y.Float32s()
		require.NoError(t, err)
		require.Equal(t, []float32{2, 4, 6, 8}, got) // the emulator's memory has no L2: only the checker sees it
	})
}

// A replay reads what was uploaded since the last one: its first packet
// acquires at system scope, so the checker finds no stale read; without
// that acquire it catches the replay's first kernel reading the upload.
// The switch is set while the recording is made, which fixes its
// packets' headers; the uploads are HIP copies, which it does not touch.
func TestReplayAcquiresWhatWasUploadedBetweenReplays(t *testing.T) {
	droppingAcquires(t, "rocsync_mul", func(t *testing.T, d *Device) {
		tk := d.DefaultTask()
		x, err := d.Empty(1, 4, Float32)
		require.NoError(t, err)
		y, err := d.Empty(1, 4, Float32)
		require.NoError(t, err)
		rec, err := tk.Record(func() error {
			if err := tk.MulInto(y, x, x); err != nil {
				return err
			}
			return tk.AddInto(y, y, x)
		})
		require.NoError(t, err)
		defer func() { require.NoError(t, rec.Close()) }()
		for _, in := range [][]float32{{1, 2, 3, 4}, {2, 2, 2, 2}} {
			require.NoError(t, tk.UploadFloat32(x, in))
			require.NoError(t, rec.Replay())
			got, err := y.Float32s()
			require.NoError(t, err)
			for i := range in {
				require.Equal(t, in[i]*in[i]+in[i], got[i])
			}
		}
	})
}

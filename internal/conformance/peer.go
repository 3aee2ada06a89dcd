package conformance

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/syncstate"
)

// noPeerAccess is a machine whose GPUs reach no other's memory: every
// copy between them is staged through host memory.
func noPeerAccess(int, int) bool { return false }

// evenPeersOnly lets only GPUs of the same parity reach each other, so
// that one run has direct and staged copies.
func evenPeersOnly(a, b int) bool { return a%2 == b%2 }

// openPeers opens n devices of be together under p, skipping when there
// are fewer than n.
func openPeers(t *testing.T, be *Backend, p rocsync.Policy, n int, mod func(*rocsync.Options)) []*rocsync.Device {
	t.Helper()
	o := be.Options
	o.Policy = p
	mod(&o)
	devs, err := rocsync.OpenAll(o)
	require.NoError(t, err)
	testcheck.KeepDevices(t, devs, n)
	return devs
}

// PeerChain is a small data-parallel training step over the devices: each
// device computes a gradient-like G_i = X_iᵀ·(X_i·W)² on its shard, the
// gradients are gathered onto device 0 with peer copies and summed there,
// device 0 updates W and the new W is copied back to every device. Every
// step reads across devices both ways: device 0 reads the others'
// gradients, the others read device 0's weights, and device 0's next update
// overwrites weights the others' copies read.
type PeerChain struct {
	devs    []*rocsync.Device
	tasks   []*rocsync.Task
	x, w    []*rocsync.Array // per device: the shard, the weights
	h, g, G []*rocsync.Array // per device: X·W, its square, the gradient
	recv    []*rocsync.Array // on device 0: device i's gradient
	acc     *rocsync.Array   // on device 0
	rows    int              // of each shard
	k, c    int
	lr      float64
	// Settle, if set, runs after every op: the checker's self-test lets
	// each op finish, unobserved by the host, so that the races it
	// reports are not also data races of the test process.
	Settle func()
}

// NewPeerChain makes the chain's arrays and a task per device.
func NewPeerChain(t *testing.T, devs []*rocsync.Device) *PeerChain {
	t.Helper()
	const rows, k, c = 6, 5, 3
	pc := &PeerChain{devs: devs, rows: rows, k: k, c: c, lr: 0.01}
	w0 := make([]float32, k*c)
	for i := range w0 {
		w0[i] = float32(i%7)/10 - 0.3
	}
	for i, d := range devs {
		tk, err := d.NewTask()
		require.NoError(t, err)
		pc.tasks = append(pc.tasks, tk)
		xs := make([]float32, rows*k)
		for j := range xs {
			xs[j] = float32((j*3+i*5)%11)/20 - 0.25
		}
		x, err := d.FromFloat32(rows, k, xs)
		require.NoError(t, err)
		w, err := d.FromFloat32(k, c, w0)
		require.NoError(t, err)
		pc.x, pc.w = append(pc.x, x), append(pc.w, w)
		for _, dst := range []*[]*rocsync.Array{&pc.h, &pc.g} {
			a, err := d.Empty(rows, c, rocsync.Float32)
			require.NoError(t, err)
			*dst = append(*dst, a)
		}
		G, err := d.Empty(k, c, rocsync.Float32)
		require.NoError(t, err)
		pc.G = append(pc.G, G)
		r, err := devs[0].Empty(k, c, rocsync.Float32)
		require.NoError(t, err)
		pc.recv = append(pc.recv, r)
	}
	var err error
	pc.acc, err = devs[0].Empty(k, c, rocsync.Float32)
	require.NoError(t, err)
	return pc
}

// do runs Settle after an op; nothing waits on the host unless the policy
// does.
func (pc *PeerChain) do(err error) error {
	if pc.Settle != nil {
		pc.Settle()
	}
	return err
}

// Step submits one training step.
func (pc *PeerChain) Step() error {
	for i, tk := range pc.tasks {
		if err := pc.do(tk.MatMulInto(pc.h[i], pc.x[i], pc.w[i], false, false)); err != nil {
			return fmt.Errorf("gpu%d h: %w", i, err)
		}
		if err := pc.do(tk.MulInto(pc.g[i], pc.h[i], pc.h[i])); err != nil {
			return fmt.Errorf("gpu%d g: %w", i, err)
		}
		if err := pc.do(tk.MatMulInto(pc.G[i], pc.x[i], pc.g[i], true, false)); err != nil {
			return fmt.Errorf("gpu%d G: %w", i, err)
		}
	}
	t0 := pc.tasks[0]
	if err := pc.do(t0.CopyInto(pc.acc, pc.G[0])); err != nil {
		return err
	}
	for i := 1; i < len(pc.devs); i++ {
		if err := pc.do(t0.CopyPeer(pc.recv[i], pc.G[i])); err != nil {
			return fmt.Errorf("gather from gpu%d: %w", i, err)
		}
		if err := pc.do(t0.AddInto(pc.acc, pc.acc, pc.recv[i])); err != nil {
			return err
		}
	}
	if err := pc.do(t0.AXPYInto(pc.w[0], -pc.lr, pc.acc, pc.w[0])); err != nil {
		return err
	}
	for i := 1; i < len(pc.devs); i++ {
		if err := pc.do(pc.tasks[i].CopyPeer(pc.w[i], pc.w[0])); err != nil {
			return fmt.Errorf("broadcast to gpu%d: %w", i, err)
		}
	}
	return nil
}

// reference runs the same steps on the CPU in float64.
func (pc *PeerChain) reference(t *testing.T, steps int) []float64 {
	t.Helper()
	k, c, rows := pc.k, pc.c, pc.rows
	w := make([]float64, k*c)
	for i := range w {
		w[i] = float64(float32(i%7)/10 - 0.3)
	}
	xs := make([][]float64, len(pc.devs))
	for i := range xs {
		xs[i] = make([]float64, rows*k)
		for j := range xs[i] {
			xs[i][j] = float64(float32((j*3+i*5)%11)/20 - 0.25)
		}
	}
	for s := 0; s < steps; s++ {
		acc := make([]float64, k*c)
		for _, x := range xs {
			g := make([]float64, rows*c)
			for r := 0; r < rows; r++ {
				for j := 0; j < c; j++ {
					var h float64
					for q := 0; q < k; q++ {
						h += x[r*k+q] * w[q*c+j]
					}
					g[r*c+j] = h * h
				}
			}
			for q := 0; q < k; q++ {
				for j := 0; j < c; j++ {
					var v float64
					for r := 0; r < rows; r++ {
						v += x[r*k+q] * g[r*c+j]
					}
					acc[q*c+j] += v
				}
			}
		}
		for i := range w {
			w[i] -= pc.lr * acc[i]
		}
	}
	return w
}

// Check reads every device's weights back and compares them with the CPU.
func (pc *PeerChain) Check(t *testing.T, steps int) {
	t.Helper()
	want := pc.reference(t, steps)
	for i, w := range pc.w {
		got, err := w.Float32s()
		require.NoError(t, err, "gpu%d", i)
		for j := range want {
			require.InDelta(t, want[j], float64(got[j]), 1e-4*math.Max(1, math.Abs(want[j])), "gpu%d w[%d]", i, j)
		}
	}
}

// implicitHostWaits sums the host waits an op made for ordering (not
// read-backs, Synchronize, Close or frees).
func implicitHostWaits(s rocsync.Stats) uint64 {
	return s.HostWaitsFor(rocsync.ReasonBoundary) + s.HostWaitsFor(rocsync.ReasonCrossQueue) + s.HostWaitsFor(rocsync.ReasonCrossDevice) +
		s.HostWaitsFor(rocsync.ReasonThrottle) + s.HostWaitsFor(rocsync.ReasonWaitAlways)
}

// The peer-copy chain: 2 and 4 devices, direct and staged peer copies,
// every policy, checker and random delays on. Results equal the CPU
// reference on every device, the checker finds nothing, and the host waits
// are what the policy says: none at all where every crossing can wait on
// the device (Unified; DeviceBridge), none between streams of one kind
// (DeviceSide, which still host-waits at the HSA↔HIP boundary, also when
// that boundary is between two devices).
func PeerCopyTrainingChain(t *testing.T, be *Backend) {
	const steps = 4
	for _, n := range []int{2, 4} {
		for _, access := range []struct {
			name  string
			reach func(a, b int) bool
		}{{"direct", nil}, {"staged", noPeerAccess}, {"mixed", evenPeersOnly}} {
			for _, p := range syncstate.Policies {
				t.Run(fmt.Sprintf("%dgpus/%s/%v", n, access.name, p), func(t *testing.T) {
					mod := func(o *rocsync.Options) { be.Machine(o, n, access.reach) }
					if be.Machine == nil {
						// Peer links are the hardware's: staging is forced.
						switch access.name {
						case "staged":
							mod = be.Internals.StagePeerCopies
						case "mixed":
							t.Skip("which pairs have peer access is the hardware's to choose")
						default:
							mod = func(*rocsync.Options) {}
						}
					}
					devs := openPeers(t, be, p, n, mod)
					for i := 1; i < n; i++ {
						direct, err := devs[0].PeerAccess(devs[i])
						require.NoError(t, err)
						switch {
						case devs[0].Emulated():
							want := access.name == "direct" || (access.name == "mixed" && i%2 == 0)
							require.Equal(t, want, direct, "gpu0 <- gpu%d", i)
						case access.name == "staged":
							require.False(t, direct, "staging forced")
						default:
							t.Logf("gpu0 <- gpu%d: peer access %v", i, direct)
						}
					}
					pc := NewPeerChain(t, devs)
					var before []rocsync.Stats
					for _, d := range devs {
						before = append(before, d.Stats())
					}
					for s := 0; s < steps; s++ {
						require.NoError(t, pc.Step())
					}
					var implicit, crossQueue uint64
					for i, d := range devs {
						st := d.Stats().Sub(before[i])
						implicit += implicitHostWaits(st)
						crossQueue += st.HostWaitsFor(rocsync.ReasonCrossQueue)
						t.Logf("gpu%d: %v", i, st)
					}
					pc.Check(t, steps)
					for _, d := range devs {
						require.Empty(t, d.Hazards())
					}
					switch p {
					case rocsync.Unified, rocsync.DeviceBridge:
						if p == rocsync.DeviceBridge && !devs[0].Emulated() && devs[0].Backend() == "rocm" {
							break // HIP before 5.6 host-waits at the boundary
						}
						require.Zero(t, implicit, "host waits where the device can wait")
					case rocsync.DeviceSide:
						require.Zero(t, crossQueue)
					}
				})
			}
		}
	}
}

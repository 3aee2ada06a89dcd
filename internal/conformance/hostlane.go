package conformance

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/syncstate"
)

// kernelLaneWaitsForHost says whether, on b, the kernel lane waits for a
// host function on the device under p: HSA queues always can (a signal the
// lane completes); a HIP stream (the kernel lane under Unified) only from
// HIP 5.6 on, as DeviceBridge; CUDA streams where the driver has 64-bit
// stream memory operations (cuStreamWaitValue64).
func (be *Backend) kernelLaneWaitsForHost(t *testing.T, p rocsync.Policy, d *rocsync.Device) bool {
	switch {
	case !deviceWaitsForHost(p):
		return false
	case be.Options.Backend == rocsync.Emulator:
		return true
	case be.Options.Backend == rocsync.CUDA:
		return be.Internals.CUDAHostWaitsOnDevice(d)
	case be.Options.Backend != rocsync.ROCm:
		return false
	case p == rocsync.Unified:
		return be.deviceBridgeOnDevice(t)
	}
	return true
}

// deviceWaitsForHost says whether GPU ops wait for the host lane on the
// device under p (else the submitter host-waits for it).
func deviceWaitsForHost(p rocsync.Policy) bool {
	return p == rocsync.DeviceSide || p == rocsync.Unified || p == rocsync.DeviceBridge
}

// A host function orders GPU work on every backend the suite runs on (the
// simulated driver's real ROCr and HIP included): a kernel writes x, the
// function computes y from x, and a kernel and a gemm read y. Where the
// kernel lane waits for the function on the device, the function is held
// until the kernel after it is submitted, and the submitter must not wait.
func HostFuncOrdersGPUWork(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := open(t, be, p)
			tk, err := d.NewTask()
			require.NoError(t, err)
			defer tk.Close()
			const n = 8
			x, err := tk.Full(n, n, rocsync.Float32, 3)
			require.NoError(t, err)
			y, err := d.Empty(n, n, rocsync.Float32)
			require.NoError(t, err)
			gate := make(chan struct{})
			held := be.kernelLaneWaitsForHost(t, p, d)
			if !held {
				close(gate)
			}
			require.NoError(t, tk.HostFunc([]rocsync.Arg{rocsync.In(x), rocsync.Out(y)}, func(h *rocsync.HostAccess) error {
				<-gate
				v, err := h.Float32s(x)
				if err != nil {
					return err
				}
				for i := range v {
					v[i] = v[i]*v[i] + float32(i)
				}
				return h.SetFloat32s(y, v)
			}))
			before := tk.Stats()
			z, err := tk.Mul(y, y)
			require.NoError(t, err)
			if held {
				require.Equal(t, before.HostWaits, tk.Stats().HostWaits, "the submitter waited for the host function")
				close(gate)
			}
			id, err := d.FromFloat32(n, n, testcheck.Seq(n*n, func(i int) float32 { return testcheck.B2F(i/n == i%n) }))
			require.NoError(t, err)
			w, err := tk.MatMul(y, id, false, false)
			require.NoError(t, err)
			gotZ, err := z.Float32s()
			require.NoError(t, err)
			gotW, err := w.Float32s()
			require.NoError(t, err)
			for i := range gotZ {
				want := float32(9 + i)
				require.Equal(t, want*want, gotZ[i], "z[%d]", i)
				require.Equal(t, want, gotW[i], "w[%d]", i)
			}
		})
	}
}

// One array named twice, In(x) and Out(x), is one operand read and
// written, as ordering treats it: the function may read and write it, the
// host lane stays healthy, and the GPU work around it is ordered.
func HostFuncAliasedOperandsMerge(t *testing.T, be *Backend) {
	for _, p := range syncstate.Policies {
		t.Run(p.String(), func(t *testing.T) {
			d := open(t, be, p)
			tk := d.DefaultTask()
			const n = 4
			x, err := tk.Full(n, n, rocsync.Float32, 3)
			require.NoError(t, err)
			for range 2 {
				require.NoError(t, tk.HostFunc([]rocsync.Arg{rocsync.In(x), rocsync.Out(x)}, func(h *rocsync.HostAccess) error {
					v, err := h.Float32s(x)
					if err != nil {
						return err
					}
					for i := range v {
						v[i] += 1
					}
					return h.SetFloat32s(x, v)
				}))
				require.NoError(t, tk.MulInto(x, x, x))
			}
			got, err := x.Float32s()
			require.NoError(t, err)
			for i, v := range got {
				require.Equal(t, float32(17*17), v, "element %d", i) // ((3+1)²+1)²
			}
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

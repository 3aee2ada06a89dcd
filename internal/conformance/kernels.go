package conformance

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/internal/testcheck"
	"github.com/rocsync/rocsync/kernels"
)

// Every elementwise op, both dtypes, through the API against the CPU
// reference: on hardware this checks the kernels themselves.
func EveryKernelMatchesReference(t *testing.T, be *Backend) {
	// DeviceSide dispatches through HSA queues; Unified launches the same
	// kernels through HIP (hipModuleLaunchKernel), from the code object the
	// HIP release loads.
	for _, p := range []rocsync.Policy{rocsync.DeviceSide, rocsync.Unified} {
		t.Run(p.String(), func(t *testing.T) { everyKernelMatchesReference(t, be, p) })
	}
}

func everyKernelMatchesReference(t *testing.T, be *Backend, p rocsync.Policy) {
	d := open(t, be, p)
	tk := d.DefaultTask()
	if p == rocsync.Unified && be.CheckCodeObjects {
		t.Cleanup(func() {
			// HIP loads the newest version its comgr names
			// (kernels.HIPAccepts): v4 on HIP 5.2.3, whose comgr reads
			// up to v4 only; v5 from HIP 5.3 on (5.7.1, 6.4.3).
			hsaV, hipV := be.Internals.CodeObjectVersions(d)
			hipVersion := be.HIPVersion(t)
			want, err := kernels.PickCodeObjectVersion(d.Target(), func(v kernels.CodeObjectVersion) bool {
				return kernels.HIPAccepts(hipVersion, v)
			})
			require.NoError(t, err)
			if hipVersion < 50_300_000 {
				require.Equal(t, kernels.CodeObjectV4, want, "HIP %d", hipVersion)
			} else {
				require.GreaterOrEqual(t, want, kernels.CodeObjectV5, "HIP %d", hipVersion)
			}
			require.Equal(t, want, hipV, "the code object HIP %d loaded (HSA: v%d)", hipVersion, hsaV)
		})
	}
	const rows, cols = 3, 37 // a tail past any workgroup multiple
	n := rows * cols
	a64, b64 := make([]float64, n), make([]float64, n)
	r := rand.New(rand.NewPCG(9, 9))
	for i := range a64 {
		a64[i] = r.Float64()*4 - 2
		b64[i] = r.Float64()*4 + 0.5
	}
	a64[0], a64[1] = 0, math.Copysign(0, -1) // +0 and -0: relu and relu_grad treat both as not positive
	const alpha = 1.75
	for _, dt := range kernels.AllDTypes() {
		for _, op := range kernels.AllOps() {
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				in := func(v []float64) *rocsync.Array {
					var x *rocsync.Array
					var err error
					if dt == rocsync.Float32 {
						f := make([]float32, n)
						for i := range v {
							f[i] = float32(math.Abs(v[i]))
							if op != kernels.Sqrt {
								f[i] = float32(v[i])
							}
						}
						x, err = d.FromFloat32(rows, cols, f)
					} else {
						f := make([]float64, n)
						for i := range v {
							f[i] = v[i]
							if op == kernels.Sqrt {
								f[i] = math.Abs(v[i])
							}
						}
						x, err = d.FromFloat64(rows, cols, f)
					}
					require.NoError(t, err)
					return x
				}
				a, b := in(a64), in(b64)
				out, err := d.Empty(rows, cols, dt)
				require.NoError(t, err)
				switch op {
				case kernels.Mul:
					err = tk.MulInto(out, a, b)
				case kernels.Add:
					err = tk.AddInto(out, a, b)
				case kernels.Sub:
					err = tk.SubInto(out, a, b)
				case kernels.Div:
					err = tk.DivInto(out, a, b)
				case kernels.Scale:
					err = tk.ScaleInto(out, alpha, a)
				case kernels.AXPY:
					err = tk.AXPYInto(out, alpha, a, b)
				case kernels.Fill:
					err = tk.Fill(out, alpha)
				case kernels.Copy:
					err = tk.CopyInto(out, a)
				case kernels.Neg:
					err = tk.NegInto(out, a)
				case kernels.Exp:
					err = tk.ExpInto(out, a)
				case kernels.Sqrt:
					err = tk.SqrtInto(out, a)
				case kernels.ReLU:
					err = tk.ReLUInto(out, a)
				case kernels.ReLUGrad:
					err = tk.ReLUGradInto(out, a, b)
				default:
					t.Fatalf("no API call for %v", op)
				}
				require.NoError(t, err)
				// The reference runs on what the device holds, read back.
				if dt == rocsync.Float32 {
					av, _ := a.Float32s()
					bv, _ := b.Float32s()
					want := make([]float32, n)
					kernels.RefF32(op, want, av, bv, alpha)
					got, err := out.Float32s()
					require.NoError(t, err)
					for i := range want {
						testcheck.RequireULP(t, float64(want[i]), float64(got[i]), 0, i)
					}
				} else {
					av, _ := a.Float64s()
					bv, _ := b.Float64s()
					want := make([]float64, n)
					kernels.RefF64(op, want, av, bv, alpha)
					got, err := out.Float64s()
					require.NoError(t, err)
					ulps := 0.0
					if op == kernels.Exp {
						ulps = 2 // the kernels' own exp; math.Exp may differ by 2 ulp
					}
					for i := range want {
						testcheck.RequireULP(t, want[i], got[i], ulps, i)
					}
				}
			})
		}
	}
}

// MatMul's row-major to column-major mapping, for every transpose pair and
// non-square shapes, in both dtypes.
func MatMulTransposes(t *testing.T, be *Backend) {
	d := open(t, be, rocsync.DeviceSide)
	tk := d.DefaultTask()
	const m, k, n = 3, 5, 4
	r := rand.New(rand.NewPCG(11, 11))
	A := make([]float64, m*k) // op(A) is m×k
	B := make([]float64, k*n) // op(B) is k×n
	for i := range A {
		A[i] = float64(r.IntN(7) - 3)
	}
	for i := range B {
		B[i] = float64(r.IntN(7) - 3)
	}
	want := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			for l := 0; l < k; l++ {
				want[i*n+j] += A[i*k+l] * B[l*n+j]
			}
		}
	}
	transpose := func(x []float64, rows, cols int) []float64 {
		out := make([]float64, len(x))
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				out[j*rows+i] = x[i*cols+j]
			}
		}
		return out
	}
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			a, ar, ac := A, m, k
			if ta {
				a, ar, ac = transpose(A, m, k), k, m
			}
			b, br, bc := B, k, n
			if tb {
				b, br, bc = transpose(B, k, n), n, k
			}
			x, err := d.FromFloat64(ar, ac, a)
			require.NoError(t, err)
			y, err := d.FromFloat64(br, bc, b)
			require.NoError(t, err)
			c, err := tk.MatMul(x, y, ta, tb)
			require.NoError(t, err)
			require.Equal(t, [2]int{m, n}, [2]int{c.Rows(), c.Cols()})
			got, err := c.Float64s()
			require.NoError(t, err)
			require.Equal(t, want, got, "transA=%v transB=%v", ta, tb)
		}
	}
}

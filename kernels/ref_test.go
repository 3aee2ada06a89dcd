package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// expectF64 is an independent scalar statement of each op, used to check the
// loops in ref.go. For F32 it is evaluated in float64 and rounded to float32,
// which gives the correctly rounded float32 result for + - * / and sqrt
// (float64 has more than 2*24+2 bits, so the double rounding is harmless).
func expectF64(op Op, a, b, alpha float64) float64 {
	switch op {
	case Mul:
		return a * b
	case Add:
		return a + b
	case Sub:
		return a - b
	case Div:
		return a / b
	case Scale:
		return alpha * a
	case AXPY:
		return float64(alpha*a) + b
	case Fill:
		return alpha
	case Copy:
		return a
	case Neg:
		return -a
	case Exp:
		return math.Exp(a)
	case Sqrt:
		return math.Sqrt(a)
	case ReLU:
		if a > 0 {
			return a
		}
		return 0
	case ReLUGrad:
		if a > 0 {
			return b
		}
		return 0
	}
	panic("bad op")
}

var (
	refInputsA = []float64{1.5, -2, 0, math.Copysign(0, -1), 3.25, math.Inf(1), math.Inf(-1), math.NaN(), 1e-40, 100, -100, 7, 0.1, 1e30, -1e-310}
	refInputsB = []float64{2, 4, -0.5, 3, 0, 1, 2, 5, 1e30, 0.1, -3, math.NaN(), 0.2, 1e-30, 2}
)

func sameFloat(got, want float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Float64bits(got) == math.Float64bits(want) // distinguishes -0 from +0
}

func TestRefF64(t *testing.T) {
	const alpha = -1.25
	for _, op := range AllOps() {
		for n := 0; n <= len(refInputsA); n++ { // every length, so every tail
			out := make([]float64, n)
			a, b := refInputsA[:n], refInputsB[:n]
			readsA, readsB := op.Reads()
			if !readsA {
				a = nil
			}
			if !readsB {
				b = nil
			}
			RefF64(op, out, a, b, alpha)
			for i, got := range out {
				if want := expectF64(op, refInputsA[i], refInputsB[i], alpha); !sameFloat(got, want) {
					t.Errorf("RefF64(%v) n=%d [%d] (a=%v b=%v) = %v, want %v", op, n, i, refInputsA[i], refInputsB[i], got, want)
				}
			}
		}
	}
}

func TestRefF32(t *testing.T) {
	const alpha = float32(-1.25)
	a32 := make([]float32, len(refInputsA))
	b32 := make([]float32, len(refInputsB))
	for i := range a32 {
		a32[i], b32[i] = float32(refInputsA[i]), float32(refInputsB[i])
	}
	for _, op := range AllOps() {
		for n := 0; n <= len(a32); n++ {
			out := make([]float32, n)
			a, b := a32[:n], b32[:n]
			readsA, readsB := op.Reads()
			if !readsA {
				a = nil
			}
			if !readsB {
				b = nil
			}
			RefF32(op, out, a, b, alpha)
			for i, got := range out {
				ai, bi := float64(a32[i]), float64(b32[i])
				var want float32
				if op == AXPY {
					want = float32(float64(float32(float64(alpha)*ai)) + bi)
				} else {
					want = float32(expectF64(op, ai, bi, float64(alpha)))
				}
				if !sameFloat(float64(got), float64(want)) {
					t.Errorf("RefF32(%v) n=%d [%d] (a=%v b=%v) = %v, want %v", op, n, i, ai, bi, got, want)
				}
			}
		}
	}
}

func TestRefSpecialValues(t *testing.T) {
	nan := math.NaN()
	negZero := math.Copysign(0, -1)
	for _, tc := range []struct {
		op      Op
		a, b    float64
		want    float64
		comment string
	}{
		{ReLU, nan, 0, 0, "relu(NaN) is 0: NaN > 0 is false"},
		{ReLU, negZero, 0, 0, "relu(-0) is +0"},
		{ReLU, math.Inf(-1), 0, 0, ""},
		{ReLU, 2, 0, 2, ""},
		{Neg, 0, 0, negZero, "neg flips the sign of zero"},
		{Div, 1, 0, math.Inf(1), ""},
		{Div, 0, 0, nan, ""},
		{Sqrt, -1, 0, nan, ""},
		{Sqrt, negZero, 0, negZero, ""},
		{Exp, math.Inf(-1), 0, 0, ""},
		{Exp, math.Inf(1), 0, math.Inf(1), ""},
		{Exp, nan, 0, nan, ""},
		{Exp, 0, 0, 1, ""},
	} {
		out64 := []float64{7}
		RefF64(tc.op, out64, []float64{tc.a}, []float64{tc.b}, 0)
		if !sameFloat(out64[0], tc.want) {
			t.Errorf("f64 %v(%v, %v) = %v, want %v %s", tc.op, tc.a, tc.b, out64[0], tc.want, tc.comment)
		}
		out32 := []float32{7}
		RefF32(tc.op, out32, []float32{float32(tc.a)}, []float32{float32(tc.b)}, 0)
		if !sameFloat(float64(out32[0]), tc.want) {
			t.Errorf("f32 %v(%v, %v) = %v, want %v %s", tc.op, tc.a, tc.b, out32[0], tc.want, tc.comment)
		}
	}
}

// AXPY must round the product before the add, as the kernels do; an fma
// would keep the low bits of alpha*a.
func TestRefAXPYIsNotFused(t *testing.T) {
	a := 1 + 0x1p-30
	alpha := 1 - 0x1p-30 // alpha*a = 1 - 2^-60, which rounds to 1
	out := []float64{0}
	RefF64(AXPY, out, []float64{a}, []float64{-1}, alpha)
	if out[0] != 0 {
		t.Errorf("axpy(%v, %v, -1) = %g; want 0 (an fma would give -2^-60)", alpha, a, out[0])
	}
	a32 := float32(1 + 0x1p-13)
	alpha32 := float32(1 - 0x1p-13)
	out32 := []float32{0}
	RefF32(AXPY, out32, []float32{a32}, []float32{-1}, alpha32)
	if out32[0] != 0 {
		t.Errorf("f32 axpy = %g; want 0 (an fma would give -2^-26)", out32[0])
	}
}

func TestRefInPlace(t *testing.T) {
	x := []float64{1, 2, 3}
	RefF64(Mul, x, x, []float64{2, 2, 2}, 0)
	if x[0] != 2 || x[1] != 4 || x[2] != 6 {
		t.Errorf("in-place mul = %v", x)
	}
}

func TestRefPanicsOnShortInput(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("RefF32 with a shorter than out did not panic")
		}
	}()
	RefF32(Add, make([]float32, 4), make([]float32, 3), make([]float32, 4), 0)
}

// RefBytes must give exactly what the typed references give, on aligned
// and unaligned memory, for lengths that cross the fallback's chunk size,
// and leave the bytes past the last whole element alone.
func TestRefBytesMatchesTyped(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range AllDTypes() {
		size := dt.Size()
		for _, n := range []int{0, 1, 5, refChunk - 1, refChunk, 2*refChunk + 3} {
			a64, b64 := make([]float64, n), make([]float64, n)
			for i := range a64 {
				a64[i] = (rng.Float64() - 0.3) * 20
				b64[i] = (rng.Float64() - 0.5) * 4
			}
			for _, op := range AllOps() {
				const alpha = 0.75
				want := refTyped(op, dt, a64, b64, alpha)
				for _, misalign := range []int{0, 1, 3} {
					out := makeDeviceBytes(n*size+3, misalign)
					a := makeDeviceBytes(n*size, misalign)
					b := makeDeviceBytes(n*size, misalign)
					putFloats(a, dt, a64)
					putFloats(b, dt, b64)
					for i := range out {
						out[i] = 0xCD
					}
					RefBytes(op, dt, out, a, b, alpha)
					for i := range n {
						if got := getFloat(out, dt, i); !sameFloat(got, want[i]) {
							t.Fatalf("%v %v n=%d misalign=%d [%d] = %v, want %v", op, dt, n, misalign, i, got, want[i])
						}
					}
					for _, c := range out[n*size:] {
						if c != 0xCD {
							t.Fatalf("%v %v n=%d: RefBytes wrote past the last whole element", op, dt, n)
						}
					}
				}
			}
		}
	}
}

func TestRefBytesInPlaceUnaligned(t *testing.T) {
	buf := makeDeviceBytes(3*4*refChunk, 1)
	vals := make([]float64, 3*refChunk)
	for i := range vals {
		vals[i] = float64(i)
	}
	putFloats(buf, F32, vals)
	RefBytes(Add, F32, buf, buf, buf, 0)
	for i := range vals {
		if got := getFloat(buf, F32, i); got != 2*vals[i] {
			t.Fatalf("[%d] = %v, want %v", i, got, 2*vals[i])
		}
	}
}

func TestRefDoesNotAllocate(t *testing.T) {
	const n = 3*refChunk + 1
	for _, dt := range AllDTypes() {
		for _, misalign := range []int{0, 1} {
			out := makeDeviceBytes(n*dt.Size(), misalign)
			a := makeDeviceBytes(n*dt.Size(), misalign)
			b := makeDeviceBytes(n*dt.Size(), misalign)
			for _, op := range AllOps() {
				if allocs := testing.AllocsPerRun(10, func() { RefBytes(op, dt, out, a, b, 2) }); allocs != 0 {
					t.Errorf("RefBytes(%v, %v, misalign %d) allocates %v times", op, dt, misalign, allocs)
				}
			}
		}
	}
	out, a, b := make([]float32, 64), make([]float32, 64), make([]float32, 64)
	if allocs := testing.AllocsPerRun(10, func() { RefF32(Exp, out, a, b, 1) }); allocs != 0 {
		t.Errorf("RefF32 allocates %v times", allocs)
	}
}

func refTyped(op Op, dt DType, a, b []float64, alpha float64) []float64 {
	n := len(a)
	if dt == F64 {
		out := make([]float64, n)
		RefF64(op, out, a, b, alpha)
		return out
	}
	a32, b32, out32 := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range a {
		a32[i], b32[i] = float32(a[i]), float32(b[i])
	}
	RefF32(op, out32, a32, b32, float32(alpha))
	out := make([]float64, n)
	for i, v := range out32 {
		out[i] = float64(v)
	}
	return out
}

// makeDeviceBytes returns n bytes starting misalign bytes past an 8-byte
// boundary.
func makeDeviceBytes(n, misalign int) []byte {
	backing := make([]uint64, (n+misalign)/8+1)
	all := unsafeBytes(backing)
	return all[misalign : misalign+n]
}

func putFloats(dst []byte, dt DType, vals []float64) {
	for i, v := range vals {
		if dt == F32 {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(float32(v)))
		} else {
			binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(v))
		}
	}
}

func getFloat(src []byte, dt DType, i int) float64 {
	if dt == F32 {
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
}

func BenchmarkRefBytesF32Mul(b *testing.B) {
	const n = 1 << 16
	out, x, y := makeDeviceBytes(4*n, 0), makeDeviceBytes(4*n, 0), makeDeviceBytes(4*n, 0)
	b.SetBytes(12 * n)
	for b.Loop() {
		RefBytes(Mul, F32, out, x, y, 0)
	}
}

// unsafeBytes views a []uint64 as bytes (used to build 8-byte-aligned test memory).
func unsafeBytes(u []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(u))), 8*len(u))
}

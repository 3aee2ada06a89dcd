package kernels

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// The kernels compute exp with their own code (rs_exp_f64 in
// src/elementwise.cl), because no target can lower llvm.exp.f64 without a
// device library. deviceExpF64 is a line-by-line port of it: Go's math.FMA,
// math.RoundToEven and float64 arithmetic are the same IEEE operations as
// the OpenCL builtins, so it computes the same bits. These tests check the
// port against exactly rounded values, and check that the source still
// contains the constants the port uses.

const (
	expLog2e = 0x1.71547652b82fep+0
	expLn2Hi = 0x1.62e42fefa39efp-1
	expLn2Lo = 0x1.abc9e3b39803fp-56
)

// expCoefficients are 1/13! down to 1/2!, in the order Horner's rule uses them.
var expCoefficients = []float64{
	0x1.6124613a86d09p-33, 0x1.1eed8eff8d898p-29, 0x1.ae64567f544e4p-26, 0x1.27e4fb7789f5cp-22,
	0x1.71de3a556c734p-19, 0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-13, 0x1.6c16c16c16c17p-10,
	0x1.1111111111111p-7, 0x1.5555555555555p-5, 0x1.5555555555555p-3, 0x1.0000000000000p-1,
}

func deviceExpF64(x float64) float64 {
	if x != x {
		return x
	}
	xc := math.Min(math.Max(x, -746), 710)
	k := math.RoundToEven(xc * expLog2e)
	r := math.FMA(-k, expLn2Hi, xc)
	r = math.FMA(-k, expLn2Lo, r)
	p := expCoefficients[0]
	for _, c := range expCoefficients[1:] {
		p = math.FMA(p, r, c)
	}
	p = math.FMA(p, r*r, r)
	p = 1.0 + p
	ki := int(k)
	k1 := ki / 2
	k2 := ki - k1
	s1 := math.Float64frombits(uint64(k1+1023) << 52)
	s2 := math.Float64frombits(uint64(k2+1023) << 52)
	return (p * s1) * s2
}

func deviceExpF32(x float32) float32 { return float32(deviceExpF64(float64(x))) }

func TestExpSourceMatchesPort(t *testing.T) {
	src := readSource(t)
	for _, c := range append([]float64{expLog2e, expLn2Hi, expLn2Lo}, expCoefficients...) {
		lit := cHexFloat(c)
		if !strings.Contains(src, lit) {
			t.Errorf("src/elementwise.cl lacks the constant %s used by the port", lit)
		}
	}
	for _, clamp := range []string{"-746.0", "710.0"} {
		if !strings.Contains(src, clamp) {
			t.Errorf("src/elementwise.cl lacks the clamp bound %s", clamp)
		}
	}
}

// cHexFloat formats like C's %a with 13 hex digits, as the constants are
// written in the source: 0x1.62e42fefa39efp-1.
func cHexFloat(f float64) string {
	s := strconv.FormatFloat(f, 'x', 13, 64) // 0x1.62e42fefa39efp-01
	i := strings.IndexByte(s, 'p')
	exp, _ := strconv.Atoi(s[i+1:])
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return s[:i] + "p" + sign + strconv.Itoa(exp)
}

// exactExp returns e^x rounded once from a 300-bit value.
func exactExp(x float64) *big.Float {
	const prec = 300
	ln2 := bigLn2(prec)
	bx := new(big.Float).SetPrec(prec).SetFloat64(x)
	q := new(big.Float).SetPrec(prec).Quo(bx, ln2)
	qf, _ := q.Float64()
	k := math.RoundToEven(qf)
	r := new(big.Float).SetPrec(prec).Mul(ln2, new(big.Float).SetPrec(prec).SetFloat64(k))
	r.Sub(bx, r) // |r| <= ~0.35
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	for n := int64(1); n < 200; n++ {
		term.Mul(term, r)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(n))
		sum.Add(sum, term)
		if term.Sign() == 0 || term.MantExp(nil)-sum.MantExp(nil) < -prec {
			break
		}
	}
	return sum.SetMantExp(sum, int(k))
}

var bigLn2Cache *big.Float

// bigLn2 is ln 2 = sum over k >= 1 of 1/(k 2^k).
func bigLn2(prec uint) *big.Float {
	if bigLn2Cache != nil {
		return bigLn2Cache
	}
	one := new(big.Float).SetPrec(prec + 20).SetInt64(1)
	sum := new(big.Float).SetPrec(prec + 20)
	for k := 1; k < int(prec)+30; k++ {
		denominator := new(big.Int).Lsh(big.NewInt(int64(k)), uint(k)) // k * 2^k
		term := new(big.Float).SetPrec(prec + 20).SetInt(denominator)
		sum.Add(sum, term.Quo(one, term))
	}
	bigLn2Cache = sum
	return sum
}

// ulpDiff is the number of representable float64s between a and b (both
// finite or equal infinities).
func ulpDiff(a, b float64) uint64 {
	ia, ib := orderedBits(a), orderedBits(b)
	if ia > ib {
		return uint64(ia - ib)
	}
	return uint64(ib - ia)
}

func orderedBits(f float64) int64 {
	i := int64(math.Float64bits(f))
	if i < 0 {
		i = math.MinInt64 - i
	}
	return i
}

func TestDeviceExpF64WithinOneULP(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	xs := []float64{
		0, math.Copysign(0, -1), 1, -1, 0.5, 1e-300, -1e-300, 1e-17, math.Ln2 / 2, -math.Ln2 / 2,
		709.782712893384, 709.7827128933841, 709.78, -708.39, -708.4, -745.1332191019411, -745.13321910194122, -745.2,
		-744.44, -740, 700, 88.7, -103.9, 10, -10, 3.5, 50.5,
	}
	n := 3000
	if testing.Short() {
		n = 300
	}
	for range n {
		switch rng.IntN(3) {
		case 0:
			xs = append(xs, (rng.Float64()*2-1)*746) // the whole range
		case 1:
			xs = append(xs, (rng.Float64()*2-1)*2) // near 0, where most inputs live
		default:
			xs = append(xs, -708-rng.Float64()*37.2) // subnormal results
		}
	}
	var worst float64
	var worstX float64
	for _, x := range xs {
		got := deviceExpF64(x)
		want, _ := exactExp(x).Float64()
		d := ulpDiff(got, want)
		if d > 1 {
			t.Errorf("deviceExpF64(%v) = %v, exact %v: %d ulps", x, got, want, d)
		}
		// Measure the error more finely, relative to the exact value.
		if want != 0 && !math.IsInf(want, 0) && math.Abs(want) >= 0x1p-1022 {
			exact := exactExp(x)
			diff := new(big.Float).Sub(new(big.Float).SetFloat64(got), exact)
			ulp := math.Nextafter(want, math.Inf(1)) - want
			e, _ := new(big.Float).Quo(diff, big.NewFloat(ulp)).Float64()
			if math.Abs(e) > worst {
				worst, worstX = math.Abs(e), x
			}
		}
	}
	t.Logf("rs_exp_f64: worst error %.3f ulp (at x = %v) over %d inputs", worst, worstX, len(xs))
	if worst >= 1 {
		t.Errorf("worst error %.3f ulp, want < 1", worst)
	}
}

func TestDeviceExpSpecialValues(t *testing.T) {
	for x, want := range map[float64]float64{
		math.Inf(1): math.Inf(1), math.Inf(-1): 0, 710: math.Inf(1), 1e308: math.Inf(1),
		-746: 0, -1e308: 0, 0: 1,
	} {
		if got := deviceExpF64(x); got != want {
			t.Errorf("deviceExpF64(%v) = %v, want %v", x, got, want)
		}
	}
	if got := deviceExpF64(math.NaN()); !math.IsNaN(got) {
		t.Errorf("deviceExpF64(NaN) = %v", got)
	}
	if got := deviceExpF64(-745.1332191019411); got != math.SmallestNonzeroFloat64 {
		t.Errorf("deviceExpF64(-745.1332191019411) = %v, want the smallest subnormal", got)
	}
}

// For float32 the kernels round the float64 result, so they agree with the
// CPU reference's float32(math.Exp(x)) except where the two float64 values
// straddle a float32 rounding boundary, which is rare and never more than 1
// ulp apart.
func TestDeviceExpF32AgreesWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n := 200000
	if testing.Short() {
		n = 20000
	}
	mismatches := 0
	for i := range n {
		var x float32
		if i%2 == 0 {
			x = float32((rng.Float64()*2 - 1) * 104) // the whole float32 range, subnormals included
		} else {
			x = math.Float32frombits(rng.Uint32()) // any bit pattern
		}
		got, want := deviceExpF32(x), expF32(x)
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(got)) {
				t.Errorf("exp(%v) = %v, want NaN", x, got)
			}
			continue
		}
		if got != want {
			mismatches++
			if d := ulpDiff32(got, want); d > 1 {
				t.Errorf("exp(%v) = %v, reference %v: %d ulps", x, got, want, d)
			}
		}
	}
	t.Logf("f32 exp: %d of %d inputs differ from float32(math.Exp) (by 1 ulp)", mismatches, n)
}

func ulpDiff32(a, b float32) uint32 {
	ia, ib := int32(math.Float32bits(a)), int32(math.Float32bits(b))
	if ia < 0 {
		ia = math.MinInt32 - ia
	}
	if ib < 0 {
		ib = math.MinInt32 - ib
	}
	if ia > ib {
		return uint32(ia - ib)
	}
	return uint32(ib - ia)
}

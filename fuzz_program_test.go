package rocsync

// The differential fuzz harness's programs and their CPU model.
//
// A program is a global sequence of ops over a pool of array slots, each op
// assigned to one of 2–4 tasks. The device run executes every task on its
// own goroutine; an op waits on the Go side (a channel, never a GPU sync)
// until the earlier ops it conflicts with on other tasks have been
// submitted, as a pipeline hands arrays from task to task. rocsync then has
// to order the GPU work by "submitted before, on any task", which makes the
// result deterministic: the CPU model runs the same ops one by one in
// program order and must agree.
//
// The model tracks an absolute error bound per element. Elementwise
// kernels agree with kernels.RefF32/RefF64 bit for bit, so an element whose
// inputs were exact is compared exactly. A gemm is exact when every product
// and every partial sum is representable (the initial values are small
// dyadic numbers, so most are); otherwise its element gets a rounding bound,
// which ops that cannot amplify it (copy, neg, add, mul...) carry forward
// and the others (div, sqrt, exp, a relu_grad whose branch may flip) turn
// into "unknown", which is not compared.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/rocsync/rocsync/kernels"
)

// progKind is what a program op does.
type progKind uint8

const (
	pkElemInto  progKind = iota // out = kop(a, b, alpha) through an Into form (or Fill)
	pkElemNew                   // out = kop(a, b, alpha) through the form that returns a new array; the slot's old array is freed
	pkGemm                      // out = alpha·op(a)·op(b) + beta·out through Gemm or MatMulInto
	pkMatMulNew                 // out = op(a)·op(b) through MatMul; the old array is freed
	pkRead                      // read slot a back and compare with the model
	pkRealloc                   // free slot out and replace it with a new array from host data
	pkFull                      // free slot out and replace it with Full(alpha)
	pkTaskSync                  // the task's Synchronize
	pkDevSync                   // the device's Synchronize
)

var progKindNames = [...]string{"into", "new", "gemm", "matmul", "read", "realloc", "full", "tasksync", "devsync"}

// progOp is one op of a program.
type progOp struct {
	task           int
	kind           progKind
	kop            kernels.Op
	out, a, b      int // slots; -1 where unused
	alpha, beta    float64
	transA, transB bool
	data           []float64 // pkRealloc's host values
}

func (o progOp) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "t%d %s", o.task, progKindNames[o.kind])
	switch o.kind {
	case pkElemInto, pkElemNew:
		fmt.Fprintf(&s, " s%d = %s(s%d, s%d, %g)", o.out, o.kop, o.a, o.b, o.alpha)
	case pkGemm, pkMatMulNew:
		fmt.Fprintf(&s, " s%d = %g·s%d%s·s%d%s + %g·s%d", o.out, o.alpha, o.a, tick(o.transA), o.b, tick(o.transB), o.beta, o.out)
	case pkRead:
		fmt.Fprintf(&s, " s%d", o.a)
	case pkRealloc:
		fmt.Fprintf(&s, " s%d", o.out)
	case pkFull:
		fmt.Fprintf(&s, " s%d = %g", o.out, o.alpha)
	}
	return s.String()
}

func tick(t bool) string {
	if t {
		return "ᵀ"
	}
	return ""
}

// reads and writes are the slots an op touches, for the Go-side ordering.
func (o progOp) reads() []int {
	switch o.kind {
	case pkElemInto, pkElemNew:
		ra, rb := o.kop.Reads()
		var r []int
		if ra {
			r = append(r, o.a)
		}
		if rb {
			r = append(r, o.b)
		}
		return r
	case pkGemm, pkMatMulNew:
		return []int{o.a, o.b}
	case pkRead:
		return []int{o.a}
	}
	return nil
}

func (o progOp) writes() []int {
	switch o.kind {
	case pkElemInto, pkElemNew, pkGemm, pkMatMulNew, pkRealloc, pkFull:
		return []int{o.out}
	}
	return nil
}

// program is a whole fuzz program.
type program struct {
	tasks int
	dtype DType
	shape [][2]int    // per slot: rows, cols
	init  [][]float64 // per slot: initial values
	ops   []progOp
}

func (p *program) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "program: %d tasks, %s, %d slots, %d ops\n", p.tasks, p.dtype, len(p.shape), len(p.ops))
	for i, sh := range p.shape {
		fmt.Fprintf(&s, "  s%d: %dx%d\n", i, sh[0], sh[1])
	}
	for i, o := range p.ops {
		fmt.Fprintf(&s, "  %3d: %v\n", i, o)
	}
	return s.String()
}

// chooser turns the fuzz input into decisions; once the input runs out
// every decision is 0 and done is set.
type chooser struct {
	in   []byte
	done bool
}

func (c *chooser) intn(n int) int {
	if n <= 1 {
		return 0
	}
	if len(c.in) == 0 {
		c.done = true
		return 0
	}
	v := int(c.in[0])
	c.in = c.in[1:]
	if n > 256 && len(c.in) > 0 {
		v = v<<8 | int(c.in[0])
		c.in = c.in[1:]
	}
	return v % n
}

// maxProgOps bounds a program, so a long fuzz input does not make one
// execution slow.
const maxProgOps = 120

// Values are small dyadic numbers and the scalars powers of two or small
// integers, so that gemms of fresh data are exact and the model can
// compare most elements bit for bit.
var (
	progAlphas = []float64{0.5, 2, -1, 1.5, 3, -0.25}
	progBetas  = []float64{0, 1, 0.5}
	progValues = []float64{-4, -3, -2, -1.5, -1, -0.5, -0.25, 0, 0.25, 0.5, 1, 1.5, 2, 3, 4}
)

func progData(r *rand.Rand, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = progValues[r.IntN(len(progValues))]
	}
	return out
}

// decodeProgram builds a program from a fuzz input. Every input decodes to
// a valid program.
func decodeProgram(in []byte) *program {
	c := &chooser{in: in}
	p := &program{tasks: 2 + c.intn(3), dtype: Float32}
	if c.intn(4) == 0 {
		p.dtype = Float64
	}
	r, k := 1+c.intn(8), 1+c.intn(8)
	// Slots 0–3 hold every shape built from r and k, so that any gemm
	// output finds inputs with or without transposes.
	shapes := [][2]int{{r, k}, {k, r}, {r, r}, {k, k}}
	nslots := 4 + c.intn(5)
	for i := 0; i < nslots; i++ {
		sh := shapes[i%4]
		if i >= 4 {
			sh = shapes[c.intn(4)]
		}
		p.shape = append(p.shape, sh)
	}
	dataSeed := uint64(c.intn(256))<<8 | uint64(c.intn(256))
	rng := rand.New(rand.NewPCG(dataSeed, 0x5eed))
	for _, sh := range p.shape {
		p.init = append(p.init, progData(rng, sh[0]*sh[1]))
	}
	same := func(s int) []int { // slots shaped like s
		var out []int
		for i, sh := range p.shape {
			if sh == p.shape[s] {
				out = append(out, i)
			}
		}
		return out
	}
	pick := func(xs []int) int { return xs[c.intn(len(xs))] }
	ops := kernels.AllOps()
	for len(p.ops) < maxProgOps {
		o := progOp{task: c.intn(p.tasks), out: -1, a: -1, b: -1}
		w := c.intn(32)
		if c.done {
			break
		}
		switch {
		case w < 14: // elementwise, Into or new
			o.kind = pkElemInto
			if w >= 11 {
				o.kind = pkElemNew
			}
			o.kop = ops[c.intn(len(ops))]
			o.out = c.intn(nslots)
			o.a, o.b = pick(same(o.out)), pick(same(o.out))
			switch c.intn(4) { // in-place aliasing: x = x*x, x = x+y
			case 0:
				o.a, o.b = o.out, o.out
			case 1:
				o.a = o.out
			}
			o.alpha = progAlphas[c.intn(len(progAlphas))]
		case w < 21: // gemm
			o.kind = pkGemm
			if w >= 19 {
				o.kind = pkMatMulNew
			}
			o.out = c.intn(nslots)
			m, n := p.shape[o.out][0], p.shape[o.out][1]
			kk := []int{r, k}[c.intn(2)]
			var as, bs []int
			var ats, bts []bool
			for i, sh := range p.shape {
				if i == o.out {
					continue // BLAS must not write an input
				}
				if sh == [2]int{m, kk} {
					as, ats = append(as, i), append(ats, false)
				}
				if sh == [2]int{kk, m} {
					as, ats = append(as, i), append(ats, true)
				}
				if sh == [2]int{kk, n} {
					bs, bts = append(bs, i), append(bts, false)
				}
				if sh == [2]int{n, kk} {
					bs, bts = append(bs, i), append(bts, true)
				}
			}
			if len(as) == 0 || len(bs) == 0 {
				continue
			}
			ia, ib := c.intn(len(as)), c.intn(len(bs))
			o.a, o.transA, o.b, o.transB = as[ia], ats[ia], bs[ib], bts[ib]
			o.alpha, o.beta = 1, 0
			if o.kind == pkGemm && c.intn(2) == 0 {
				o.alpha, o.beta = progAlphas[c.intn(len(progAlphas))], progBetas[c.intn(len(progBetas))]
			}
		case w < 26:
			o.kind, o.a = pkRead, c.intn(nslots)
		case w < 28:
			o.kind, o.out = pkRealloc, c.intn(nslots)
			o.data = progData(rng, p.shape[o.out][0]*p.shape[o.out][1])
		case w < 29:
			o.kind, o.out = pkFull, c.intn(nslots)
			o.alpha = progValues[c.intn(len(progValues))]
		case w < 31:
			o.kind = pkTaskSync
		default:
			o.kind = pkDevSync
		}
		p.ops = append(p.ops, o)
	}
	return p
}

// seedInput is the fuzz input a CI seed stands for.
func seedInput(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0xf022))
	out := make([]byte, n)
	for i := 0; i < n; i += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], r.Uint64())
		copy(out[i:], b[:])
	}
	return out
}

// modelArray is a slot's value in the model: values rounded to the dtype,
// and per element an absolute error bound (0: exact, +Inf: unknown).
type modelArray struct {
	rows, cols int
	v, eb      []float64
}

func (a *modelArray) clone() *modelArray {
	return &modelArray{a.rows, a.cols, append([]float64(nil), a.v...), append([]float64(nil), a.eb...)}
}

// model executes a program sequentially.
type model struct {
	dt DType
	// expULP is exp's tolerance in ulps: 0 on the emulator, whose kernels
	// are the references themselves; on hardware f64 exp may differ by 2.
	expULP float64
	slots  []*modelArray
	// readsAt is the expected value at each pkRead op, by op index.
	readsAt map[int]*modelArray
}

func runModel(p *program, expULP float64) *model {
	m := &model{dt: p.dtype, expULP: expULP, readsAt: map[int]*modelArray{}}
	for i, sh := range p.shape {
		m.slots = append(m.slots, m.fresh(sh[0], sh[1], p.init[i]))
	}
	for i, o := range p.ops {
		m.step(i, o)
	}
	return m
}

func (m *model) fresh(rows, cols int, v []float64) *modelArray {
	return &modelArray{rows, cols, m.round(append([]float64(nil), v...)), make([]float64, len(v))}
}

func (m *model) round(v []float64) []float64 {
	if m.dt == Float32 {
		for i := range v {
			v[i] = float64(float32(v[i]))
		}
	}
	return v
}

func (m *model) ulp(x float64) float64 {
	x = math.Abs(x)
	if m.dt == Float32 {
		f := float32(x)
		return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
	}
	return math.Nextafter(x, math.Inf(1)) - x
}

func (m *model) step(i int, o progOp) {
	switch o.kind {
	case pkElemInto, pkElemNew:
		m.slots[o.out] = m.elementwise(o.kop, m.slots[o.out], m.slots[o.a], m.slots[o.b], o.alpha)
	case pkGemm, pkMatMulNew:
		m.slots[o.out] = m.gemm(o, m.slots[o.a], m.slots[o.b], m.slots[o.out])
	case pkRead:
		m.readsAt[i] = m.slots[o.a].clone()
	case pkRealloc:
		s := m.slots[o.out]
		m.slots[o.out] = m.fresh(s.rows, s.cols, o.data)
	case pkFull:
		s := m.slots[o.out]
		v := make([]float64, s.rows*s.cols)
		for j := range v {
			v[j] = o.alpha
		}
		m.slots[o.out] = m.fresh(s.rows, s.cols, v)
	}
}

func (m *model) elementwise(op kernels.Op, out, a, b *modelArray, alpha float64) *modelArray {
	n := len(out.v)
	res := &modelArray{out.rows, out.cols, make([]float64, n), make([]float64, n)}
	if m.dt == Float32 {
		o32, a32, b32 := make([]float32, n), make([]float32, n), make([]float32, n)
		for j := 0; j < n; j++ {
			a32[j], b32[j] = float32(a.v[j]), float32(b.v[j])
		}
		kernels.RefF32(op, o32, a32, b32, float32(alpha))
		for j := range o32 {
			res.v[j] = float64(o32[j])
		}
	} else {
		kernels.RefF64(op, res.v, a.v, b.v, alpha)
	}
	for j := 0; j < n; j++ {
		ea, eb := a.eb[j], b.eb[j]
		av, bv, v := a.v[j], b.v[j], res.v[j]
		var e float64
		switch op {
		case kernels.Fill:
			e = 0
		case kernels.Copy, kernels.Neg, kernels.ReLU:
			e = ea
		case kernels.Scale:
			if ea > 0 {
				e = math.Abs(alpha)*ea + m.ulp(v)
			}
		case kernels.Add, kernels.Sub:
			if ea+eb > 0 {
				e = ea + eb + m.ulp(v)
			}
		case kernels.Mul:
			if ea+eb > 0 {
				e = math.Abs(av)*eb + math.Abs(bv)*ea + ea*eb + m.ulp(v)
			}
		case kernels.AXPY:
			if ea+eb > 0 {
				e = math.Abs(alpha)*ea + eb + m.ulp(alpha*av) + m.ulp(v)
			}
		case kernels.ReLUGrad:
			e = eb
			if ea > 0 && math.Abs(av) <= ea {
				e = math.Inf(1) // the branch may go either way
			}
		case kernels.Div:
			if ea+eb > 0 {
				e = math.Inf(1)
			}
		case kernels.Sqrt:
			if ea > 0 {
				e = math.Inf(1)
			}
		case kernels.Exp:
			e = m.expULP * m.ulp(v)
			if ea > 0 {
				e = math.Inf(1)
			}
		}
		res.eb[j] = unknownIfWild(e, v)
	}
	return res
}

// unknownIfWild turns a bound that is not a finite number, or a bound on a
// value that is not (an inexact NaN or Inf says nothing), into unknown.
func unknownIfWild(e, v float64) float64 {
	if e != 0 && (math.IsNaN(e) || math.IsInf(e, 0) || math.IsNaN(v) || math.IsInf(v, 0)) {
		return math.Inf(1)
	}
	return e
}

// exactIn reports whether x is exactly representable in the model's dtype.
func (m *model) exactIn(x float64) bool {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return false
	}
	return m.dt == Float64 || float64(float32(x)) == x
}

// exactProd returns x·y and whether it is exact in the dtype.
func (m *model) exactProd(x, y float64) (float64, bool) {
	p := x * y
	return p, !math.IsInf(p, 0) && !math.IsNaN(p) && math.FMA(x, y, -p) == 0 && m.exactIn(p)
}

func (m *model) gemm(o progOp, a, b, c *modelArray) *modelArray {
	at := func(x *modelArray, tr bool, i, j int, eb bool) float64 { // op(x)[i][j]
		idx := i*x.cols + j
		if tr {
			idx = j*x.cols + i
		}
		if eb {
			return x.eb[idx]
		}
		return x.v[idx]
	}
	mm, kk := a.rows, a.cols
	if o.transA {
		mm, kk = kk, mm
	}
	nn := b.cols
	if o.transB {
		nn = b.rows
	}
	res := &modelArray{mm, nn, make([]float64, mm*nn), make([]float64, mm*nn)}
	mant := 24
	eps := math.Ldexp(1, -23)
	if m.dt == Float64 {
		mant, eps = 53, math.Ldexp(1, -52)
	}
	terms := make([]float64, 0, kk+1)
	for i := 0; i < mm; i++ {
		for j := 0; j < nn; j++ {
			terms = terms[:0]
			exact := true
			prop := 0.0 // the inputs' error, carried through
			if o.beta != 0 {
				cv, ce := c.v[i*nn+j], c.eb[i*nn+j]
				t, ok := m.exactProd(o.beta, cv)
				exact = exact && ok && ce == 0
				terms = append(terms, t)
				prop += math.Abs(o.beta) * ce
			}
			for l := 0; l < kk; l++ {
				av, bv := at(a, o.transA, i, l, false), at(b, o.transB, l, j, false)
				ae, be := at(a, o.transA, i, l, true), at(b, o.transB, l, j, true)
				// Whichever order BLAS multiplies in, each step is exact.
				ab, ok1 := m.exactProd(av, bv)
				alb, ok2 := m.exactProd(o.alpha, bv)
				ala, ok3 := m.exactProd(o.alpha, av)
				t, ok4 := m.exactProd(o.alpha, ab)
				_, ok5 := m.exactProd(av, alb)
				_, ok6 := m.exactProd(ala, bv)
				exact = exact && ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ae == 0 && be == 0
				if !ok4 {
					t = o.alpha * av * bv
				}
				terms = append(terms, t)
				prop += math.Abs(o.alpha) * (math.Abs(av)*be + math.Abs(bv)*ae + ae*be)
			}
			sum, abs := 0.0, 0.0
			minExp := math.MaxInt
			for _, t := range terms {
				sum += t
				abs += math.Abs(t)
				if t != 0 && !math.IsInf(t, 0) && !math.IsNaN(t) {
					frac, e := math.Frexp(t)
					mbits := uint64(math.Abs(frac) * (1 << 53))
					low := e - 53
					for mbits&1 == 0 {
						mbits >>= 1
						low++
					}
					minExp = min(minExp, low)
				}
			}
			// Every partial sum is a multiple of 2^minExp; below
			// 2^(mant-1) of them, each is exact in any order.
			if minExp != math.MaxInt && abs >= math.Ldexp(1, minExp+mant-1) {
				exact = false
			}
			v := sum
			if m.dt == Float32 {
				v = float64(float32(sum))
			}
			e := 0.0
			if !exact {
				e = float64(2*kk+4)*eps*abs + prop
			}
			if math.IsInf(abs, 0) || math.IsNaN(abs) {
				e = math.Inf(1)
			}
			res.v[i*nn+j], res.eb[i*nn+j] = v, unknownIfWild(e, v)
		}
	}
	return res
}

// compare checks device values against the model; it returns a
// description of the first few differences, or "".
func compare(want *modelArray, got []float64) string {
	if len(got) != len(want.v) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want.v))
	}
	var bad []string
	for j, g := range got {
		w, e := want.v[j], want.eb[j]
		switch {
		case math.IsInf(e, 1):
			continue
		case e == 0:
			if g == w || (math.IsNaN(g) && math.IsNaN(w)) {
				continue
			}
		case math.Abs(g-w) <= e:
			continue
		}
		if len(bad) < 4 {
			bad = append(bad, fmt.Sprintf("[%d,%d] got %v want %v (±%g)", j/want.cols, j%want.cols, g, w, e))
		} else {
			bad = append(bad, "…")
			break
		}
	}
	return strings.Join(bad, ", ")
}

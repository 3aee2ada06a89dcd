package main

import (
	"fmt"
	"math"

	"github.com/rocsync/rocsync"
)

// The mlp program: one training step of a two-layer MLP with an MSE loss
// and an Adam update, float32.
//
//	forward   Z1 = X·W1 + 1·b1   H = relu(Z1)   P = H·W2 + 1·b2
//	backward  dP = (P-Y)·2/batch   dW2 = Hᵀ·dP   db2 = 1ᵀ·dP   dH = dP·W2ᵀ
//	          dZ1 = relu'(Z1)∘dH   dW1 = Xᵀ·dZ1   db1 = 1ᵀ·dZ1
//	Adam      for (p, g) in (W1, dW1), (b1, db1), (W2, dW2), (b2, db2)
//
// Gemms (the products, and the bias broadcasts as ones(batch×1)·b) run on
// the library stream (rocBLAS on HIP); everything else is one of rocsync's
// elementwise kernels on the HSA queue. The Adam update is the chain of
// elementwise ops of the fused broadcast of shared/seeds/004:
//
//	m = β1·m + (1-β1)·g          ScaleInto, AXPYInto
//	v = β2·v + (1-β2)·g²         MulInto, ScaleInto, AXPYInto
//	m̂ = m/(1-β1^t), v̂ = v/(1-β2^t)   ScaleInto ×2
//	den = √v̂ + ε                  SqrtInto, AddInto (ε: a Fill'd array)
//	p = p - lr·m̂/den              DivInto, AXPYInto
//
// Every array is allocated once in setup, so an iteration allocates nothing
// on the device. Each program run (one per policy) starts from the same
// parameters, zero moments and step 0, so every policy computes the same
// sequence of steps and the same W1.

// Adam's hyper-parameters.
const (
	adamLR    = 1e-3
	adamBeta1 = 0.9
	adamBeta2 = 0.999
	adamEps   = 1e-8
)

// mlpSizes are the MLP's dimensions.
type mlpSizes struct {
	batch, in, hidden, out int
}

func (s mlpSizes) String() string {
	return fmt.Sprintf("batch %d, in %d, hidden %d, out %d", s.batch, s.in, s.hidden, s.out)
}

// domain is where an op runs: HSA kernel queue or HIP library stream.
type domain uint8

const (
	kernelDomain domain = iota
	libraryDomain
)

func (d domain) String() string {
	if d == libraryDomain {
		return "hip"
	}
	return "hsa"
}

// mlpOp is one op of the step: what it reads and writes (indices into the
// array table), its domain, and how to submit it. The same list is run on
// the device and analysed for crossings, so the two cannot disagree.
type mlpOp struct {
	name  string
	dom   domain
	reads []int
	write int
	run   func(t *rocsync.Task, a []*rocsync.Array) error
}

// arraySpec is one array of the table and its initial contents.
type arraySpec struct {
	name       string
	rows, cols int
	init       []float32 // nil: filled with fill
	fill       float64
}

// mlpState is the MLP: its arrays and its op list.
type mlpState struct {
	sizes  mlpSizes
	specs  []arraySpec
	arrays []*rocsync.Array // nil until setup allocates them
	ops    []mlpOp
	w1     int // W1's index, read back for the checksum

	// For the data-parallel mlp: the ops before Adam (forward and
	// backward), and the gradients to all-reduce between them and Adam.
	backwardEnd int
	grads       []int

	step  int     // Adam's t, advanced at the start of each iteration
	corr1 float64 // 1/(1-β1^t)
	corr2 float64 // 1/(1-β2^t)
}

func (s *mlpState) array(name string, rows, cols int, init []float32, fill float64) int {
	s.specs = append(s.specs, arraySpec{name: name, rows: rows, cols: cols, init: init, fill: fill})
	return len(s.specs) - 1
}

func (s *mlpState) zeros(name string, rows, cols int) int { return s.array(name, rows, cols, nil, 0) }

// gemm appends c = op(a)·op(b) on the library stream.
func (s *mlpState) gemm(name string, transA, transB bool, a, b, c int) {
	s.ops = append(s.ops, mlpOp{name: name, dom: libraryDomain, reads: []int{a, b}, write: c,
		run: func(t *rocsync.Task, x []*rocsync.Array) error {
			return t.Gemm(transA, transB, 1, x[a], x[b], 0, x[c])
		}})
}

// kernel appends one elementwise kernel on the HSA queue.
func (s *mlpState) kernel(name string, reads []int, out int, run func(t *rocsync.Task, x []*rocsync.Array) error) {
	s.ops = append(s.ops, mlpOp{name: name, dom: kernelDomain, reads: reads, write: out, run: run})
}

func (s *mlpState) add(out, a, b int) {
	s.kernel("Add", []int{a, b}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.AddInto(x[out], x[a], x[b]) })
}

func (s *mlpState) sub(out, a, b int) {
	s.kernel("Sub", []int{a, b}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.SubInto(x[out], x[a], x[b]) })
}

func (s *mlpState) mul(out, a, b int) {
	s.kernel("Mul", []int{a, b}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.MulInto(x[out], x[a], x[b]) })
}

func (s *mlpState) div(out, a, b int) {
	s.kernel("Div", []int{a, b}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.DivInto(x[out], x[a], x[b]) })
}

func (s *mlpState) sqrt(out, a int) {
	s.kernel("Sqrt", []int{a}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.SqrtInto(x[out], x[a]) })
}

func (s *mlpState) relu(out, a int) {
	s.kernel("ReLU", []int{a}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.ReLUInto(x[out], x[a]) })
}

func (s *mlpState) reluGrad(out, a, grad int) {
	s.kernel("ReLUGrad", []int{a, grad}, out, func(t *rocsync.Task, x []*rocsync.Array) error {
		return t.ReLUGradInto(x[out], x[a], x[grad])
	})
}

// scale appends out = alpha()·a; alpha is read when the op is submitted,
// so it may change from step to step.
func (s *mlpState) scale(out int, alpha func() float64, a int) {
	s.kernel("Scale", []int{a}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.ScaleInto(x[out], alpha(), x[a]) })
}

// axpy appends out = alpha·a + b.
func (s *mlpState) axpy(out int, alpha float64, a, b int) {
	s.kernel("AXPY", []int{a, b}, out, func(t *rocsync.Task, x []*rocsync.Array) error { return t.AXPYInto(x[out], alpha, x[a], x[b]) })
}

func constant(v float64) func() float64 { return func() float64 { return v } }

// newMLP builds the MLP's array table and op list; no device is needed, so
// the crossings can be counted without one.
func newMLP(sz mlpSizes, seed uint64) *mlpState { return newMLPShard(sz, seed, 1, 0) }

// newMLPShard is shard `shard` of `shards` of the MLP (sz.batch is the
// whole batch): the rows of X and Y of that shard, the same parameters, and
// the loss of the whole batch (dP scaled by 2/sz.batch), so that the sum of
// the shards' gradients is the whole batch's gradient.
func newMLPShard(sz mlpSizes, seed uint64, shards, shard int) *mlpState {
	whole := sz.batch
	sz.batch /= shards
	s := &mlpState{sizes: sz}
	b, in, h, o := sz.batch, sz.in, sz.hidden, sz.out

	// Data and parameters, deterministic in the seed.
	X := s.array("X", b, in, randomMatrix(whole, in, seed+11, 1)[shard*b*in:(shard+1)*b*in], 0)
	Y := s.array("Y", b, o, randomMatrix(whole, o, seed+12, 1)[shard*b*o:(shard+1)*b*o], 0)
	W1 := s.array("W1", in, h, randomMatrix(in, h, seed+13, 2/math.Sqrt(float64(in))), 0)
	B1 := s.array("b1", 1, h, randomMatrix(1, h, seed+14, 0.1), 0)
	W2 := s.array("W2", h, o, randomMatrix(h, o, seed+15, 2/math.Sqrt(float64(h))), 0)
	B2 := s.array("b2", 1, o, randomMatrix(1, o, seed+16, 0.1), 0)
	ones := s.array("ones", b, 1, nil, 1)
	s.w1 = W1

	// Activations and gradients.
	Z1, Bb1, H := s.zeros("Z1", b, h), s.zeros("1·b1", b, h), s.zeros("H", b, h)
	Z2, Bb2, P := s.zeros("Z2", b, o), s.zeros("1·b2", b, o), s.zeros("P", b, o)
	dP, dW2, db2 := s.zeros("dP", b, o), s.zeros("dW2", h, o), s.zeros("db2", 1, o)
	dH, dZ1 := s.zeros("dH", b, h), s.zeros("dZ1", b, h)
	dW1, db1 := s.zeros("dW1", in, h), s.zeros("db1", 1, h)

	// Forward.
	s.gemm("Z1=X·W1", false, false, X, W1, Z1)
	s.gemm("1·b1", false, false, ones, B1, Bb1)
	s.add(Z1, Z1, Bb1)
	s.relu(H, Z1)
	s.gemm("Z2=H·W2", false, false, H, W2, Z2)
	s.gemm("1·b2", false, false, ones, B2, Bb2)
	s.add(P, Z2, Bb2)

	// Backward, MSE against Y.
	s.sub(dP, P, Y)
	s.scale(dP, constant(2/float64(whole)), dP)
	s.gemm("dW2=Hᵀ·dP", true, false, H, dP, dW2)
	s.gemm("db2=1ᵀ·dP", true, false, ones, dP, db2)
	s.gemm("dH=dP·W2ᵀ", false, true, dP, W2, dH)
	s.reluGrad(dZ1, Z1, dH)
	s.gemm("dW1=Xᵀ·dZ1", true, false, X, dZ1, dW1)
	s.gemm("db1=1ᵀ·dZ1", true, false, ones, dZ1, db1)
	s.backwardEnd, s.grads = len(s.ops), []int{dW1, db1, dW2, db2}

	// Adam, one parameter at a time.
	corr1 := func() float64 { return s.corr1 }
	corr2 := func() float64 { return s.corr2 }
	for _, pg := range [][2]int{{W1, dW1}, {B1, db1}, {W2, dW2}, {B2, db2}} {
		p, g := pg[0], pg[1]
		r, c := s.specs[p].rows, s.specs[p].cols
		n := s.specs[p].name
		m, v := s.zeros("m "+n, r, c), s.zeros("v "+n, r, c)
		g2, mh, vh := s.zeros("g² "+n, r, c), s.zeros("m̂ "+n, r, c), s.zeros("v̂ "+n, r, c)
		den, upd := s.zeros("den "+n, r, c), s.zeros("upd "+n, r, c)
		eps := s.array("ε "+n, r, c, nil, adamEps)
		s.scale(m, constant(adamBeta1), m)
		s.axpy(m, 1-adamBeta1, g, m)
		s.mul(g2, g, g)
		s.scale(v, constant(adamBeta2), v)
		s.axpy(v, 1-adamBeta2, g2, v)
		s.scale(mh, corr1, m)
		s.scale(vh, corr2, v)
		s.sqrt(den, vh)
		s.add(den, den, eps)
		s.div(upd, mh, den)
		s.axpy(p, -adamLR, upd, p)
	}
	return s
}

// setupMLP allocates and initialises the arrays, then waits for the fills,
// so that the first iteration starts with nothing pending.
func setupMLP(d *rocsync.Device, t *rocsync.Task, cfg config) (state, error) {
	s := newMLP(cfg.mlp, cfg.seed)
	if err := s.alloc(d, t); err != nil {
		return nil, err
	}
	return s, nil
}

// alloc allocates and initialises s's arrays on d and waits for them.
func (s *mlpState) alloc(d *rocsync.Device, t *rocsync.Task) error {
	s.arrays = make([]*rocsync.Array, len(s.specs))
	for i, sp := range s.specs {
		var a *rocsync.Array
		var err error
		if sp.init != nil {
			a, err = d.FromFloat32(sp.rows, sp.cols, sp.init)
		} else {
			a, err = t.Full(sp.rows, sp.cols, rocsync.Float32, sp.fill)
		}
		if err != nil {
			s.free()
			return fmt.Errorf("allocating %s: %w", sp.name, err)
		}
		s.arrays[i] = a
	}
	if err := t.Synchronize(); err != nil {
		s.free()
		return err
	}
	return nil
}

// run submits one training step. It returns W1 (read back once, after the
// last iteration, for the checksum) and no temporaries.
func (s *mlpState) run(t *rocsync.Task) (*rocsync.Array, []*rocsync.Array, error) {
	s.nextStep()
	if err := s.runOps(t, 0, len(s.ops)); err != nil {
		return nil, nil, err
	}
	return s.arrays[s.w1], nil, nil
}

// nextStep advances Adam's step and its bias corrections.
func (s *mlpState) nextStep() {
	s.step++
	s.corr1 = 1 / (1 - math.Pow(adamBeta1, float64(s.step)))
	s.corr2 = 1 / (1 - math.Pow(adamBeta2, float64(s.step)))
}

// runOps submits ops [from, to) on t.
func (s *mlpState) runOps(t *rocsync.Task, from, to int) error {
	for i := from; i < to; i++ {
		op := &s.ops[i]
		if err := op.run(t, s.arrays); err != nil {
			return fmt.Errorf("op %d (%s): %w", i, op.name, err)
		}
	}
	return nil
}

func (s *mlpState) free() {
	for _, a := range s.arrays {
		if a != nil {
			_ = a.Free()
		}
	}
}

// crossingCount is what countCrossings finds in one op list.
type crossingCount struct {
	// Crossings is the number of ops that must wait for the other domain:
	// they depend on an op of the other domain that no earlier crossing of
	// the same iteration has already waited for. Under DeviceSide each is
	// one host wait (one task has one timeline per domain, so an op waits
	// at most once); under DeviceBridge each is a device-side wait.
	Crossings int
	// CrossDomainOps is the number of ops with any dependency in the other
	// domain, counting those an earlier wait already covers.
	CrossDomainOps int
	// Ops are the indices of the crossing ops in the list.
	Ops []int
}

// countCrossings replays rocsync's ordering rules (syncstate) on an op list
// run by one task, starting with nothing pending (each iteration ends with
// a Synchronize). Per array it tracks the last writer and the newest reader
// in each domain since that write, each as a (domain, position) fence:
//
//   - a write depends on the writer and every reader (WAW, WAR);
//   - a read depends on the writer, unless the array already has a reader
//     in the op's own domain (that reader was ordered after the writer);
//   - a dependency in the op's own domain needs nothing (in-order queue);
//   - one in the other domain needs a wait unless the host already waited
//     for that op or a later one of that domain: a host wait makes every
//     earlier op of the producer's timeline known complete. On the HSA
//     queue that is every packet up to the producer's (each packet has its
//     own completion signal); on the HIP stream it is every op submitted so
//     far, because the event the host waits on is recorded lazily, when
//     the wait is needed, and so marks the stream's newest op.
//
// What it cannot know is that a producer finished on its own before the
// host got there, which makes the real number of waits lower, never higher.
func countCrossings(ops []mlpOp, nArrays int) crossingCount {
	type fence struct {
		dom domain
		pos int // 0: none
	}
	type arr struct {
		writer  fence
		readers [2]int // newest reader position per domain, 0: none
	}
	st := make([]arr, nArrays)
	var pos, known [2]int
	var out crossingCount
	for i, op := range ops {
		d, o := op.dom, 1-op.dom
		pos[d]++
		need, cross := 0, false
		consider := func(f fence) {
			if f.pos == 0 || f.dom == d {
				return
			}
			cross = true
			if f.pos > known[o] {
				need = max(need, f.pos)
			}
		}
		w := &st[op.write]
		consider(w.writer)
		for rd, p := range w.readers {
			consider(fence{domain(rd), p})
		}
		for k, r := range op.reads {
			if r == op.write || indexOf(op.reads[:k], r) >= 0 {
				continue // aliases merge into one operand
			}
			if st[r].readers[d] != 0 {
				continue
			}
			consider(st[r].writer)
		}
		if cross {
			out.CrossDomainOps++
		}
		if need > 0 {
			out.Crossings++
			out.Ops = append(out.Ops, i)
			known[o] = need
			if o == libraryDomain {
				known[o] = pos[o]
			}
		}
		for _, r := range op.reads {
			if r != op.write {
				st[r].readers[d] = pos[d]
			}
		}
		*w = arr{writer: fence{d, pos[d]}}
	}
	return out
}

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// mlpCrossings counts the MLP's crossings per iteration.
func mlpCrossings(cfg config) crossingCount {
	s := newMLP(cfg.mlp, cfg.seed)
	return countCrossings(s.ops, len(s.specs))
}

// randomMatrix is deterministic in seed, uniform in [-scale/2, scale/2).
func randomMatrix(rows, cols int, seed uint64, scale float64) []float32 {
	out := make([]float32, rows*cols)
	x := seed*2862933555777941757 + 3037000493
	for i := range out {
		x = x*2862933555777941757 + 3037000493
		out[i] = float32((float64(x>>40)/float64(1<<24) - 0.5) * scale)
	}
	return out
}

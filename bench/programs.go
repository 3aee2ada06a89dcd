package main

import (
	"fmt"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/internal/measure"
)

// program is one benchmark program: it submits work on a task and returns
// the arrays to read back (for checksums) and the ones to free after the
// final Synchronize.
type program struct {
	name string
	// crossings is how many HSA↔HIP crossings one iteration makes, which
	// is the number of host waits DeviceSide must make.
	crossings func(cfg config) crossingCount
	// shape describes the sizes the program runs at.
	shape func(cfg config) string
	setup func(d *rocsync.Device, t *rocsync.Task, cfg config) (state, error)
}

// state is a program's inputs, kept across iterations.
type state interface {
	run(t *rocsync.Task) (out *rocsync.Array, temps []*rocsync.Array, err error)
	free()
}

func programByName(name string) (program, error) {
	for _, p := range programs {
		if p.name == name {
			return p, nil
		}
	}
	return program{}, fmt.Errorf("unknown program %q", name)
}

var programs = []program{
	{name: "matmul", crossings: noCrossings, shape: square, setup: setupSeed(func(t *rocsync.Task, x, a *rocsync.Array) (*rocsync.Array, error) {
		return t.MatMul(x, a, false, false)
	}, 3)},
	{name: "elementwise", crossings: noCrossings, shape: square, setup: setupSeed(func(t *rocsync.Task, x, a *rocsync.Array) (*rocsync.Array, error) {
		return t.Mul(x, a)
	}, 3)},
	{name: "mixed", crossings: mixedCrossings, shape: func(cfg config) string {
		return fmt.Sprintf("%dx%d, repeat %d", cfg.n, cfg.n, cfg.repeat)
	}, setup: setupMixed},
	{name: "mlp", crossings: mlpCrossings, shape: func(cfg config) string { return cfg.mlp.String() }, setup: setupMLP},
	{name: "chain99", crossings: noCrossings, shape: square, setup: setupChain},
}

// chainLength is chain99's number of multiplies, as in bench/rawcuda/raw.
const chainLength = 99

// setupChain is chain99, raw's chain99 op for op: t1 = y∘y,
// t(i+1) = y∘t(i), 99 multiplies, where y = 1 + x (added in float32 on
// the host, as raw does) so that the product neither under- nor
// overflows; raw runs the same kernel, so the checksums are equal.
func setupChain(d *rocsync.Device, _ *rocsync.Task, cfg config) (state, error) {
	y := measure.InputMatrix(cfg.n, cfg.seed)
	for i := range y {
		y[i] += 1
	}
	x, err := d.FromFloat32(cfg.n, cfg.n, y)
	if err != nil {
		return nil, err
	}
	return &seedState{x: x, f: func(t *rocsync.Task, x, a *rocsync.Array) (*rocsync.Array, error) {
		return t.Mul(x, a)
	}, reps: chainLength}, nil
}

func noCrossings(config) crossingCount { return crossingCount{} }

// mixedCrossings: each repetition of (x∘x)·x crosses once, HSA→HIP; its
// arrays are fresh, so nothing crosses back.
func mixedCrossings(cfg config) crossingCount {
	return crossingCount{Crossings: cfg.repeat, CrossDomainOps: cfg.repeat}
}

func square(cfg config) string { return fmt.Sprintf("%dx%d", cfg.n, cfg.n) }

// seedState runs a seed program's chain t1 = f(x, x), t2 = f(x, t1), t3 = f(x, t2).
type seedState struct {
	x    *rocsync.Array
	f    func(t *rocsync.Task, x, a *rocsync.Array) (*rocsync.Array, error)
	reps int
	// temps is reused by every iteration (the caller frees the arrays
	// before the next one), so that the harness itself allocates nothing
	// per iteration: what the allocation counts show is rocsync's.
	temps []*rocsync.Array
}

func setupSeed(f func(t *rocsync.Task, x, a *rocsync.Array) (*rocsync.Array, error), reps int) func(*rocsync.Device, *rocsync.Task, config) (state, error) {
	return func(d *rocsync.Device, _ *rocsync.Task, cfg config) (state, error) {
		x, err := d.FromFloat32(cfg.n, cfg.n, measure.InputMatrix(cfg.n, cfg.seed))
		if err != nil {
			return nil, err
		}
		return &seedState{x: x, f: f, reps: reps}, nil
	}
}

func (s *seedState) run(t *rocsync.Task) (*rocsync.Array, []*rocsync.Array, error) {
	clear(s.temps)
	s.temps = s.temps[:0]
	cur := s.x
	for i := 0; i < s.reps; i++ {
		next, err := s.f(t, s.x, cur)
		if err != nil {
			return nil, s.temps, err
		}
		s.temps = append(s.temps, next)
		cur = next
	}
	return cur, s.temps, nil
}

func (s *seedState) free() { _ = s.x.Free() }

// mixedState runs (x∘x)·x, repeat times: each repetition crosses from an
// HSA kernel to a rocBLAS gemm once.
type mixedState struct {
	x      *rocsync.Array
	repeat int
	temps  []*rocsync.Array // reused, as seedState's
}

func setupMixed(d *rocsync.Device, _ *rocsync.Task, cfg config) (state, error) {
	x, err := d.FromFloat32(cfg.n, cfg.n, measure.InputMatrix(cfg.n, cfg.seed))
	if err != nil {
		return nil, err
	}
	return &mixedState{x: x, repeat: cfg.repeat}, nil
}

func (s *mixedState) run(t *rocsync.Task) (*rocsync.Array, []*rocsync.Array, error) {
	clear(s.temps)
	s.temps = s.temps[:0]
	var out *rocsync.Array
	for i := 0; i < s.repeat; i++ {
		sq, err := t.Mul(s.x, s.x)
		if err != nil {
			return nil, s.temps, err
		}
		s.temps = append(s.temps, sq)
		if out, err = t.MatMul(sq, s.x, false, false); err != nil {
			return nil, s.temps, err
		}
		s.temps = append(s.temps, out)
	}
	return out, s.temps, nil
}

func (s *mixedState) free() { _ = s.x.Free() }

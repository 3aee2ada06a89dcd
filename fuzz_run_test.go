package rocsync

// The device side of the differential fuzz harness: runs a program on the
// emulator, one goroutine and one Task per program task, and compares with
// the model.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocsync/rocsync/internal/testhooks"
	"github.com/rocsync/rocsync/kernels"
)

// fuzzConfig configures one device run of a program.
type fuzzConfig struct {
	policy   Policy
	seed     uint64        // the emulator's delay seed
	maxDelay time.Duration // the emulator's random delays
	hazards  bool          // the hazard checker
	// disableWaits removes rocsync's waits (the harness's self-test).
	disableWaits bool
	// serial submits one op at a time in program order and lets the
	// device finish it (Machine.Quiesce) before the next: with waits
	// disabled this keeps Go's race detector quiet, so that only the
	// hazard checker sees the missing ordering.
	serial bool
	// timeout bounds every wait of the harness itself.
	timeout time.Duration
	// fault, if set, makes one op fault (see fuzz_faults_test.go): errors
	// no longer stop a task, and every outcome is recorded for the
	// fault checker instead of being judged here.
	fault *faultSpec
}

// fuzzReport is what a run found.
type fuzzReport struct {
	mu         sync.Mutex
	mismatches []string
	errs       []string
	hazards    []error
	hung       bool

	// With a fault: each op's outcome, the final Device.Synchronize's
	// error and the final read of every slot.
	faultOuts  []outcome
	faultSync  error
	faultFinal []outcome
}

func (r *fuzzReport) mismatch(format string, args ...any) {
	r.mu.Lock()
	r.mismatches = append(r.mismatches, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *fuzzReport) fail(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// ok reports whether the run matched the model with no hazard and no error.
func (r *fuzzReport) ok() bool {
	return len(r.mismatches) == 0 && len(r.errs) == 0 && len(r.hazards) == 0 && !r.hung
}

func (r *fuzzReport) String() string {
	var s strings.Builder
	if r.hung {
		s.WriteString("HUNG\n")
	}
	for i, e := range r.errs {
		if i == 8 {
			fmt.Fprintf(&s, "… %d more errors\n", len(r.errs)-i)
			break
		}
		fmt.Fprintf(&s, "error: %s\n", e)
	}
	for i, m := range r.mismatches {
		if i == 8 {
			fmt.Fprintf(&s, "… %d more mismatches\n", len(r.mismatches)-i)
			break
		}
		fmt.Fprintf(&s, "mismatch: %s\n", m)
	}
	for i, h := range r.hazards {
		if i == 4 {
			fmt.Fprintf(&s, "… %d more hazards\n", len(r.hazards)-i)
			break
		}
		fmt.Fprintf(&s, "hazard: %v\n", h)
	}
	return s.String()
}

// readBack reads an array as float64 values.
func readBack(a *Array) ([]float64, error) {
	if a.DType() == Float64 {
		return a.Float64s()
	}
	v, err := a.Float32s()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out, nil
}

func upload(d *Device, rows, cols int, dt DType, v []float64) (*Array, error) {
	if dt == Float64 {
		return d.FromFloat64(rows, cols, v)
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return d.FromFloat32(rows, cols, f)
}

// elementwiseInto runs kop through its Into form (Fill for kernels.Fill).
func elementwiseInto(tk *Task, kop kernels.Op, out, a, b *Array, alpha float64) error {
	switch kop {
	case kernels.Mul:
		return tk.MulInto(out, a, b)
	case kernels.Add:
		return tk.AddInto(out, a, b)
	case kernels.Sub:
		return tk.SubInto(out, a, b)
	case kernels.Div:
		return tk.DivInto(out, a, b)
	case kernels.Scale:
		return tk.ScaleInto(out, alpha, a)
	case kernels.AXPY:
		return tk.AXPYInto(out, alpha, a, b)
	case kernels.Fill:
		return tk.Fill(out, alpha)
	case kernels.Copy:
		return tk.CopyInto(out, a)
	case kernels.Neg:
		return tk.NegInto(out, a)
	case kernels.Exp:
		return tk.ExpInto(out, a)
	case kernels.Sqrt:
		return tk.SqrtInto(out, a)
	case kernels.ReLU:
		return tk.ReLUInto(out, a)
	case kernels.ReLUGrad:
		return tk.ReLUGradInto(out, a, b)
	}
	return fmt.Errorf("no API call for %v", kop)
}

// elementwiseNew runs kop through the form that returns a new array.
// Fill, which reads nothing, makes a shape×dt array with Full.
func elementwiseNew(tk *Task, kop kernels.Op, a, b *Array, alpha float64, shape [2]int, dt DType) (*Array, error) {
	switch kop {
	case kernels.Mul:
		return tk.Mul(a, b)
	case kernels.Add:
		return tk.Add(a, b)
	case kernels.Sub:
		return tk.Sub(a, b)
	case kernels.Div:
		return tk.Div(a, b)
	case kernels.Scale:
		return tk.Scale(alpha, a)
	case kernels.AXPY:
		return tk.AXPY(alpha, a, b)
	case kernels.Fill:
		return tk.Full(shape[0], shape[1], dt, alpha)
	case kernels.Copy:
		return tk.Copy(a)
	case kernels.Neg:
		return tk.Neg(a)
	case kernels.Exp:
		return tk.Exp(a)
	case kernels.Sqrt:
		return tk.Sqrt(a)
	case kernels.ReLU:
		return tk.ReLU(a)
	case kernels.ReLUGrad:
		return tk.ReLUGrad(a, b)
	}
	return nil, fmt.Errorf("no API call for %v", kop)
}

// predecessors lists, per op, the earlier ops on other tasks that it
// conflicts with: the last writer of every slot it touches, and for a
// write, the reads since. Same-task order is the goroutine's own.
//
// With serial, every op follows the one before it. With allBeforeSync,
// a Device.Synchronize follows every earlier op (the fault checker needs
// to know whether it came after the fault).
//
// With a barrier at op b (>= 0), op b follows every earlier op and every
// later op follows it.
func predecessors(p *program, serial, allBeforeSync bool, barrier int) [][]int {
	preds := make([][]int, len(p.ops))
	lastWrite := make([]int, len(p.shape))
	readsSince := make([][]int, len(p.shape))
	for i := range lastWrite {
		lastWrite[i] = -1
	}
	for i, o := range p.ops {
		if serial {
			if i > 0 {
				preds[i] = []int{i - 1}
			}
			continue
		}
		add := func(j int) {
			if j >= 0 && p.ops[j].task != o.task {
				preds[i] = append(preds[i], j)
			}
		}
		switch {
		case barrier >= 0 && i == barrier:
			for j := 0; j < i; j++ {
				add(j)
			}
		case barrier >= 0 && i > barrier:
			add(barrier)
		}
		if allBeforeSync && o.kind == pkDevSync {
			for j := 0; j < i; j++ {
				add(j)
			}
		}
		for _, s := range o.reads() {
			add(lastWrite[s])
		}
		for _, s := range o.writes() {
			add(lastWrite[s])
			for _, j := range readsSince[s] {
				add(j)
			}
		}
		for _, s := range o.reads() {
			readsSince[s] = append(readsSince[s], i)
		}
		for _, s := range o.writes() {
			lastWrite[s], readsSince[s] = i, nil
		}
	}
	return preds
}

// runFuzzProgram runs p on a fresh emulated device and checks it against
// the model. It never blocks longer than about cfg.timeout per wait; a run
// that does is reported as hung (its goroutines are abandoned).
func runFuzzProgram(p *program, want *model, cfg fuzzConfig) *fuzzReport {
	rep := &fuzzReport{}
	if cfg.timeout == 0 {
		cfg.timeout = 30 * time.Second
	}
	// The emulator's fault injector faults the first device op it is asked
	// about once armed; the harness arms it only while the faulting op is
	// the one op that can run (see the barrier below).
	var armed atomic.Bool
	var faultedOp atomic.Value
	inject := func(op string) bool {
		if armed.CompareAndSwap(true, false) {
			faultedOp.Store(op)
			return true
		}
		return false
	}
	d, err := Open(Options{Backend: Emulator, Policy: cfg.policy, LogLevel: LogOff, test: testhooks.Device{DisableWaits: cfg.disableWaits},
		Emulator: EmulatorOptions{HazardChecker: cfg.hazards, MaxDelay: cfg.maxDelay, Seed: cfg.seed, FaultInjector: inject}})
	if err != nil {
		rep.fail("Open: %v", err)
		return rep
	}
	closed := false
	defer func() {
		if !closed && !rep.hung {
			_ = closeWithin(d, cfg.timeout)
		}
	}()
	tasks := make([]*Task, p.tasks)
	for i := range tasks {
		if tasks[i], err = d.NewTask(); err != nil {
			rep.fail("NewTask: %v", err)
			return rep
		}
	}
	slots := make([]*Array, len(p.shape))
	for i, sh := range p.shape {
		if slots[i], err = upload(d, sh[0], sh[1], p.dtype, p.init[i]); err != nil {
			rep.fail("upload s%d: %v", i, err)
			return rep
		}
	}

	barrier := -1
	if cfg.fault != nil && cfg.fault.injector {
		barrier = cfg.fault.op
	}
	preds := predecessors(p, cfg.serial, cfg.fault != nil, barrier)
	if f := cfg.fault; f != nil {
		// The fault checker expects a Device.Synchronize before the fault
		// in program order to succeed: the fault must not overtake it.
		for j := 0; j < f.op; j++ {
			if p.ops[j].kind == pkDevSync && p.ops[j].task != p.ops[f.op].task {
				preds[f.op] = append(preds[f.op], j)
			}
		}
	}
	var outs []outcome
	if cfg.fault != nil {
		outs = make([]outcome, len(p.ops))
	}
	done := make([]chan struct{}, len(p.ops))
	for i := range done {
		done[i] = make(chan struct{})
	}
	// replace swaps a slot's array for a new one and frees the old one:
	// Free never blocks, even with the old array's work pending.
	replace := func(i, s int, a *Array) {
		old := slots[s]
		slots[s] = a
		if err := old.Free(); err != nil {
			rep.fail("op %d: Free s%d: %v", i, s, err)
		}
	}
	exec := func(i int, tk *Task) error {
		o := p.ops[i]
		// Load only the slots the op touches: the others may be being
		// replaced by another task right now.
		var x, y, out *Array
		uses := func(s int) bool { return s >= 0 && (slices.Contains(o.reads(), s) || slices.Contains(o.writes(), s)) }
		if uses(o.a) {
			x = slots[o.a]
		}
		if uses(o.b) {
			y = slots[o.b]
		}
		if uses(o.out) {
			out = slots[o.out]
		}
		if cfg.fault != nil && cfg.fault.op == i {
			if !cfg.fault.injector {
				x = unmappedLike(x) // the op reads memory that is not mapped
			} else {
				// Every earlier op has been submitted (the barrier) and
				// now runs to completion; later ones wait for this one.
				d.machine().Quiesce()
				armed.Store(true)
				defer func() {
					d.machine().Quiesce()
					if armed.Swap(false) {
						rep.fail("op %d (%v): the fault injector was never asked", i, o)
					}
				}()
			}
		}
		switch o.kind {
		case pkElemInto:
			return elementwiseInto(tk, o.kop, out, x, y, o.alpha)
		case pkElemNew:
			a, err := elementwiseNew(tk, o.kop, x, y, o.alpha, p.shape[o.out], p.dtype)
			if err != nil {
				return err
			}
			replace(i, o.out, a)
		case pkGemm:
			if o.alpha == 1 && o.beta == 0 {
				return tk.MatMulInto(out, x, y, o.transA, o.transB)
			}
			return tk.Gemm(o.transA, o.transB, o.alpha, x, y, o.beta, out)
		case pkMatMulNew:
			a, err := tk.MatMul(x, y, o.transA, o.transB)
			if err != nil {
				return err
			}
			replace(i, o.out, a)
		case pkRead:
			got, err := readBack(x)
			if err != nil {
				return err
			}
			if outs != nil {
				outs[i].got = got
				return nil
			}
			if diff := compare(want.readsAt[i], got); diff != "" {
				rep.mismatch("op %d (%v): %s", i, o, diff)
			}
		case pkRealloc:
			a, err := upload(d, out.Rows(), out.Cols(), p.dtype, o.data)
			if err != nil {
				return err
			}
			replace(i, o.out, a)
		case pkFull:
			a, err := tk.Full(out.Rows(), out.Cols(), p.dtype, o.alpha)
			if err != nil {
				return err
			}
			replace(i, o.out, a)
		case pkTaskSync:
			return tk.Synchronize()
		case pkDevSync:
			return d.Synchronize()
		}
		return nil
	}

	current := make([]atomic.Int64, len(tasks)) // the op each task is in, for hang reports
	for i := range current {
		current[i].Store(-1)
	}
	var wg sync.WaitGroup
	for ti := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed := false
			for i, o := range p.ops {
				if o.task != ti {
					continue
				}
				for _, j := range preds[i] {
					select {
					case <-done[j]:
					case <-time.After(cfg.timeout):
						rep.fail("op %d (%v): timed out waiting for op %d to be submitted", i, o, j)
						failed = true
					}
				}
				if !failed {
					current[ti].Store(int64(i))
					err := execRecovered(i, tasks[ti], exec)
					current[ti].Store(-1)
					switch {
					case outs != nil:
						outs[i] = outcome{err: err, got: outs[i].got, done: true}
					case err != nil:
						rep.fail("op %d (%v): %v", i, o, err)
						failed = true // later results would be garbage
					}
					if cfg.serial {
						d.machine().Quiesce()
					}
				}
				close(done[i])
			}
		}()
	}
	if !waitGroupWithin(&wg, 2*cfg.timeout) {
		rep.hung = true
		rep.fail("the tasks did not finish within %v", 2*cfg.timeout)
		dumpStacks()
		for ti := range current {
			if i := current[ti].Load(); i >= 0 {
				rep.fail("task %d is stuck in op %d (%v)", ti, i, p.ops[i])
			}
		}
		// A panic recovered earlier may have left a lock held.
		for i := range outs {
			if errors.Is(outs[i].err, errPanic) {
				rep.fail("op %d (%v): %v", i, p.ops[i], outs[i].err)
			}
		}
		return rep
	}
	switch {
	case outs != nil:
		var hung bool
		rep.faultSync, hung = returnsWithin(cfg.timeout, d.Synchronize)
		if hung {
			rep.hung = true
			rep.fail("the final Device.Synchronize did not return within %v", cfg.timeout)
			dumpStacks()
			return rep
		}
		rep.faultOuts = outs
		for s, a := range slots {
			var got []float64
			err, hung := returnsWithin(cfg.timeout, func() (err error) { got, err = readBack(a); return err })
			if hung {
				rep.hung = true
				rep.fail("the final read of s%d did not return within %v", s, cfg.timeout)
				return rep
			}
			rep.faultFinal = append(rep.faultFinal, outcome{err: err, got: got, done: true})
		}
	case len(rep.errs) == 0:
		if err, hung := returnsWithin(cfg.timeout, d.Synchronize); hung || err != nil {
			rep.hung = hung
			rep.fail("final Synchronize: %v (returned: %v)", err, !hung)
			return rep
		}
		for s, a := range slots {
			var got []float64
			err, hung := returnsWithin(cfg.timeout, func() (err error) { got, err = readBack(a); return err })
			if hung || err != nil {
				rep.hung = hung
				rep.fail("final read of s%d: %v (returned: %v)", s, err, !hung)
				return rep
			}
			if diff := compare(want.slots[s], got); diff != "" {
				rep.mismatch("final s%d: %s", s, diff)
			}
		}
	}
	closed = true
	if err := closeWithin(d, cfg.timeout); err != nil {
		switch {
		case errors.Is(err, errCloseTimeout):
			rep.hung = true
			rep.fail("Close: %v", err)
		case cfg.fault == nil:
			rep.fail("Close: %v", err)
		}
		// After a fault, Close may report it; it must only return.
	}
	if cfg.hazards {
		rep.hazards = d.Hazards()
	}
	return rep
}

// dumpStacks writes every goroutine's stack to the file named by
// ROCSYNC_FUZZ_STACKS, if set, when a run hangs: the hung goroutines are
// abandoned, so the test's own timeout never shows them.
func dumpStacks() {
	if f := os.Getenv("ROCSYNC_FUZZ_STACKS"); f != "" {
		buf := make([]byte, 1<<22)
		_ = os.WriteFile(f, buf[:runtime.Stack(buf, true)], 0o600)
	}
}

var errCloseTimeout = errors.New("Device.Close did not return")

// closeWithin closes d, giving up after timeout.
func closeWithin(d *Device, timeout time.Duration) error {
	ch := make(chan error, 1)
	go func() { ch <- d.Close() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("%w within %v", errCloseTimeout, timeout)
	}
}

// execRecovered runs one op, turning a panic inside rocsync into an error
// so that the failure names the program instead of killing the binary.
func execRecovered(i int, tk *Task, exec func(int, *Task) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
		}
	}()
	return exec(i, tk)
}

var errPanic = errors.New("PANIC")

// returnsWithin runs f, giving up waiting for it after timeout (hung is then
// true and f is abandoned).
func returnsWithin(timeout time.Duration, f func() error) (err error, hung bool) {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err, false
	case <-time.After(timeout):
		return nil, true
	}
}

// waitGroupWithin waits for wg, giving up after timeout.
func waitGroupWithin(wg *sync.WaitGroup, timeout time.Duration) bool {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(timeout):
		return false
	}
}

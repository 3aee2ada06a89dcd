package rocsync

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/nccl/ncclid"
)

// UniqueID names one communicator across processes: one process makes it
// (Device.NewUniqueID) and hands it to the others (its text form,
// MarshalText or String, fits an environment variable or a command line),
// which pass it to JoinCommunicator.
type UniqueID = driver.UniqueID

// ParseUniqueID reads a UniqueID's text form; anything else is an
// ErrInvalid error.
func ParseUniqueID(s string) (UniqueID, error) {
	id, err := ncclid.Parse(s)
	if err != nil {
		return id, &Error{Op: "ParseUniqueID", Kind: ErrInvalid, Err: err}
	}
	return id, nil
}

// ReduceOp is the reduction an all-reduce applies element by element.
type ReduceOp uint8

// The reductions (ncclSum, ncclProd, ncclMax, ncclMin).
const (
	ReduceSum  ReduceOp = iota // the sum over the ranks
	ReduceProd                 // the product
	ReduceMax                  // the largest
	ReduceMin                  // the smallest
)

// String names the reduction: "sum", "prod", "max", "min".
func (o ReduceOp) String() string {
	switch o {
	case ReduceSum:
		return "sum"
	case ReduceProd:
		return "prod"
	case ReduceMax:
		return "max"
	case ReduceMin:
		return "min"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(o))
}

// Communicator runs collectives (all-reduce, all-gather, broadcast) over
// GPUs through the vendor's library: NCCL on CUDA, RCCL on ROCm, and an
// emulated one (with the hazard checker) on the emulator. rocsync writes
// no communication of its own: each rank's part is an op on its task's
// library stream, declared with what it reads and writes, ordered after
// the work it must follow and recorded like any other op.
//
// A Communicator holds the local ranks: every device of one process
// (NewCommunicator), or this process's one rank of a communicator across
// processes (JoinCommunicator). Each collective takes one array per local
// rank, in rank order; with several, the calling goroutine submits every
// rank's part inside one NCCL group (see CommSubmit). It is safe for
// concurrent use, but every rank of a communicator must make the same
// collectives in the same order; a rank that never calls leaves the
// others waiting on the device (on the emulator, until
// Options.WaitTimeout, when their streams fail).
type Communicator struct {
	mu     sync.Mutex
	lib    driver.Collectives
	ranks  []commRank
	nranks int
	err    error // set once a collective was submitted on some ranks only, and the ranks' communicators aborted
	closed bool
	// submit is how the parts of a one-process communicator's
	// collectives are submitted (SetSubmit).
	submit CommSubmit
	// workers submit the parts of ranks 1..N-1 of one-process
	// communicators under SubmitThreads, from their first collective
	// until Close.
	workers *rankWorkers
	// scratch is runGroup's memory, made at its first use.
	scratch *groupScratch

	// dropAccess, in tests, leaves rank i's declared accesses out of the
	// collective (to prove the hazard checker sees the race).
	dropAccess func(rank int) bool
	// fenceInGroup, in tests, records the parts' fences inside the group,
	// before ncclGroupEnd (to prove the hazard checker sees the race).
	fenceInGroup bool
	// failCall, in tests, fails rank i's library call with its error
	// before the call reaches the library.
	failCall func(rank int) error
}

type commRank struct {
	task *Task
	comm driver.Comm
	rank int
}

// collLibFor returns d's collective library, loading it at first use.
func collLibFor(op string, d *Device) (driver.Collectives, error) {
	cd, ok := d.drv.(driver.CollectiveDevice)
	if !ok {
		return nil, newErr(op, ErrUnavailable, "no collective library on the %s backend", d.backend)
	}
	lib, err := cd.Collectives(d.waitTimeout)
	if err != nil {
		return nil, &Error{Op: op, Kind: ErrUnavailable, Err: err}
	}
	return lib, nil
}

// NewUniqueID makes the id of a new communicator across processes, with
// the collective library of d's backend. Hand it to every rank's
// JoinCommunicator. It is an ErrUnavailable error when the library is
// missing (the error names the paths searched).
func (d *Device) NewUniqueID() (UniqueID, error) {
	const op = "NewUniqueID"
	if d == nil {
		return UniqueID{}, newErr(op, ErrInvalid, "nil device")
	}
	if err := d.enter(op); err != nil {
		return UniqueID{}, err
	}
	defer d.leave()
	lib, err := collLibFor(op, d)
	if err != nil {
		return UniqueID{}, err
	}
	id, err := lib.NewUniqueID()
	if err != nil {
		return id, &Error{Op: op, Kind: ErrUnavailable, Err: err}
	}
	return id, nil
}

// NewCommunicator makes a communicator over the devices of this process
// (ncclCommInitAll): rank i runs on tasks[i]'s library stream. The tasks'
// devices must be distinct GPUs of one backend (one OpenAll). One task is
// a communicator of one rank, which works on a single GPU.
func NewCommunicator(tasks ...*Task) (*Communicator, error) {
	const op = "NewCommunicator"
	if len(tasks) == 0 {
		return nil, newErr(op, ErrInvalid, "no tasks")
	}
	for i, t := range tasks {
		if err := t.check(op); err != nil {
			return nil, err
		}
		for j, u := range tasks[:i] {
			if u.dev == t.dev || (u.dev.index == t.dev.index && u.dev.backend == t.dev.backend && u.dev.system == t.dev.system) {
				return nil, newErr(op, ErrInvalid, "tasks %d and %d are on the same GPU (%v): a communicator has one rank per GPU", j, i, t.dev)
			}
			if u.dev.backend != t.dev.backend || u.dev.system != t.dev.system {
				return nil, newErr(op, ErrDeviceMismatch, "task %d is on %v, task %d on %v: open the devices together (OpenAll)", j, u.dev, i, t.dev)
			}
		}
	}
	d := tasks[0].dev
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	lib, err := collLibFor(op, d)
	if err != nil {
		return nil, err
	}
	devices := make([]driver.Device, len(tasks))
	for i, t := range tasks {
		devices[i] = t.dev.drv
	}
	runtime.LockOSThread()
	comms, err := lib.CommInitAll(devices)
	runtime.UnlockOSThread()
	if err != nil {
		return nil, &Error{Op: op, Kind: ErrUnavailable, Detail: lib.Name() + " made no communicator", Err: err}
	}
	c := &Communicator{lib: lib, nranks: len(tasks)}
	for i, t := range tasks {
		c.ranks = append(c.ranks, commRank{task: t, comm: comms[i], rank: i})
	}
	return c, nil
}

// JoinCommunicator makes this process's rank of a communicator of nranks
// ranks across processes (ncclCommInitRank) on task's device, from the id
// one of them made (Device.NewUniqueID). It returns once every rank has
// joined; each must call it concurrently. Going multi-node is the
// library's business (its bootstrap and network).
func JoinCommunicator(task *Task, id UniqueID, rank, nranks int) (*Communicator, error) {
	const op = "JoinCommunicator"
	if err := task.check(op); err != nil {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, newErr(op, ErrInvalid, "rank %d of %d ranks", rank, nranks)
	}
	d := task.dev
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	lib, err := collLibFor(op, d)
	if err != nil {
		return nil, err
	}
	comm, err := lib.CommInitRank(d.drv, nranks, id, rank)
	if err != nil {
		kind := ErrUnavailable
		if errors.Is(err, ErrTimeout) {
			kind = ErrTimeout
		}
		return nil, &Error{Op: op, Kind: kind, Detail: fmt.Sprintf("rank %d of %d with %s", rank, nranks, lib.Name()), Err: err}
	}
	return &Communicator{lib: lib, nranks: nranks, ranks: []commRank{{task: task, comm: comm, rank: rank}}}, nil
}

// Ranks is the communicator's number of ranks (over every process).
func (c *Communicator) Ranks() int {
	if c == nil {
		return 0
	}
	return c.nranks
}

// Close waits for nothing: it destroys the communicator once its local
// ranks' tasks have drained (a collective still on a stream needs it).
// A second Close returns nil.
func (c *Communicator) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.workers != nil {
		c.workers.close()
		c.workers = nil
	}
	var errs []error
	for _, r := range c.ranks {
		if r.task.closed.Load() {
			continue
		}
		if err := r.task.Synchronize(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err) // a closed task or device has drained
		}
	}
	for _, r := range c.ranks {
		if c.err != nil {
			// partErrors aborted them: ncclCommAbort frees a
			// communicator, and a second call would use it after free.
			break
		}
		var err error
		if len(errs) > 0 {
			err = c.lib.CommAbort(r.comm) // peers may never answer
		} else {
			err = c.lib.CommDestroy(r.comm)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return &Error{Op: "Close", Kind: ErrFault, Detail: "communicator", Err: errors.Join(errs...)}
	}
	return nil
}

func always(int) bool { return true }
func never(int) bool  { return false }

// collectiveType reports whether collectives take elements of type dt.
func collectiveType(dt DType) bool { return dt == kernels.F32 || dt == kernels.F64 }

// rankOp is one rank's part of a collective: its operands and the library
// call that enqueues it.
type rankOp struct {
	operands [2]access
	n        int
	call     func(stream uintptr) error
}

// check validates the arrays a collective takes (one per local rank, in
// rank order): count, nil, device, freed, one element type across ranks,
// and, for those the collective reads (reads(i)), a failed writer. It
// runs before any rank's part is submitted, so that bad input leaves the
// communicator usable.
func (c *Communicator) check(op string, arrays []*Array, reads func(i int) bool) error {
	if c == nil {
		return newErr(op, ErrInvalid, "nil communicator")
	}
	if len(arrays) != len(c.ranks) {
		return newErr(op, ErrInvalid, "%d arrays for %d local ranks (one per rank, in rank order)", len(arrays), len(c.ranks))
	}
	for i, a := range arrays {
		r := c.ranks[i]
		if err := r.task.check(op, a); err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Detail = fmt.Sprintf("rank %d: %s", r.rank, e.Detail)
			}
			return err
		}
		a.st.Lock()
		freed := a.freed
		a.st.Unlock()
		if freed {
			return newErr(op, ErrFreed, "rank %d: %v", r.rank, a)
		}
		if err := a.st.Poison(); err != nil && reads(i) {
			return &Error{Op: op, Kind: ErrFault, Detail: fmt.Sprintf("rank %d: %v", r.rank, a), Err: err}
		}
		if !collectiveType(a.dtype) {
			return newErr(op, ErrDType, "rank %d: %v: collectives take float32 and float64", r.rank, a)
		}
		if a0 := arrays[0]; a.dtype != a0.dtype {
			return newErr(op, ErrDType, "rank %d: %v, rank %d: %v", c.ranks[0].rank, a0, r.rank, a)
		}
	}
	return nil
}

// AllReduce reduces arrays (one per local rank, in rank order) in place:
// afterwards every rank's array holds op over all ranks' arrays. Each
// rank's part reads and writes its array.
func (c *Communicator) AllReduce(op ReduceOp, arrays ...*Array) error {
	const name = "AllReduce"
	if err := c.check(name, arrays, always); err != nil {
		return err
	}
	if op > ReduceMin {
		return newErr(name, ErrInvalid, "unknown reduction %v", op)
	}
	if err := c.sameShape(name, arrays); err != nil {
		return err
	}
	return c.run(name, func(i int, r commRank, ro *rankOp) {
		a := arrays[i]
		ro.operands[0], ro.n = access{&a.buffer, a, ReadWrite}, 1
		p, n, dt, lib, comm := a.ptr, a.Len(), a.dtype, c.lib, r.comm
		ro.call = func(s uintptr) error { return lib.AllReduce(p, p, n, dt, driver.ReduceOp(op), comm, s) }
	})
}

// sameShape checks that every rank's array has rank 0's shape.
func (c *Communicator) sameShape(name string, arrays []*Array) error {
	for i, a := range arrays {
		if a.rows != arrays[0].rows || a.cols != arrays[0].cols {
			return newErr(name, ErrShape, "rank %d: %v, rank %d: %v", c.ranks[0].rank, arrays[0], c.ranks[i].rank, a)
		}
	}
	return nil
}

// AllGather concatenates every rank's send array in rank order into each
// rank's recv array, whose length is Ranks() times send's (send and recv
// one per local rank, in rank order). Each rank's part reads its send and
// writes its recv.
func (c *Communicator) AllGather(send, recv []*Array) error {
	const name = "AllGather"
	if err := c.check(name, send, always); err != nil {
		return err
	}
	if err := c.check(name, recv, never); err != nil {
		return err
	}
	for i := range send {
		s, r := send[i], recv[i]
		if s.dtype != r.dtype {
			return newErr(name, ErrDType, "rank %d: send %v, recv %v", c.ranks[i].rank, s, r)
		}
		if s.Len() != send[0].Len() || r.Len() != c.nranks*s.Len() {
			return newErr(name, ErrShape, "rank %d: send %v, recv %v: recv holds %d ranks' sends", c.ranks[i].rank, s, r, c.nranks)
		}
		if s == r {
			return newErr(name, ErrInvalid, "rank %d: send and recv are one array", c.ranks[i].rank)
		}
	}
	return c.run(name, func(i int, r commRank, ro *rankOp) {
		s, v := send[i], recv[i]
		ro.operands[0], ro.operands[1], ro.n = access{&s.buffer, s, Read}, access{&v.buffer, v, Write}, 2
		sp, rp, n, dt, lib, comm := s.ptr, v.ptr, s.Len(), s.dtype, c.lib, r.comm
		ro.call = func(st uintptr) error { return lib.AllGather(sp, rp, n, dt, comm, st) }
	})
}

// Broadcast copies rank root's array to every other rank's, in place
// (arrays one per local rank, in rank order): the root's part reads its
// array, the others' write theirs.
func (c *Communicator) Broadcast(root int, arrays ...*Array) error {
	const name = "Broadcast"
	if err := c.check(name, arrays, func(i int) bool { return c.ranks[i].rank == root }); err != nil {
		return err
	}
	if c != nil && (root < 0 || root >= c.nranks) {
		return newErr(name, ErrInvalid, "root %d of %d ranks", root, c.nranks)
	}
	if err := c.sameShape(name, arrays); err != nil {
		return err
	}
	return c.run(name, func(i int, r commRank, ro *rankOp) {
		a := arrays[i]
		acc := Write
		if r.rank == root {
			acc = Read
		}
		ro.operands[0], ro.n = access{&a.buffer, a, acc}, 1
		p, n, dt, lib, comm := a.ptr, a.Len(), a.dtype, c.lib, r.comm
		ro.call = func(s uintptr) error { return lib.Broadcast(p, p, n, dt, root, comm, s) }
	})
}

// CommSubmit is how a communicator over several GPUs of one process
// (NewCommunicator) submits a collective's parts, one per GPU. Both give
// the same ordering and the same results; they differ in host cost.
type CommSubmit uint8

const (
	// SubmitThreads, the default: each part from its own OS thread,
	// without a group (NCCL's one thread per GPU): rank 0's on the
	// calling goroutine, the others' on long-lived goroutines locked to
	// their threads. Measured faster than SubmitGroup at 1 MiB on two
	// H200s, and no slower on four (docs/benchmarks.md).
	SubmitThreads CommSubmit = iota
	// SubmitGroup: the calling goroutine submits every part, on one OS
	// thread, inside ncclGroupStart/ncclGroupEnd (NCCL's and RCCL's way
	// for one thread to drive several GPUs), and each part's fence is
	// recorded once ncclGroupEnd has launched it.
	SubmitGroup
)

// String names the way: "group", "threads".
func (m CommSubmit) String() string {
	switch m {
	case SubmitGroup:
		return "group"
	case SubmitThreads:
		return "threads"
	}
	return fmt.Sprintf("CommSubmit(%d)", uint8(m))
}

// ParseCommSubmit reads "group" or "threads"; anything else is an
// ErrInvalid error.
func ParseCommSubmit(s string) (CommSubmit, error) {
	for _, m := range []CommSubmit{SubmitThreads, SubmitGroup} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, newErr("ParseCommSubmit", ErrInvalid, "%q: want group or threads", s)
}

// SetSubmit chooses how the communicator's collectives submit their
// parts (default SubmitThreads; a communicator of one local rank has one
// part, which its caller submits either way). A backend without the
// stream holds a group needs submits as SubmitThreads does.
func (c *Communicator) SetSubmit(m CommSubmit) error {
	if c == nil {
		return newErr("SetSubmit", ErrInvalid, "nil communicator")
	}
	if m > SubmitGroup {
		return newErr("SetSubmit", ErrInvalid, "%v", m)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.submit = m
	return nil
}

// run submits each local rank's part as a library-call op on its task.
// With several local ranks they are submitted together: by the calling
// goroutine inside one NCCL group (runGroup), or under SubmitThreads
// (and where a group cannot be used: a backend whose streams cannot be
// held, a task inside Record) at once, rank 0's on the calling goroutine
// and each other's on its worker (rankWorkers), NCCL's pattern of one
// thread per GPU. Either keeps "enqueued when the call returns" true for
// every rank.
func (c *Communicator) run(name string, build func(i int, r commRank, ro *rankOp)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return newErr(name, ErrClosed, "communicator is closed")
	}
	if c.err != nil {
		return &Error{Op: name, Kind: ErrFault, Detail: "the communicator broke", Err: c.err}
	}
	ops := make([]rankOp, len(c.ranks))
	for i, r := range c.ranks {
		build(i, r, &ops[i])
		if c.dropAccess != nil && c.dropAccess(i) {
			ops[i].n = 0
		}
		if c.failCall != nil {
			call, fail := ops[i].call, c.failCall
			ops[i].call = func(s uintptr) error {
				if err := fail(i); err != nil {
					return err
				}
				return call(s)
			}
		}
	}
	errs := make([]error, len(c.ranks))
	if len(c.ranks) > 1 && c.submit == SubmitGroup {
		if launched, cause, ok := c.runGroup(name, ops, errs); ok {
			return c.partErrors(name, errs, launched, cause)
		}
	}
	// Every rank's task is claimed before any part is submitted: a task
	// that is closed, or in use by another goroutine, refuses the whole
	// collective with nothing submitted, instead of failing its part
	// after the others are on their streams (which aborts the
	// communicator and loses what those parts write).
	for i, r := range c.ranks {
		err := r.task.check(name)
		if err == nil {
			err = r.task.begin(name)
		}
		if err != nil {
			for _, claimed := range c.ranks[:i] {
				claimed.task.end()
			}
			errs[i] = err
			return c.partErrors(name, errs, false, i)
		}
	}
	defer func() {
		for _, r := range c.ranks {
			r.task.end()
		}
	}()
	submit := func(i int) {
		defer recoverPart(errs, i)
		t, ro := c.ranks[i].task, &ops[i]
		op := &t.ops.call
		op.Call = ro.call
		accs := append(t.operands[:0], ro.operands[:ro.n]...)
		_, errs[i] = t.submit(name, op, accs)
	}
	if len(c.ranks) == 1 {
		submit(0)
	} else {
		if c.workers == nil {
			c.workers = newRankWorkers(len(c.ranks) - 1)
		}
		c.workers.run(submit)
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	return c.partErrors(name, errs, failed < len(c.ranks), -1)
}

// partErrors is the error of a collective whose parts ended with errs:
// nil if none failed, else the error of part cause (if not -1) or of the
// first that failed. When a part failed and another may be on its stream
// (launched), or ranks of other processes wait for this one, the
// communicator is aborted and refuses further use.
func (c *Communicator) partErrors(name string, errs []error, launched bool, cause int) error {
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		return nil
	}
	err := errors.Join(errs...)
	if launched || c.nranks > len(c.ranks) {
		// Some ranks' parts are on their streams and wait for the others:
		// abort, so that the library stops them, and refuse further use.
		c.err = err
		for _, r := range c.ranks {
			_ = c.lib.CommAbort(r.comm)
		}
	}
	if cause < 0 || errs[cause] == nil {
		cause = 0
		for errs[cause] == nil {
			cause++
		}
	}
	e, rank := errs[cause], c.ranks[cause].rank
	var re *Error
	if errors.As(e, &re) {
		out := *re
		out.Detail = fmt.Sprintf("rank %d", rank)
		if re.Detail != "" {
			out.Detail += ": " + re.Detail
		}
		if c.err != nil {
			out.Detail += "; the communicator was aborted"
		}
		return &out
	}
	return &Error{Op: name, Kind: ErrFault, Detail: fmt.Sprintf("rank %d", rank), Err: e}
}

package emu

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/nccl"
)

// Collectives is the emulated NCCL/RCCL of a machine: communicators over
// its emulated GPUs, and collectives enqueued on their HIP streams. It
// implements nccl.Collectives.
//
// Like NCCL's kernels, a collective is one command per rank on that
// rank's stream, and each blocks its stream until every rank's command has
// arrived: only then are the results written. A rank reads its own send
// buffer and writes its own receive buffer through the GPU's mappings and
// the hazard checker, so an access the op path did not order is reported.
// Completing a collective orders a rank after what every rank of the same
// machine had done before its part (it has received their data).
//
// Unlike NCCL, it never hangs: a rank whose peers do not arrive within the
// timeout fails its stream (hipErrorLaunchFailure naming the missing ranks,
// matching ErrCollectiveTimeout), and so do the peers that arrive later;
// ranks that disagree on a collective's kind, count, type, operation or
// root fail all of theirs. Either breaks the communicator, as a real
// abort would. Communicators made from one unique id may span machines
// (CommInitRank), modelling processes; clocks are joined only within one.
type Collectives struct {
	m       *Machine
	timeout time.Duration
}

var _ nccl.Collectives = (*Collectives)(nil)

// ErrCollectiveTimeout is matched by errors.Is for a rank that waited
// longer than the timeout for its peers (a collective, or CommInitRank).
var ErrCollectiveTimeout = errors.New("emu: collective peers did not arrive")

// Collectives returns the machine's collective library; timeout bounds
// every rendezvous (0: none).
func (m *Machine) Collectives(timeout time.Duration) *Collectives {
	return &Collectives{m: m, timeout: timeout}
}

// The communicators of every machine: a unique id joins ranks across
// machines, as it joins processes.
var comms struct {
	mu      sync.Mutex
	next    nccl.Comm
	byComm  map[nccl.Comm]*ecomm
	cliques map[nccl.UniqueID]*clique
}

type ecomm struct {
	c      *Collectives
	cl     *clique
	rank   int
	gpu    int    // the machine's GPU index
	issued uint64 // collectives enqueued, under cl.mu
}

// clique is the ranks of one communicator.
type clique struct {
	nranks int
	mu     sync.Mutex
	ranks  []*ecomm
	joined int
	ready  chan struct{} // closed when every rank has joined
	rounds map[uint64]*round
	broken error
}

// round is one collective: the ranks' parts meet here.
type round struct {
	desc     collDesc
	descRank int
	arrived  int
	data     [][]byte
	vcs      []vclock
	machines []*Machine
	done     chan struct{}
	closed   bool // done is closed (under the clique's lock)
	err      error
	finished int
}

// end closes the round with err (nil: every rank arrived); the caller
// holds the clique's lock. A round ends once.
func (r *round) end(err error) {
	if r.closed {
		return
	}
	r.closed, r.err = true, err
	close(r.done)
}

type collDesc struct {
	fn    string
	count int
	dt    nccl.DataType
	op    nccl.RedOp
	root  int
}

func (d collDesc) String() string {
	s := fmt.Sprintf("%s(count %d, %v", d.fn, d.count, d.dt)
	switch d.fn {
	case "ncclAllReduce", "ncclReduceScatter":
		s += ", " + d.op.String()
	case "ncclBroadcast":
		s += fmt.Sprintf(", root %d", d.root)
	}
	return s + ")"
}

func collErr(fn string, r nccl.Result, format string, a ...any) error {
	return &nccl.Error{Func: fn, Result: r, Text: fmt.Sprintf(format, a...)}
}

// GetUniqueID is ncclGetUniqueId: random bytes.
func (c *Collectives) GetUniqueID() (nccl.UniqueID, error) {
	var id nccl.UniqueID
	_, err := rand.Read(id[:])
	return id, err
}

func (c *Collectives) gpu(fn string, hipDev int) (int, error) {
	if hipDev < 0 || hipDev >= len(c.m.hipDevices) {
		return 0, collErr(fn, nccl.InvalidArgument, "device %d of %d", hipDev, len(c.m.hipDevices))
	}
	return c.m.hipDevices[hipDev], nil
}

func register(cl *clique, rank, gpu int, c *Collectives) nccl.Comm {
	e := &ecomm{c: c, cl: cl, rank: rank, gpu: gpu}
	cl.ranks[rank] = e
	comms.next++
	if comms.byComm == nil {
		comms.byComm = map[nccl.Comm]*ecomm{}
		comms.cliques = map[nccl.UniqueID]*clique{}
	}
	comms.byComm[comms.next] = e
	return comms.next
}

func newClique(n int) *clique {
	return &clique{nranks: n, ranks: make([]*ecomm, n), ready: make(chan struct{}), rounds: map[uint64]*round{}}
}

// CommInitAll is ncclCommInitAll over HIP devices.
func (c *Collectives) CommInitAll(devices []int) ([]nccl.Comm, error) {
	const fn = "ncclCommInitAll"
	if len(devices) == 0 {
		return nil, collErr(fn, nccl.InvalidArgument, "no devices")
	}
	gpus := make([]int, len(devices))
	for i, d := range devices {
		g, err := c.gpu(fn, d)
		if err != nil {
			return nil, err
		}
		if slices.Contains(gpus[:i], g) {
			return nil, collErr(fn, nccl.InvalidUsage, "device %d listed twice", d)
		}
		gpus[i] = g
	}
	cl := newClique(len(devices))
	comms.mu.Lock()
	defer comms.mu.Unlock()
	out := make([]nccl.Comm, len(devices))
	for r, g := range gpus {
		out[r] = register(cl, r, g, c)
	}
	cl.joined = len(devices)
	close(cl.ready)
	return out, nil
}

// CommInitRank is ncclCommInitRank on HIP device hipDev: it returns once
// every rank has joined, or fails with ErrCollectiveTimeout.
func (c *Collectives) CommInitRank(hipDev, nranks int, id nccl.UniqueID, rank int) (nccl.Comm, error) {
	const fn = "ncclCommInitRank"
	g, err := c.gpu(fn, hipDev)
	if err != nil {
		return 0, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return 0, collErr(fn, nccl.InvalidArgument, "rank %d of %d ranks", rank, nranks)
	}
	comms.mu.Lock()
	if comms.cliques == nil {
		comms.byComm = map[nccl.Comm]*ecomm{}
		comms.cliques = map[nccl.UniqueID]*clique{}
	}
	cl := comms.cliques[id]
	if cl == nil {
		cl = newClique(nranks)
		comms.cliques[id] = cl
	}
	if cl.nranks != nranks {
		comms.mu.Unlock()
		return 0, collErr(fn, nccl.InvalidUsage, "%d ranks, but another rank of this id said %d", nranks, cl.nranks)
	}
	if cl.ranks[rank] != nil {
		comms.mu.Unlock()
		return 0, collErr(fn, nccl.InvalidUsage, "rank %d joined twice", rank)
	}
	h := register(cl, rank, g, c)
	cl.joined++
	if cl.joined == nranks {
		close(cl.ready)
		delete(comms.cliques, id) // the id's bootstrap is over
	}
	comms.mu.Unlock()
	if err := c.await(cl.ready); err != nil {
		comms.mu.Lock()
		cl.ranks[rank] = nil
		cl.joined--
		delete(comms.byComm, h)
		comms.mu.Unlock()
		return 0, fmt.Errorf("%w: ncclCommInitRank: rank %d of %d: only %d ranks joined within %v", ErrCollectiveTimeout, rank, nranks, cl.joinedNow(), c.timeout)
	}
	return h, nil
}

func (cl *clique) joinedNow() int {
	comms.mu.Lock()
	defer comms.mu.Unlock()
	return cl.joined
}

// await waits for ch, up to the timeout.
func (c *Collectives) await(ch chan struct{}) error {
	if c.timeout <= 0 {
		<-ch
		return nil
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return ErrCollectiveTimeout
	}
}

func lookup(fn string, h nccl.Comm) (*ecomm, error) {
	comms.mu.Lock()
	defer comms.mu.Unlock()
	e := comms.byComm[h]
	if e == nil {
		return nil, collErr(fn, nccl.InvalidArgument, "unknown or destroyed communicator")
	}
	return e, nil
}

// CommDestroy is ncclCommDestroy. The collectives already enqueued keep
// their state and finish (or time out).
func (c *Collectives) CommDestroy(h nccl.Comm) error {
	if _, err := lookup("ncclCommDestroy", h); err != nil {
		return err
	}
	comms.mu.Lock()
	delete(comms.byComm, h)
	comms.mu.Unlock()
	return nil
}

// CommAbort is ncclCommAbort: the communicator breaks, and its ranks'
// pending collectives fail at once.
func (c *Collectives) CommAbort(h nccl.Comm) error {
	e, err := lookup("ncclCommAbort", h)
	if err != nil {
		return err
	}
	e.cl.fail(fmt.Errorf("communicator aborted by rank %d", e.rank))
	return c.CommDestroy(h)
}

// AsyncError is the communicator's broken state, as an *nccl.Error.
func (c *Collectives) AsyncError(h nccl.Comm) error {
	e, err := lookup("ncclCommGetAsyncError", h)
	if err != nil {
		return err
	}
	e.cl.mu.Lock()
	defer e.cl.mu.Unlock()
	if e.cl.broken != nil {
		return &nccl.Error{Func: nccl.AsyncFunc, Result: nccl.RemoteError, Text: e.cl.broken.Error()}
	}
	return nil
}

// fail breaks the clique: every pending and later round fails with err.
func (cl *clique) fail(err error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.broken == nil {
		cl.broken = err
	}
	for _, r := range cl.rounds {
		r.end(cl.broken)
	}
}

// Group calls, as NCCL's: the group state is the calling OS thread's
// (NCCL keeps it thread-local, so a group's calls and its ncclGroupEnd
// must come from the thread that called ncclGroupStart); groups nest,
// and the outermost ncclGroupEnd launches the calls made inside, in
// order. A collective called inside a group is checked at the call, as
// NCCL checks its arguments, but reaches its stream only at
// ncclGroupEnd: "when called inside a group, stream operations (like
// ncclAllReduce) can return without having enqueued the operation on the
// stream" (NCCL's Group Calls). So work or an event that a program
// enqueues on the stream between the call and ncclGroupEnd runs before
// the collective, as it would on NCCL. A call that fails inside a group
// fails the group: ncclGroupEnd returns its error and launches nothing.
// ncclGroupEnd without a ncclGroupStart on the thread is
// ncclInvalidUsage.
var groups struct {
	mu       sync.Mutex
	byThread map[int64]*group
}

type group struct {
	depth  int
	launch []func() error // the deferred enqueues, in call order
	err    error          // the first call that failed inside the group
}

// GroupStart is ncclGroupStart.
func (c *Collectives) GroupStart() error {
	groups.mu.Lock()
	defer groups.mu.Unlock()
	tid := threadID()
	g := groups.byThread[tid]
	if g == nil {
		if groups.byThread == nil {
			groups.byThread = map[int64]*group{}
		}
		g = &group{}
		groups.byThread[tid] = g
	}
	g.depth++
	return nil
}

// GroupEnd is ncclGroupEnd: the outermost one launches the group's calls.
func (c *Collectives) GroupEnd() error {
	const fn = "ncclGroupEnd"
	groups.mu.Lock()
	tid := threadID()
	g := groups.byThread[tid]
	if g == nil {
		groups.mu.Unlock()
		return collErr(fn, nccl.InvalidUsage, "no ncclGroupStart on this thread")
	}
	g.depth--
	if g.depth > 0 {
		groups.mu.Unlock()
		return nil
	}
	delete(groups.byThread, tid)
	groups.mu.Unlock()
	if g.err != nil {
		return collErr(fn, nccl.InvalidUsage, "a call of the group failed: %v", g.err)
	}
	var errs []error
	for _, launch := range g.launch {
		errs = append(errs, launch())
	}
	return errors.Join(errs...)
}

// inGroup defers launch to the thread's ncclGroupEnd when a group is open
// (and says so); err is the call's own error, which fails the group.
func inGroup(err error, launch func() error) (deferred bool, _ error) {
	groups.mu.Lock()
	defer groups.mu.Unlock()
	g := groups.byThread[threadID()]
	if g == nil {
		return false, err
	}
	if err != nil {
		if g.err == nil {
			g.err = err
		}
		return true, err
	}
	g.launch = append(g.launch, launch)
	return true, nil
}

func elemSize(fn string, dt nccl.DataType) (int, error) {
	switch dt {
	case nccl.Float32, nccl.Float64, nccl.Int32, nccl.Int64, nccl.Uint32, nccl.Uint64, nccl.Int8, nccl.Uint8:
		return dt.Size(), nil
	}
	return 0, collErr(fn, nccl.InvalidArgument, "%v is not emulated", dt)
}

func (c *Collectives) AllReduce(send, recv uintptr, count int, dt nccl.DataType, op nccl.RedOp, h nccl.Comm, stream uintptr) error {
	d := collDesc{fn: "ncclAllReduce", count: count, dt: dt, op: op}
	return c.enqueue(d, send, recv, h, stream, func(n int) (uint64, uint64) { return uint64(count), uint64(count) },
		func(data [][]byte, rank int, out []byte) { reduceInto(out, data, 0, dt, op) })
}

func (c *Collectives) AllGather(send, recv uintptr, sendCount int, dt nccl.DataType, h nccl.Comm, stream uintptr) error {
	d := collDesc{fn: "ncclAllGather", count: sendCount, dt: dt}
	return c.enqueue(d, send, recv, h, stream, func(n int) (uint64, uint64) { return uint64(sendCount), uint64(n * sendCount) },
		func(data [][]byte, rank int, out []byte) {
			for r, part := range data {
				copy(out[r*len(part):], part)
			}
		})
}

func (c *Collectives) Broadcast(send, recv uintptr, count int, dt nccl.DataType, root int, h nccl.Comm, stream uintptr) error {
	d := collDesc{fn: "ncclBroadcast", count: count, dt: dt, root: root}
	e, err := lookup(d.fn, h)
	if err == nil && (root < 0 || root >= e.cl.nranks) {
		err = collErr(d.fn, nccl.InvalidArgument, "root %d of %d ranks", root, e.cl.nranks)
	}
	if err != nil {
		_, err = inGroup(err, nil) // fails the thread's group, if one is open
		return err
	}
	isRoot := e.rank == root
	return c.enqueue(d, send, recv, h, stream, func(n int) (uint64, uint64) {
		switch {
		case !isRoot:
			return 0, uint64(count) // send is read on the root only
		case send == recv:
			return uint64(count), 0 // in place, the root only sends (NCCL copies nothing)
		}
		return uint64(count), uint64(count)
	}, func(data [][]byte, rank int, out []byte) { copy(out, data[root]) })
}

func (c *Collectives) ReduceScatter(send, recv uintptr, recvCount int, dt nccl.DataType, op nccl.RedOp, h nccl.Comm, stream uintptr) error {
	d := collDesc{fn: "ncclReduceScatter", count: recvCount, dt: dt, op: op}
	return c.enqueue(d, send, recv, h, stream, func(n int) (uint64, uint64) { return uint64(n * recvCount), uint64(recvCount) },
		func(data [][]byte, rank int, out []byte) { reduceInto(out, data, rank*len(out), dt, op) })
}

// enqueue puts one rank's part of a collective on its stream. sizes
// gives the send and receive element counts for nranks ranks; compute
// writes this rank's result from every rank's send data.
func (c *Collectives) enqueue(d collDesc, send, recv uintptr, h nccl.Comm, sid uintptr,
	sizes func(nranks int) (uint64, uint64), compute func(data [][]byte, rank int, out []byte)) error {
	launch, err := c.prepare(d, send, recv, h, sid, sizes, compute)
	if deferred, err := inGroup(err, launch); deferred {
		return err
	}
	if err != nil {
		return err
	}
	return launch()
}

// prepare checks one rank's part of a collective and returns what puts it
// on its stream.
func (c *Collectives) prepare(d collDesc, send, recv uintptr, h nccl.Comm, sid uintptr,
	sizes func(nranks int) (uint64, uint64), compute func(data [][]byte, rank int, out []byte)) (func() error, error) {
	e, err := lookup(d.fn, h)
	if err != nil {
		return nil, err
	}
	if e.c.m != c.m {
		return nil, collErr(d.fn, nccl.InvalidUsage, "communicator of another machine")
	}
	es, err := elemSize(d.fn, d.dt)
	if err != nil {
		return nil, err
	}
	if d.count < 0 {
		return nil, collErr(d.fn, nccl.InvalidArgument, "count %d", d.count)
	}
	if d.fn == "ncclAllReduce" || d.fn == "ncclReduceScatter" {
		if d.op < nccl.Sum || d.op > nccl.Min {
			return nil, collErr(d.fn, nccl.InvalidArgument, "%v is not emulated", d.op)
		}
	}
	s, err := c.m.hip.stream(d.fn, hip.Stream(sid))
	if err != nil {
		return nil, collErr(d.fn, nccl.InvalidArgument, "stream: %v", err)
	}
	if s.dev != e.gpu {
		return nil, collErr(d.fn, nccl.InvalidUsage, "a stream of gpu%d for rank %d, whose device is gpu%d", s.dev, e.rank, e.gpu)
	}
	cl := e.cl
	nSend, nRecv := sizes(cl.nranks)
	sendBytes, recvBytes := nSend*uint64(es), nRecv*uint64(es)
	m, rank, gpu := c.m, e.rank, e.gpu
	return func() error {
		// The collective's number on its communicator is its launch's:
		// a group that launches nothing numbers nothing.
		cl.mu.Lock()
		seq := e.issued
		e.issued++
		cl.mu.Unlock()
		what := fmt.Sprintf("%s (rank %d of %d, collective #%d)", d.fn, rank, cl.nranks, seq)
		return s.enqueue(cmd{kind: cmdWork, what: what, fn: func(a *actor) error {
			var staged []byte
			in, rerr := m.gpuSpan(gpu, uint64(send), sendBytes, false, a)
			if rerr == nil {
				staged = slices.Clone(in)
			}
			var vc vclock
			if a != nil {
				vc = a.vc.clone()
			}
			r := cl.arrive(seq, rank, d, staged, vc, m, rerr, c.timeout)
			if rerr != nil {
				return rerr
			}
			if err := c.await(r.done); err != nil {
				cl.fail(fmt.Errorf("%w: %s: collective #%d (%v): rank %d waited %v for ranks %v", ErrCollectiveTimeout,
					d.fn, seq, d, rank, c.timeout, r.missing()))
			}
			cl.mu.Lock()
			err := r.err
			cl.mu.Unlock()
			if err != nil {
				r.leave(cl, seq)
				return err
			}
			if a != nil {
				// This rank has received every peer's data: it is ordered after
				// what each peer of this machine did before its part.
				for i, pvc := range r.vcs {
					if r.machines[i] == m {
						a.vc.join(pvc)
					}
				}
			}
			out := make([]byte, recvBytes)
			compute(r.data, rank, out)
			r.leave(cl, seq)
			dst, err := m.gpuSpan(gpu, uint64(recv), recvBytes, true, a)
			if err != nil {
				return err
			}
			copy(dst, out)
			return nil
		}})
	}, nil
}

// arrive adds a rank's part to round seq, making it if needed.
func (cl *clique) arrive(seq uint64, rank int, d collDesc, data []byte, vc vclock, m *Machine, readErr error, timeout time.Duration) *round {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	r := cl.rounds[seq]
	if r == nil {
		r = &round{desc: d, descRank: rank, data: make([][]byte, cl.nranks), vcs: make([]vclock, cl.nranks),
			machines: make([]*Machine, cl.nranks), done: make(chan struct{})}
		cl.rounds[seq] = r
		if cl.broken != nil {
			r.end(cl.broken)
		}
	}
	r.arrived++
	r.data[rank], r.vcs[rank], r.machines[rank] = data, vc, m
	if r.closed {
		return r
	}
	var err error
	switch {
	case readErr != nil:
		err = fmt.Errorf("%s: collective #%d: rank %d could not read its send buffer: %w", d.fn, seq, rank, readErr)
	case r.desc != d:
		err = fmt.Errorf("%s: collective #%d: rank %d called %v, rank %d called %v: every rank must make the same collective calls in the same order",
			d.fn, seq, rank, d, r.descRank, r.desc)
	case r.arrived == cl.nranks:
		r.end(nil)
		return r
	default:
		return r
	}
	cl.broken = err
	for _, o := range cl.rounds {
		o.end(err)
	}
	return r
}

// missing lists the ranks that have not arrived.
func (r *round) missing() []int {
	var out []int
	for i, m := range r.machines {
		if m == nil {
			out = append(out, i)
		}
	}
	return out
}

// leave drops the round once every rank that arrived is done with it.
func (r *round) leave(cl *clique, seq uint64) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	r.finished++
	if r.finished == cl.nranks {
		delete(cl.rounds, seq)
	}
}

// reduceInto writes op over every rank's data, from byte offset off, into
// out.
func reduceInto(out []byte, data [][]byte, off int, dt nccl.DataType, op nccl.RedOp) {
	le := binary.LittleEndian
	switch dt {
	case nccl.Float32:
		reduceElems(out, data, off, 4, op,
			func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) },
			func(b []byte, v float32) { le.PutUint32(b, math.Float32bits(v)) })
	case nccl.Float64:
		reduceElems(out, data, off, 8, op,
			func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) },
			func(b []byte, v float64) { le.PutUint64(b, math.Float64bits(v)) })
	case nccl.Int32:
		reduceElems(out, data, off, 4, op,
			func(b []byte) int32 { return int32(le.Uint32(b)) },
			func(b []byte, v int32) { le.PutUint32(b, uint32(v)) })
	case nccl.Uint32:
		reduceElems(out, data, off, 4, op, le.Uint32, le.PutUint32)
	case nccl.Int64:
		reduceElems(out, data, off, 8, op,
			func(b []byte) int64 { return int64(le.Uint64(b)) },
			func(b []byte, v int64) { le.PutUint64(b, uint64(v)) })
	case nccl.Uint64:
		reduceElems(out, data, off, 8, op, le.Uint64, le.PutUint64)
	case nccl.Int8:
		reduceElems(out, data, off, 1, op,
			func(b []byte) int8 { return int8(b[0]) },
			func(b []byte, v int8) { b[0] = byte(v) })
	case nccl.Uint8:
		reduceElems(out, data, off, 1, op,
			func(b []byte) uint8 { return b[0] },
			func(b []byte, v uint8) { b[0] = v })
	}
}

// reduceElems is reduceInto for elements of es bytes that get reads and
// put writes.
func reduceElems[T int8 | uint8 | int32 | uint32 | int64 | uint64 | float32 | float64](out []byte, data [][]byte, off, es int, op nccl.RedOp, get func([]byte) T, put func([]byte, T)) {
	for i := 0; i < len(out); i += es {
		acc := get(data[0][off+i:])
		for _, d := range data[1:] {
			acc = reduce(acc, get(d[off+i:]), op)
		}
		put(out[i:], acc)
	}
}

func reduce[T int8 | uint8 | int32 | uint32 | int64 | uint64 | float32 | float64](a, b T, op nccl.RedOp) T {
	switch op {
	case nccl.Prod:
		return a * b
	case nccl.Max:
		return max(a, b)
	case nccl.Min:
		return min(a, b)
	}
	return a + b
}

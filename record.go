package rocsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/goid"
	"github.com/rocsync/rocsync/syncstate"
)

// Record and replay. While Task.Record runs its function, every op
// submitted on the task is recorded instead of run: Task.submit's one
// branch sends it to record. At the end the ops are split into segments,
// maximal runs on one timeline (the HSA queue, the HIP or CUDA stream, the
// host lane), and each segment is handed to the driver once
// (driver.Recorder) to prebuild: AQL packets with kernargs of their own,
// the stream calls. Replay is one op of the op path, submitted by
// Task.submitEntered as an eager op is, the recording its opSync: it orders itself
// after what the union of the recorded operands needs (their accesses
// merged) on the first segment's timeline, submits the segments in order
// as driver.ReplayOp values, each after the earlier segments of other
// timelines it conflicts with (on the device where the policy allows,
// else a counted host wait, as the eager crossing was), and records one
// fence, the last segment's, on every operand (linkSegments orders every
// segment after the first and the last after every other, so that fence
// stands for the whole replay). The operands share a syncstate.Group, so
// that a replay which finds them as the previous one left them records
// that fence once, on the group, and touches none of them.

// recordedOp is one op as submitted while recording.
type recordedOp struct {
	op driver.Op
	tl syncstate.Timeline
}

// recorder is a task's state while Record runs.
type recorder struct {
	r        *Recording
	g        uint64 // the goroutine running Record, the only one whose ops it takes
	ops      []recordedOp
	operands [][]access // each op's operands
}

// replaySegment is a run of recorded ops on one timeline.
type replaySegment struct {
	lane driver.Lane
	tl   syncstate.Timeline
	rec  driver.Recorded // nil for the host lane
	host func() error    // the host lane's functions in order
	ops  int
	// bufs are the segment's buffers and how it uses them (for deps).
	bufs map[*buffer]Access
	// deps are the earlier segments, on other timelines, that this one
	// must follow (at most one per timeline, the newest); done holds the
	// fence of this segment's latest replay, as a writer, for the
	// segments after it to wait for through the sync core.
	deps []int
	done *syncstate.State
	// link reads the deps' done states and mark writes done: built once
	// by build, begun and recorded by every replay.
	link, mark syncstate.Op
}

// Recording is a sequence of ops recorded by Task.Record, which Replay
// submits again as one op. It belongs to its task (replay it from the
// goroutine that uses the task). The buffers and arrays it uses cannot be
// freed until it is closed.
type Recording struct {
	t         *Task
	id        uint64
	recording atomic.Bool // Record's function is still running
	closed    bool
	// ops is the number of ops, set once built; atomic, because an
	// error about an operand the recording pins (another goroutine's
	// Free, say) names the recording while Record builds it.
	ops      atomic.Int64
	segs     []replaySegment
	operands []access       // the union of the ops' operands, one per buffer, sorted by lock order
	parts    []syncstate.Op // the operands, MaxOperands per part, added once by build and begun by replays that take them
	// grp is the operands' shared sync record: a replay that finds them
	// as the last one left them records its fence there once, without
	// taking any operand (nil when an operand is in another live
	// recording's group: every replay then takes them all).
	grp     *syncstate.Group
	staging []unsafe.Pointer
	last    syncstate.Fence // the newest replay's fence
	fast    bool            // the replay under way began on grp alone
}

var recordingIDs atomic.Uint64

// replayName names Replay in errors and in the ops it records.
const replayName = "Replay"

// String names the recording, as errors show it.
func (r *Recording) String() string {
	if r == nil {
		return "Recording(nil)"
	}
	if r.recording.Load() {
		return fmt.Sprintf("recording #%d (still recording)", r.id)
	}
	return fmt.Sprintf("recording #%d (%d ops)", r.id, r.ops.Load())
}

// Ops is the number of ops recorded.
func (r *Recording) Ops() int {
	if r == nil {
		return 0
	}
	return int(r.ops.Load())
}

// Segments is the number of driver submissions one replay makes: runs of
// ops on one timeline (one on a single queue or stream).
func (r *Recording) Segments() int {
	if r == nil {
		return 0
	}
	return len(r.segs)
}

// Graphs is the number of segments that replay as one runtime graph (a
// CUDA graph, a hipGraph: one launch per replay), and why capture failed
// for each stream segment that replays its recorded calls in order instead
// (one stream submission of them; Record also logs it at debug level).
// HSA queue segments are prebuilt packets and count in neither.
func (r *Recording) Graphs() (graphs int, fallbacks []error) {
	if r == nil {
		return 0, nil
	}
	for _, s := range r.segs {
		if g, ok := s.rec.(driver.GraphRecorded); ok {
			switch yes, why := g.Graph(); {
			case yes:
				graphs++
			case why != nil:
				fallbacks = append(fallbacks, fmt.Errorf("%s: %w", s.tl.Name(), why))
			}
		}
	}
	return graphs, fallbacks
}

// Record runs fn and records every op fn submits on t instead of running
// it: rocsync's kernels, Gemm and MatMul, Sum, user kernels (Launch),
// LibraryCall, Upload and CopyBuffer, HostFunc. The ops are checked as
// they are submitted (shapes, types, freed operands), and the returned
// Recording replays them. Arrays that new-array forms (t.Mul(a, b))
// return are allocated at once; the recording writes them.
//
// fn's ops must come from the goroutine that called Record: while fn
// runs, a call on t from another goroutine is an ErrConcurrentUse error.
// Inside fn, what would wait on the host for recorded work is an
// ErrRecording error: Synchronize, Download, reading back an array the
// recording has touched, and a nested Record. An Upload records the bytes
// it was given: every replay uploads those. fn's error, or an op the
// recording cannot hold, ends Record with that error and nothing recorded;
// a panic in fn, or in a library call's function (which Record runs once
// to capture it), goes on, the task no longer recording and the operands
// released.
func (t *Task) Record(fn func() error) (*Recording, error) {
	const name = "Record"
	if err := t.check(name); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, newErr(name, ErrInvalid, "nil function")
	}
	if err := t.begin(name); err != nil {
		return nil, err
	}
	if t.rec != nil {
		t.end()
		return nil, newErr(name, ErrRecording, "inside another Record")
	}
	r := &Recording{t: t, id: recordingIDs.Add(1)}
	r.recording.Store(true)
	t.rec = &recorder{r: r, g: goid.ID()}
	t.end() // fn's ops use the task in turn, from this goroutine
	// done is false while a panic can pass: in fn, or in a library call's
	// function, which the build runs once to capture it. The panic goes
	// on (as does a Goexit), the task eager and the operands unpinned.
	done := false
	defer func() {
		if !done {
			t.swapRec(nil)
			r.recording.Store(false)
			_ = r.release(!t.dev.closed.Load())
		}
	}()
	err := fn()
	rec := t.swapRec(nil)
	r.recording.Store(false)
	if err == nil && t.closed.Load() {
		err = newErr(name, ErrClosed, "the task was closed inside Record")
	}
	if err == nil && len(rec.ops) == 0 {
		err = newErr(name, ErrInvalid, "the function submitted no op")
	}
	if err == nil {
		err = r.build(rec.ops, rec.operands)
	}
	done = true
	if err != nil {
		_ = r.release(!t.dev.closed.Load())
		return nil, asError(name, err)
	}
	return r, nil
}

// record is Task.submit while Record runs: it keeps a copy of op and
// pins its operands. The fence it returns is zero: nothing ran.
func (t *Task) record(name string, op driver.Op, operands []access) (syncstate.Fence, error) {
	defer t.ops.drop()
	r := t.rec.r
	if op.Kind() == driver.CopyDtoH {
		return syncstate.Fence{}, newErr(name, ErrRecording, "a download waits on the host for its copy; download after Replay")
	}
	for _, x := range operands {
		x.b.st.Lock()
		freed := x.b.freed
		x.b.st.Unlock()
		if freed {
			return syncstate.Fence{}, newErr(name, ErrFreed, "%v", x.who)
		}
	}
	ro := recordedOp{op: op.Clone(), tl: t.drv.Timeline(op.Lane())}
	if up, ok := ro.op.(*driver.CopyOp); ok && up.Direction == driver.HostToDevice {
		// The staging slot goes back to the pool: the recording keeps
		// the bytes in pinned memory of its own, which every replay
		// uploads.
		hm, ok := t.dev.drv.(driver.HostMemory)
		if !ok {
			return syncstate.Fence{}, newErr(name, ErrUnavailable, "no pinned host memory")
		}
		p, err := hm.HostAlloc(up.Size)
		if err != nil {
			return syncstate.Fence{}, &Error{Op: name, Kind: ErrUnavailable, Detail: "pinned memory for a recorded upload", Err: err}
		}
		r.staging = append(r.staging, p)
		copy(unsafe.Slice((*byte)(p), up.Size), unsafe.Slice((*byte)(up.Host), up.Size))
		up.Host = p
	}
	for _, x := range operands {
		r.addOperand(x)
	}
	t.rec.ops = append(t.rec.ops, ro)
	t.rec.operands = append(t.rec.operands, append([]access(nil), operands...))
	return syncstate.Fence{}, nil
}

// addOperand merges x into the union and pins its buffer once.
func (r *Recording) addOperand(x access) {
	for i := range r.operands {
		if r.operands[i].b == x.b {
			r.operands[i].access |= x.access
			return
		}
	}
	r.operands = append(r.operands, x)
	x.b.st.Lock()
	x.b.pins++
	x.b.pinnedBy = r
	x.b.st.Unlock()
}

// pinnedErr is Free's error for a buffer a live recording uses; the caller
// holds its lock.
func pinnedErr(op string, b *buffer, who fmt.Stringer) error {
	by := "a live recording"
	if b.pinnedBy != nil {
		by = b.pinnedBy.String()
	}
	return newErr(op, ErrRecording, "%v is used by %s: close it first", who, by)
}

// build splits the recorded ops into segments and has the driver prebuild
// each one.
func (r *Recording) build(ops []recordedOp, rops [][]access) error {
	t := r.t
	r.ops.Store(int64(len(ops)))
	for i := 0; i < len(ops); {
		j := i + 1
		for j < len(ops) && ops[j].tl == ops[i].tl {
			j++
		}
		seg, err := t.buildSegment(ops[i:j])
		if err != nil {
			return err
		}
		seg.bufs = map[*buffer]Access{}
		for _, o := range rops[i:j] {
			for _, x := range o {
				seg.bufs[x.b] |= x.access
			}
		}
		seg.done = syncstate.NewState()
		if g, ok := seg.rec.(driver.GraphRecorded); ok {
			if yes, why := g.Graph(); !yes && why != nil {
				t.dev.log.Debug().Str("timeline", seg.tl.Name()).Int("ops", seg.ops).Err(why).
					Msg("rocsync: recorded segment not captured into a graph; it replays its calls in order")
			}
		}
		r.segs = append(r.segs, seg)
		i = j
	}
	r.linkSegments()
	slices.SortFunc(r.operands, func(a, b access) int {
		return cmp.Compare(a.b.st.ID(), b.b.st.ID())
	})
	// The replay's ops are built here, once: a replay only begins and
	// records them (their operand lists stay; Begin, Commit, Abort and
	// Fail change only whether they hold the locks).
	r.parts = make([]syncstate.Op, (len(r.operands)+syncstate.MaxOperands-1)/syncstate.MaxOperands)
	for i := range r.parts {
		p := &r.parts[i]
		p.Name = replayName
		for _, x := range r.operands[i*syncstate.MaxOperands : min(len(r.operands), (i+1)*syncstate.MaxOperands)] {
			p.Use(&x.b.st, x.access)
		}
	}
	states := make([]*syncstate.State, len(r.operands))
	accs := make([]syncstate.Access, len(r.operands))
	for i, x := range r.operands {
		states[i], accs[i] = &x.b.st, x.access
	}
	r.grp = syncstate.NewGroup(replayName, states, accs)
	for k := range r.segs {
		seg := &r.segs[k]
		seg.link.Name = replayName
		for _, j := range seg.deps {
			seg.link.Read(r.segs[j].done)
		}
		seg.mark.Write(seg.done)
	}
	return nil
}

// buildSegment prebuilds ops (all on one timeline): host functions run in
// order as one function; anything else goes to the driver's Recorder.
func (t *Task) buildSegment(ops []recordedOp) (replaySegment, error) {
	seg := replaySegment{lane: ops[0].op.Lane(), tl: ops[0].tl, ops: len(ops)}
	if seg.lane == driver.LaneHost {
		fns := make([]func() error, len(ops))
		for i := range ops {
			fns[i] = ops[i].op.(*driver.HostFuncOp).Func
		}
		seg.host = func() error {
			for _, f := range fns {
				if err := f(); err != nil {
					return err
				}
			}
			return nil
		}
		return seg, nil
	}
	rec, ok := t.drv.(driver.Recorder)
	if !ok {
		return seg, newErr("Record", ErrUnavailable, "the %s backend cannot record", t.dev.backend)
	}
	dops := make([]driver.Op, len(ops))
	for i := range ops {
		dops[i] = ops[i].op
	}
	var err error
	if seg.rec, err = rec.Record(seg.lane, dops); err != nil {
		return seg, &Error{Op: "Record", Kind: ErrUnavailable, Detail: "prebuilding " + seg.tl.Name(), Err: err}
	}
	return seg, nil
}

// Replay submits the recorded ops again, as one op: it waits for what the
// recorded operands need (the union of their accesses), submits the
// segments in order, each after the earlier ones it depends on, and
// records one fence on every operand. It does not wait for the GPU. A closed recording, or one
// whose task or device is closed, is an ErrClosed error; a failure is
// reported as an eager op's would be (ErrFault poisons what it writes).
func (r *Recording) Replay() error {
	const name = replayName
	if r == nil {
		return newErr(name, ErrInvalid, "nil recording")
	}
	t := r.t
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if r.closed {
		return newErr(name, ErrClosed, "%v is closed", r)
	}
	if t.rec != nil {
		return newErr(name, ErrRecording, "inside Task.Record")
	}
	if err := t.dev.enterShard(name, t.shard); err != nil {
		return err
	}
	defer t.dev.leaveShard(t.shard)
	s := opSync{r: r}
	_, err := t.submitEntered(name, nil, &s)
	t.ops.drop() // the task's ops hold nothing of the recording's
	return err
}

// begin orders a replay on tl, its first segment's timeline, after what
// the union of its operands needs. A replay that finds its operands as
// the last one left them begins on its group alone (fast; see
// syncstate.Group); any other takes them all, as its parts.
func (r *Recording) begin(e *syncstate.Engine, tl syncstate.Timeline, sinks syncstate.Sinks) error {
	r.fast = r.grp != nil && r.grp.BeginReplay(e, tl, sinks)
	if r.fast {
		return nil
	}
	for i := range r.parts {
		if err := r.parts[i].Begin(e, tl, sinks); err != nil {
			for j := range i {
				r.parts[j].Abort()
			}
			return err
		}
	}
	return nil
}

// freed reports the first freed operand of a replay that took its
// operands, aborting it. Free refuses a pinned buffer, so once a replay
// has seen its operands unfreed (the one that settles the group) none is
// freed until Close.
func (r *Recording) freed(name string) error {
	if r.fast {
		return nil
	}
	for _, x := range r.operands {
		if x.b.freed { // locked by the parts
			r.abortParts()
			return newErr(name, ErrFreed, "%v", x.who)
		}
	}
	return nil
}

// segment makes the task's op replay segment k, and returns it with the
// segment's timeline, the ordering after the earlier segments it depends
// on (nil for none) and the segment's own record.
func (r *Recording) segment(t *Task, k int) (op driver.Op, tl syncstate.Timeline, link, mark *syncstate.Op) {
	seg := &r.segs[k]
	if seg.rec != nil {
		t.ops.replay.Recorded = seg.rec
		op = &t.ops.replay
	} else {
		t.ops.host.Func = seg.host
		op = &t.ops.host
	}
	if len(seg.deps) > 0 {
		link = &seg.link
	}
	return op, seg.tl, link, &seg.mark
}

// abort ends a replay that submitted nothing: nothing changes.
func (r *Recording) abort() {
	if r.fast {
		r.grp.AbortReplay()
		return
	}
	r.abortParts()
}

func (r *Recording) abortParts() {
	for i := range r.parts {
		r.parts[i].Abort()
	}
}

// fail fails a replay after it began, poisoning what it writes: on its
// group if it began there (fast), else on its operands.
func (r *Recording) fail(err error) {
	if r.fast {
		r.grp.FailReplay(err)
		return
	}
	for i := range r.parts {
		r.parts[i].Fail(err)
	}
}

// commit records a replay's fence f, its last segment's, which stands for
// the whole replay: on its group alone if it began there, else settling
// the group, or else on every operand.
func (r *Recording) commit(e *syncstate.Engine, name string, f syncstate.Fence, sinks syncstate.Sinks) error {
	r.last = f
	switch g := r.grp; {
	case r.fast:
		g.CommitReplay(f)
		return e.Committed(name, f, sinks)
	case g != nil:
		g.Settle(f)
		r.abortParts()
		return e.Committed(name, f, sinks)
	}
	var err error
	for i := range r.parts {
		if i < len(r.parts)-1 {
			r.parts[i].RecordOn(f, name)
			continue
		}
		err = r.parts[i].CommitOn(f.TL, f.Ticket, sinks)
	}
	return err
}

// Close releases the recording: it waits for its newest replay (a host
// wait counted as a sync wait, only if that replay is still running), then
// frees what the driver built for it and unpins its buffers and arrays,
// which may then be freed. Closing it again returns nil, as Task.Close
// does; Replay after Close is an ErrClosed error. A recording whose task
// or device was closed is released without a wait (they drained it).
func (r *Recording) Close() error {
	const name = "Recording.Close"
	if r == nil {
		return newErr(name, ErrInvalid, "nil recording")
	}
	if r.closed {
		return nil
	}
	t, d := r.t, r.t.dev
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	var err error
	if d.enter(name) == nil {
		if !t.closed.Load() && !r.last.IsZero() && !r.last.Done() {
			if err := fromHostFunc(name); err != nil {
				d.leave()
				return err
			}
			t.sinks.HostWait(ReasonSync)
			tw := d.obs.waitBegin(name, r.last, ReasonSync, t.traceHost)
			err = syncstate.WaitHostContext(context.Background(), r.last)
			d.obs.waitEnd(tw, err)
			if err != nil && waitKind(r.last, err) == ErrTimeout {
				d.leave()
				return &Error{Op: name, Kind: ErrTimeout, Detail: "waiting for the last replay " + r.last.String(), Err: err}
			}
			err = nil // a failed replay was reported by the op that waited for it
		}
		err = r.release(true)
		d.leave()
	} else {
		_ = r.release(false) // the device is closed: its runtimes freed the rest
	}
	r.closed = true
	return asError(name, err)
}

// release unpins the operands and, with driver set, frees what the driver
// and the recording allocated.
func (r *Recording) release(driverToo bool) error {
	if r.grp != nil {
		r.grp.Unlink(driverToo)
		r.grp = nil
	}
	var errs []error
	for _, x := range r.operands {
		x.b.st.Lock()
		x.b.pins--
		if x.b.pinnedBy == r {
			x.b.pinnedBy = nil
		}
		orphan := x.b.pins == 0 && x.b.freeUnpinned
		x.b.st.Unlock()
		if orphan && driverToo {
			errs = append(errs, x.b.free((*Buffer)(x.b)))
		}
	}
	r.operands = nil
	if driverToo {
		for _, s := range r.segs {
			if s.rec != nil {
				errs = append(errs, s.rec.Release())
			}
		}
	}
	if hm, ok := r.t.dev.drv.(driver.HostMemory); ok && (driverToo || !r.t.dev.closed.Load()) {
		for _, p := range r.staging {
			errs = append(errs, hm.HostFree(p))
		}
	}
	r.staging, r.segs = nil, nil
	return errors.Join(errs...)
}

// linkSegments works out which earlier segments each segment must follow
// on replay, so that a replay makes the waits the eager ops made and no
// more: a segment follows the newest earlier segment of each other
// timeline whose accesses conflict with its own (write after write, read
// after write, write after read). Two more rules make the replay one op:
// every segment is ordered after the first (which alone waits for the
// external work the recording must follow), and the last is ordered after
// every other (its fence, recorded on every operand, completes only when
// the whole replay has).
func (r *Recording) linkSegments() {
	segs := r.segs
	conflict := func(a, b map[*buffer]Access) bool {
		for buf, x := range a {
			if y, ok := b[buf]; ok && (x|y)&Write != 0 {
				return true
			}
		}
		return false
	}
	addDep := func(k, j int) {
		s := &segs[k]
		for i, d := range s.deps {
			if segs[d].tl == segs[j].tl {
				s.deps[i] = max(d, j)
				return
			}
		}
		s.deps = append(s.deps, j)
	}
	for k := 1; k < len(segs); k++ {
		for j := k - 1; j >= 0; j-- {
			if segs[j].tl != segs[k].tl && conflict(segs[j].bufs, segs[k].bufs) {
				addDep(k, j)
			}
		}
	}
	// after reports whether segment k is ordered after segment j<k: on
	// its timeline, or through a dependency.
	var after func(k, j int) bool
	after = func(k, j int) bool {
		if segs[k].tl == segs[j].tl {
			return true
		}
		for i := k - 1; i > j; i-- {
			if segs[i].tl == segs[k].tl && after(i, j) {
				return true
			}
		}
		for _, d := range segs[k].deps {
			if d == j || (d > j && after(d, j)) {
				return true
			}
		}
		return false
	}
	for k := 1; k < len(segs); k++ {
		if !after(k, 0) {
			addDep(k, 0)
		}
	}
	last := len(segs) - 1
	for j := last - 1; j >= 0; j-- {
		if !after(last, j) {
			addDep(last, j)
		}
	}
}

package rocsync

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/internal/traceopt"
	"github.com/rocsync/rocsync/syncstate"
)

// A Trace records what devices do, on a timeline, and writes it as
// Chrome/Perfetto trace-event JSON ({"traceEvents": [...]}), which
// ui.perfetto.dev and chrome://tracing open:
//
//   - each device is a process, named by Options.TraceName (default
//     "gpu0 DeviceSide"), with one track per queue or stream it used
//     (gpu0/hsa-q0, gpu0/hip-s1: the timeline names of errors) and host
//     tracks: "host" for the default task, read-backs, frees and Close,
//     and "host/taskN" for each other task;
//   - every op is a slice on the host track (its submission: ordering,
//     host waits, the driver's submit) and a slice on its queue's or
//     stream's track (its execution), with its name as the user called
//     it, its kind, its ticket and the sync decisions taken for it;
//   - every host wait is a slice on the host track named by its reason
//     (boundary, cross-queue, read-back, sync, free, throttle,
//     wait-always, launch-blocking), and every host or device wait has a
//     flow arrow from the op it waited for to the op or wait that waited.
//
// Execution slices end when the host first saw the op complete: a
// poller reads each timeline's completed ticket every TracePollInterval
// while devices record, and every host wait that returns marks its fence
// complete then. They are not GPU timestamps (HSA dispatch profiling and
// CUDA timing events are not used): an op's slice starts when it could
// start (submitted, its predecessor on the track and the fences it waited
// for on the device done, as far as observed) and may look longer than
// the GPU ran it by up to the poll interval.
//
// A Trace keeps every event in memory until the last device recording
// into it closes, or Flush: it is for debugging runs, not for recording
// millions of ops. It is safe for concurrent use.
type Trace struct {
	mu    sync.Mutex
	w     io.Writer // NewTrace
	path  string    // NewTraceFile
	start time.Time
	procs []*traceProc
	open  int // devices recording that have not closed
}

// TracePollInterval is how often a recording device's timelines are
// polled for completions (the resolution of execution slices' ends).
const TracePollInterval = 100 * time.Microsecond

// NewTrace returns a Trace that Flush writes to w, whole each time.
func NewTrace(w io.Writer) *Trace { return &Trace{w: w, start: time.Now()} }

// NewTraceFile returns a Trace that Flush writes to path, whole each time,
// atomically (a temporary file renamed over it, mode 0600).
func NewTraceFile(path string) *Trace { return &Trace{path: path, start: time.Now()} }

// envTrace is the process's ROCSYNC_TRACE trace, shared by every Open.
var envTrace struct {
	once sync.Once
	tr   *Trace
}

// traceFor is the Trace an Open records into: Options.Trace, else the
// process-wide one ROCSYNC_TRACE names (every device of the process
// records into that file, rewritten whenever its last open device
// closes), else none.
func traceFor(o Options) *Trace {
	if !traceopt.Enabled {
		return nil
	}
	if o.Trace != nil {
		return o.Trace
	}
	path := os.Getenv("ROCSYNC_TRACE")
	if path == "" {
		return nil
	}
	envTrace.once.Do(func() { envTrace.tr = NewTraceFile(path) })
	return envTrace.tr
}

// traceProc is one device's part of a trace (a process in the JSON).
type traceProc struct {
	tr   *Trace
	pid  int
	name string

	// Guarded by tr.mu.
	tracks  map[syncstate.Timeline]int // track ids of timelines
	names   []string                   // track names, by id
	ops     []traceOp
	waits   []traceWait
	done    map[syncstate.Timeline][]completion
	pending map[syncstate.Timeline]*pendingOp // decisions made for the op about to be submitted
	open    map[syncstate.Timeline]int        // index of a host wait under way for an op on the timeline
	// gpu holds device timestamps by timeline (ops in ticket order as
	// they retired); gpuTracks are the timelines' GPU track ids.
	gpu       map[syncstate.Timeline][]gpuSpan
	gpuTracks map[syncstate.Timeline]int
	// throttles are the indices of throttle waits not yet ended.
	throttles []int
	callbacks []traceCallback

	stop chan struct{}
	wg   sync.WaitGroup
}

// completion is an observation: every ticket up to ticket was complete at
// time at.
type completion struct {
	ticket uint64
	at     time.Duration
}

// traceOp is one op submitted.
type traceOp struct {
	name       string
	kind       driver.Kind
	lane       driver.Lane
	tl         syncstate.Timeline
	ticket     uint64
	tickets    uint64 // how many tickets, ending at ticket, the op took
	host       int    // host track id
	begin, end time.Duration
	issued     time.Duration // when it went to the driver
	skipped    int
	devWaits   []syncstate.Fence
}

// traceWait is one host wait.
type traceWait struct {
	op         string
	consumer   syncstate.Timeline // the timeline of the op that waited, if one did
	reason     Reason
	f          syncstate.Fence
	host       int
	begin, end time.Duration
	err        bool
	ended      bool
}

// traceCallback is a host callback (Pending.Then's function) run after
// the op at fence completed.
type traceCallback struct {
	name       string
	f          syncstate.Fence
	begin, end time.Duration
}

// callback records a host callback that ran from begin to now after the
// op at f.
func (p *traceProc) callback(name string, f syncstate.Fence, begin time.Duration) {
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	p.callbacks = append(p.callbacks, traceCallback{name: name, f: f, begin: begin, end: now})
}

// gpuSpan is when the op with ticket ran on the device, as the runtime
// timed it (HSA dispatch profiling, timing events).
type gpuSpan struct {
	ticket     uint64
	start, end time.Duration
}

// timelineTimer is a timeline that can time its ops on the device
// (queue.Queue, stream.Stream).
type timelineTimer interface {
	EnableTiming(report func(ticket uint64, start, end time.Time)) error
}

// timeTask asks the task's queue and streams to time every op on the
// device, where the runtime can (HSA dispatch profiling on the queue,
// timing events on HIP and CUDA streams); timelines that cannot get no
// GPU track. Nothing when not tracing.
func (p *traceProc) timeTask(dt driver.Task) {
	if p == nil {
		return
	}
	var seen [2]syncstate.Timeline
	for i, l := range [2]driver.Lane{driver.LaneKernel, driver.LaneLibrary} {
		tl := dt.Timeline(l)
		if i == 1 && tl == seen[0] {
			continue // Unified: one stream for both lanes
		}
		seen[i] = tl
		if tt, ok := tl.(timelineTimer); ok {
			_ = tt.EnableTiming(func(ticket uint64, start, end time.Time) { p.deviceSpan(tl, ticket, start, end) })
		}
	}
}

// deviceSpan records the device times of the op with ticket on tl. The
// timeline calls it with its own lock held.
func (p *traceProc) deviceSpan(tl syncstate.Timeline, ticket uint64, start, end time.Time) {
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	if _, ok := p.gpuTracks[tl]; !ok {
		p.gpuTracks[tl] = hostTracks + len(p.names)
		p.names = append(p.names, tl.Name()+gpuTrackSuffix)
	}
	p.gpu[tl] = append(p.gpu[tl], gpuSpan{ticket: ticket, start: start.Sub(p.tr.start), end: end.Sub(p.tr.start)})
}

// segmentSpan is the device time of the op whose tickets are (from, to]
// on a timeline whose spans g are in ticket order: from the first of its
// packets to start to the last to end. A replayed segment is one op of
// several packets, each timed on its own (queue.Replay); any other op is
// one ticket. It needs the op's own last ticket.
func segmentSpan(g []gpuSpan, from, to uint64) (gpuSpan, bool) {
	n := sort.Search(len(g), func(i int) bool { return g[i].ticket > from })
	var s gpuSpan
	found, any := false, false
	for ; n < len(g) && g[n].ticket <= to; n++ {
		if !any || g[n].start < s.start {
			s.start = g[n].start
		}
		any = true
		s.end = max(s.end, g[n].end)
		found = found || g[n].ticket == to
	}
	s.ticket = to
	return s, found
}

type pendingOp struct {
	skipped  int
	devWaits []syncstate.Fence
}

// Host track ids: timelines take ids from hostTracks up.
const (
	hostTrack     = 0 // the default task's, read-backs, frees, Close
	callbackTrack = hostTracks - 1
	hostTracks    = 1 << 16
)

// gpuTrackSuffix ends the name of a timeline's track of device
// timestamps (tracecheck.GPUSuffix reads it; TestTraceGPUTrackSuffix
// keeps the two equal).
const gpuTrackSuffix = " (GPU)"

// attach adds a device to the trace.
func (tr *Trace) attach(name string) *traceProc {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	p := &traceProc{tr: tr, pid: len(tr.procs) + 1, name: name, tracks: map[syncstate.Timeline]int{},
		done: map[syncstate.Timeline][]completion{}, pending: map[syncstate.Timeline]*pendingOp{},
		open: map[syncstate.Timeline]int{}, stop: make(chan struct{}),
		gpu: map[syncstate.Timeline][]gpuSpan{}, gpuTracks: map[syncstate.Timeline]int{}}
	tr.procs = append(tr.procs, p)
	tr.open++
	return p
}

// now is the time since the trace began. It is not inlined: inlined into
// Task.submit's hook, time.Since's body made the untraced path spill
// registers around the hook's nil check (11 instructions per op, measured
// with callgrind; docs/trace.md).
//
//go:noinline
func (p *traceProc) now() time.Duration { return time.Since(p.tr.start) }

// track returns tl's track id; the caller holds tr.mu.
func (p *traceProc) track(tl syncstate.Timeline) int {
	if id, ok := p.tracks[tl]; ok {
		return id
	}
	id := hostTracks + len(p.names)
	p.tracks[tl] = id
	p.names = append(p.names, tl.Name())
	return id
}

// Decided is the sync core's report of one decision (syncstate.Observer).
func (p *traceProc) Decided(op string, consumer syncstate.Timeline, f syncstate.Fence, d syncstate.Decision, r syncstate.Reason) {
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	switch d {
	case syncstate.HostWait:
		p.open[consumer] = len(p.waits)
		p.waits = append(p.waits, traceWait{op: op, consumer: consumer, reason: r, f: f, host: -1, begin: now})
		p.track(f.TL)
		return
	}
	po := p.pending[consumer]
	if po == nil {
		po = &pendingOp{}
		p.pending[consumer] = po
	}
	if d == syncstate.DeviceWait {
		po.devWaits = append(po.devWaits, f)
		p.track(f.TL)
	} else {
		po.skipped++
	}
}

// HostWaitEnded closes the host wait Decided opened (syncstate.WaitObserver).
func (p *traceProc) HostWaitEnded(consumer syncstate.Timeline, f syncstate.Fence, err error) {
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	if i, ok := p.open[consumer]; ok {
		delete(p.open, consumer)
		p.endWait(i, now, err)
	}
}

// endWait closes wait i; the caller holds tr.mu.
func (p *traceProc) endWait(i int, now time.Duration, err error) {
	w := &p.waits[i]
	w.end, w.err, w.ended = now, err != nil, true
	if err == nil {
		p.observe(w.f.TL, w.f.Ticket, now)
	}
}

// observe records that tl had completed ticket at time at; the caller holds
// tr.mu.
func (p *traceProc) observe(tl syncstate.Timeline, ticket uint64, at time.Duration) {
	obs := p.done[tl]
	if n := len(obs); ticket == 0 || n > 0 && obs[n-1].ticket >= ticket {
		return
	}
	p.done[tl] = append(obs, completion{ticket, at})
}

// opBegin is when an op's submission began (0 when not tracing).
func (p *traceProc) opBegin() time.Duration {
	if p == nil {
		return 0
	}
	return p.now()
}

// opSubmitted records an op the driver accepted as ticket on tl; host is
// the submitting task's host track. Host waits the op made through the
// sync core are put on that track.
func (p *traceProc) opSubmitted(op driver.Op, name string, tl syncstate.Timeline, ticket uint64, host int, begin, issued time.Duration) {
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	o := traceOp{name: name, kind: op.Kind(), lane: op.Lane(), tl: tl, ticket: ticket, tickets: 1, host: host, begin: begin, issued: issued, end: now}
	if r, ok := op.(*driver.ReplayOp); ok && r.Recorded != nil {
		o.tickets = driver.ReplayTickets(r.Recorded)
	}
	if len(p.throttles) != 0 {
		p.endThrottles(begin, now, host)
	}
	if po := p.pending[tl]; po != nil {
		o.skipped, o.devWaits = po.skipped, po.devWaits
		delete(p.pending, tl)
	}
	p.track(tl)
	p.ops = append(p.ops, o)
}

// claimWaits puts the host waits the sync core made for the op on tl that
// began at or after begin on the op's host track; the caller holds tr.mu.
func (p *traceProc) claimWaits(tl syncstate.Timeline, host int, begin time.Duration) {
	for i := len(p.waits) - 1; i >= 0 && p.waits[i].begin >= begin; i-- {
		if w := &p.waits[i]; w.host < 0 && w.consumer == tl {
			w.host = host
		}
	}
}

// opFailed forgets the decisions of an op that was not submitted, and
// puts its host waits on its task's track.
func (p *traceProc) opFailed(tl syncstate.Timeline, host int, begin time.Duration) {
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	delete(p.pending, tl)
	p.claimWaits(tl, host, begin)
	if len(p.throttles) != 0 {
		p.endThrottles(begin, p.now(), host)
	}
}

// opEnded stretches the op's host slice over what followed its
// submission (a WaitAlways or launch-blocking wait, the device's
// run-ahead cap) and claims its host waits.
func (p *traceProc) opEnded(tl syncstate.Timeline, ticket uint64, host int, begin time.Duration) {
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	p.claimWaits(tl, host, begin)
	for i := len(p.ops) - 1; i >= 0; i-- {
		if o := &p.ops[i]; o.tl == tl && o.ticket == ticket {
			o.end = now
			return
		}
	}
}

// waitBegin records the start of a host wait made outside the sync core
// (read-back, Synchronize, free, throttle, launch-blocking) and returns
// its index for waitEnd; -1 when not tracing.
func (p *traceProc) waitBegin(op string, f syncstate.Fence, r Reason, host int) int {
	if p == nil {
		return -1
	}
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	p.track(f.TL)
	p.waits = append(p.waits, traceWait{op: op, reason: r, f: f, host: host, begin: now})
	return len(p.waits) - 1
}

// waitEnd closes a wait from waitBegin.
func (p *traceProc) waitEnd(i int, err error) {
	if p == nil || i < 0 {
		return
	}
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	p.endWait(i, now, err)
}

// throttled records a throttle wait of a queue or stream past
// MaxInFlight, which the driver makes inside the op's submission or inside
// a device wait's (a marker on the producer's queue). The driver does not
// say when it ends: the submitting op's next step (going to the driver,
// coming back) ends it. With several tasks submitting at once, a
// throttle wait may so end at another task's step, a little early.
func (p *traceProc) throttled(f syncstate.Fence) {
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	p.track(f.TL)
	p.throttles = append(p.throttles, len(p.waits))
	p.waits = append(p.waits, traceWait{op: "submit", reason: ReasonThrottle, f: f, host: -1, begin: now})
}

// endThrottles ends the throttle waits made since an op's submission began
// at began, putting them on host; the caller holds tr.mu.
func (p *traceProc) endThrottles(began, now time.Duration, host int) {
	kept := p.throttles[:0]
	for _, i := range p.throttles {
		if w := &p.waits[i]; w.begin >= began {
			w.host = host
			p.endWait(i, now, nil)
			continue
		}
		kept = append(kept, i)
	}
	p.throttles = kept
}

// opIssued is when an op goes to the driver, its ordering done.
func (p *traceProc) opIssued(began time.Duration, host int) time.Duration {
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	if len(p.throttles) != 0 {
		p.endThrottles(began, now, host)
	}
	return now
}

// poll observes the completed tickets of the device's live tasks'
// timelines, until stop.
func (p *traceProc) poll(d *Device) {
	defer p.wg.Done()
	tick := time.NewTicker(TracePollInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		p.pollOnce(d)
	}
}

func (p *traceProc) pollOnce(d *Device) {
	d.mu.Lock()
	tasks := append([]*Task(nil), d.tasks...)
	d.mu.Unlock()
	for _, t := range tasks {
		if !t.lifeMu.TryLock() {
			continue // closing: its drain is observed
		}
		if !t.released {
			p.drained(t)
		}
		t.lifeMu.Unlock()
	}
}

// drained observes the task's timelines' completed tickets: the poller's
// look, and Close's after the drain, before the timelines are released.
func (p *traceProc) drained(t *Task) {
	if p == nil || t.drv == nil {
		return
	}
	k, l := t.drv.Timeline(driver.LaneKernel), t.drv.Timeline(driver.LaneLibrary)
	ck, cl := k.Completed(), l.Completed()
	now := p.now()
	p.tr.mu.Lock()
	defer p.tr.mu.Unlock()
	p.observe(k, ck, now)
	p.observe(l, cl, now)
}

// detach stops recording the device; the last device of a trace to
// detach flushes it.
func (p *traceProc) detach() error {
	if p == nil {
		return nil
	}
	close(p.stop)
	p.wg.Wait()
	p.tr.mu.Lock()
	p.tr.open--
	last := p.tr.open == 0
	p.tr.mu.Unlock()
	if last {
		return p.tr.write()
	}
	return nil
}

// Flush writes everything recorded so far, as one JSON document: to the
// writer of NewTrace, or atomically to the file of NewTraceFile. Devices
// flush their trace themselves when the last of them recording into it
// closes.
func (tr *Trace) Flush() error {
	if err := tr.write(); err != nil {
		return &Error{Op: "Trace.Flush", Kind: ErrInvalid, Err: err}
	}
	return nil
}

// write is Flush's work; its error is the writer's or the file system's,
// with what was being written.
func (tr *Trace) write() error {
	if tr == nil {
		return nil
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.path == "" {
		bw := bufio.NewWriter(tr.w)
		err := tr.writeLocked(bw)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
		return nil
	}
	if err := tr.writeFileLocked(); err != nil {
		return fmt.Errorf("writing the trace to %s: %w", tr.path, err)
	}
	return nil
}

func (tr *Trace) writeFileLocked() error {
	dir := filepath.Dir(tr.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(tr.path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	bw := bufio.NewWriter(f)
	err = tr.writeLocked(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, tr.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// jsonWriter writes trace events by hand: the trace has many small
// events, and the encoder's reflection would dominate writing them.
type jsonWriter struct {
	w     *bufio.Writer
	first bool
	err   error
}

func (j *jsonWriter) event(fields string) {
	if j.err != nil {
		return
	}
	if !j.first {
		_, j.err = j.w.WriteString(",\n")
	}
	j.first = false
	if j.err == nil {
		_, j.err = j.w.WriteString("{" + fields + "}")
	}
}

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 3, 64) }

func q(s string) string { return strconv.Quote(s) }

func (tr *Trace) writeLocked(w *bufio.Writer) error {
	if _, err := w.WriteString(`{"displayTimeUnit":"ns","traceEvents":[` + "\n"); err != nil {
		return err
	}
	j := &jsonWriter{w: w, first: true}
	flow := 0
	for _, p := range tr.procs {
		p.write(j, &flow)
	}
	if j.err != nil {
		return j.err
	}
	_, err := w.WriteString("\n]}\n")
	return err
}

// hostName names a host track.
func hostName(id int) string {
	switch id {
	case hostTrack:
		return "host"
	case callbackTrack:
		return "host/callbacks"
	}
	return "host/task" + strconv.Itoa(id)
}

// write emits one device's events; the caller holds tr.mu.
func (p *traceProc) write(j *jsonWriter, flow *int) {
	pid := strconv.Itoa(p.pid)
	j.event(`"ph":"M","name":"process_name","pid":` + pid + `,"tid":0,"args":{"name":` + q(p.name) + `}`)
	hosts := map[int]bool{}
	for _, o := range p.ops {
		hosts[o.host] = true
	}
	for _, w := range p.waits {
		if w.host >= 0 {
			hosts[w.host] = true
		}
	}
	if len(p.callbacks) > 0 {
		hosts[callbackTrack] = true
	}
	for id := range hosts {
		j.event(`"ph":"M","name":"thread_name","pid":` + pid + `,"tid":` + strconv.Itoa(id) + `,"args":{"name":` + q(hostName(id)) + `}`)
		j.event(`"ph":"M","name":"thread_sort_index","pid":` + pid + `,"tid":` + strconv.Itoa(id) + `,"args":{"sort_index":` + strconv.Itoa(id) + `}`)
	}
	for i, n := range p.names {
		tid := strconv.Itoa(hostTracks + i)
		j.event(`"ph":"M","name":"thread_name","pid":` + pid + `,"tid":` + tid + `,"args":{"name":` + q(n) + `}`)
		j.event(`"ph":"M","name":"thread_sort_index","pid":` + pid + `,"tid":` + tid + `,"args":{"sort_index":` + tid + `}`)
	}

	// Execution slices: an op starts once it is issued, its predecessor
	// on the track has ended and the fences it waited for on the device
	// have; it ends when the host first saw it complete.
	type span struct{ start, end time.Duration }
	spans := make([]span, len(p.ops))
	byFence := map[syncstate.Fence]int{}
	lastEnd := map[syncstate.Timeline]time.Duration{}
	final := p.now()
	for i, o := range p.ops {
		byFence[syncstate.Fence{TL: o.tl, Ticket: o.ticket}] = i
		start := max(o.issued, lastEnd[o.tl])
		for _, f := range o.devWaits {
			if k, ok := byFence[f]; ok {
				start = max(start, spans[k].end)
			}
		}
		end := final
		for _, c := range p.done[o.tl] {
			if c.ticket >= o.ticket {
				end = c.at
				break
			}
		}
		end = max(end, start+minSlice)
		spans[i] = span{start, end}
		lastEnd[o.tl] = end
	}
	byTL := map[syncstate.Timeline][]int{} // op indices by timeline, in ticket order
	for i, o := range p.ops {
		byTL[o.tl] = append(byTL[o.tl], i)
	}
	producer := func(f syncstate.Fence) (int, bool) {
		// The newest op at or before f on its timeline: a fence may name
		// a packet rocsync put on a queue for itself (a barrier or marker
		// packet takes a ticket), and waiting for it waits for the ops
		// before it.
		idx := byTL[f.TL]
		n := sort.Search(len(idx), func(i int) bool { return p.ops[idx[i]].ticket > f.Ticket })
		if n == 0 {
			return 0, false
		}
		return idx[n-1], true
	}
	flowFrom := func(k int, tid string, at time.Duration, cat string) {
		*flow++
		id := strconv.Itoa(*flow)
		ps := spans[k]
		src := strconv.Itoa(p.tracks[p.ops[k].tl])
		j.event(`"ph":"s","name":` + q(cat) + `,"cat":"flow","id":` + id + `,"pid":` + pid + `,"tid":` + src + `,"ts":` + us(ps.start+(ps.end-ps.start)/2))
		j.event(`"ph":"f","bp":"e","name":` + q(cat) + `,"cat":"flow","id":` + id + `,"pid":` + pid + `,"tid":` + tid + `,"ts":` + us(at))
	}
	for i, o := range p.ops {
		// The op's own tickets only: those before it on its timeline
		// belong to other ops (device waits' barrier packets and stream
		// commands, another task's ops on a shared queue).
		from := o.ticket - min(o.tickets, o.ticket)
		host := strconv.Itoa(o.host)
		tid := strconv.Itoa(p.tracks[o.tl])
		f := syncstate.Fence{TL: o.tl, Ticket: o.ticket}
		args := `"args":{"kind":` + q(o.kind.String()) + `,"lane":` + q(o.lane.String()) + `,"fence":` + q(f.String()) +
			`,"skipped_waits":` + strconv.Itoa(o.skipped)
		waited := ""
		for n, dw := range o.devWaits {
			if n > 0 {
				waited += ", "
			}
			waited += dw.String()
		}
		if waited != "" {
			args += `,"device_waits":` + q(waited)
		}
		args += "}"
		j.event(`"ph":"X","name":` + q(o.name) + `,"cat":"submit","pid":` + pid + `,"tid":` + host + `,"ts":` + us(o.begin) +
			`,"dur":` + us(max(o.end-o.begin, minSlice)) + `,` + args)
		s := spans[i]
		j.event(`"ph":"X","name":` + q(o.name) + `,"cat":"op","pid":` + pid + `,"tid":` + tid + `,"ts":` + us(s.start) +
			`,"dur":` + us(s.end-s.start) + `,` + args)
		for _, dw := range o.devWaits {
			if k, ok := producer(dw); ok {
				flowFrom(k, tid, s.start+(s.end-s.start)/2, "device wait")
			}
		}
		if g, ok := segmentSpan(p.gpu[o.tl], from, o.ticket); ok {
			// The device's own times, on the timeline's GPU track, with
			// an arrow from the op's submission (where it went to the
			// driver) to them.
			gtid := strconv.Itoa(p.gpuTracks[o.tl])
			end := max(g.end, g.start+minSlice)
			j.event(`"ph":"X","name":` + q(o.name) + `,"cat":"gpu","pid":` + pid + `,"tid":` + gtid + `,"ts":` + us(g.start) +
				`,"dur":` + us(end-g.start) + `,"args":{"kind":` + q(o.kind.String()) + `,"fence":` + q(f.String()) + `}`)
			*flow++
			id := strconv.Itoa(*flow)
			// Just after it went to the driver: a throttle wait may end
			// at that very instant, and the arrow starts at the op.
			from := min(max(o.issued+minSlice/2, o.begin), o.begin+max(o.end-o.begin, minSlice))
			j.event(`"ph":"s","name":"gpu","cat":"flow","id":` + id + `,"pid":` + pid + `,"tid":` + host + `,"ts":` + us(from))
			j.event(`"ph":"f","bp":"e","name":"gpu","cat":"flow","id":` + id + `,"pid":` + pid + `,"tid":` + gtid + `,"ts":` + us(g.start+(end-g.start)/2))
		}
	}
	for _, w := range p.waits {
		host := w.host
		if host < 0 {
			host = hostTrack
		}
		end := w.end
		if !w.ended {
			end = final
		}
		end = max(end, w.begin+minSlice)
		mid := w.begin + (end-w.begin)/2
		k, ok := producer(w.f)
		prod := ""
		if ok {
			prod = `,"producer":` + q(syncstate.Fence{TL: p.ops[k].tl, Ticket: p.ops[k].ticket}.String())
		}
		j.event(`"ph":"X","name":` + q("host wait ("+w.reason.String()+")") + `,"cat":"host-wait","pid":` + pid + `,"tid":` + strconv.Itoa(host) +
			`,"ts":` + us(w.begin) + `,"dur":` + us(end-w.begin) + `,"args":{"reason":` + q(w.reason.String()) +
			`,"op":` + q(w.op) + `,"fence":` + q(w.f.String()) + prod + `,"failed":` + strconv.FormatBool(w.err) + `}`)
		if ok {
			flowFrom(k, strconv.Itoa(host), mid, "host wait")
		}
	}
	// Callbacks run on goroutines of their own, so they have a track of
	// their own (slices of one track must nest).
	for _, c := range p.callbacks {
		end := max(c.end, c.begin+minSlice)
		j.event(`"ph":"X","name":` + q(c.name) + `,"cat":"callback","pid":` + pid + `,"tid":` + strconv.Itoa(callbackTrack) +
			`,"ts":` + us(c.begin) + `,"dur":` + us(end-c.begin) + `,"args":{"fence":` + q(c.f.String()) + `}`)
		if k, ok := producer(c.f); ok {
			flowFrom(k, strconv.Itoa(callbackTrack), c.begin+(end-c.begin)/2, "callback")
		}
	}
}

// minSlice is the shortest slice drawn: long enough that a flow bound to
// its middle is inside it and not on the boundary with its neighbour.
const minSlice = 2 * time.Nanosecond

// traceName is a device's process name in a trace.
func traceName(o Options, all bool, index int, backend string) string {
	if o.TraceName != "" {
		if !all {
			return o.TraceName
		}
		return fmt.Sprintf("%s gpu%d", o.TraceName, index)
	}
	return fmt.Sprintf("gpu%d %v (%s)", index, o.Policy, backend)
}

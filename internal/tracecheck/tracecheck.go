// Package tracecheck reads the trace-event JSON that rocsync's Trace
// writes and checks it against the rules of the Chrome trace-event format
// that ui.perfetto.dev and chrome://tracing rely on, so that tests can
// compare what a trace shows with the counters of the run it recorded.
package tracecheck

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Event is one trace event, with the fields rocsync writes.
type Event struct {
	Ph   string          `json:"ph"`
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	PID  *int            `json:"pid"`
	TID  *int            `json:"tid"`
	TS   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	ID   *int            `json:"id"`
	BP   string          `json:"bp"`
	Args json.RawMessage `json:"args"`
}

// Arg returns a string argument of the event ("" if absent).
func (e Event) Arg(key string) string {
	var m map[string]any
	if json.Unmarshal(e.Args, &m) != nil {
		return ""
	}
	switch v := m[key].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// Track is one thread of one process.
type Track struct{ PID, TID int }

// Flow is a flow arrow: from the slice enclosing its start to the slice
// enclosing its end.
type Flow struct {
	Name     string
	From, To Track
	// FromSlice and ToSlice are the slices the arrow binds to.
	FromSlice, ToSlice Event
}

// Trace is a parsed trace.
type Trace struct {
	Events    []Event
	Processes map[int]string   // process names
	Tracks    map[Track]string // thread names
	Flows     []Flow
}

// Parse reads a trace in the {"traceEvents": [...]} form and validates it:
// every event has a known phase, a pid and tid; slices have a name, a
// timestamp and a non-negative duration; metadata names its process or
// thread; every flow has one start and one end with the same id and
// category, each inside a slice on its track (the end binding to its
// enclosing slice, "bp":"e"); and every track that holds an event is
// named.
func Parse(data []byte) (*Trace, error) {
	var doc struct {
		TraceEvents []Event `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("tracecheck: not trace-event JSON: %w", err)
	}
	t := &Trace{Events: doc.TraceEvents, Processes: map[int]string{}, Tracks: map[Track]string{}}
	slices := map[Track][]Event{}
	type flowEnd struct {
		ev    Event
		track Track
	}
	starts, ends := map[int]flowEnd{}, map[int]flowEnd{}
	for i, e := range t.Events {
		if e.PID == nil || e.TID == nil {
			return nil, fmt.Errorf("tracecheck: event %d (%s %q) has no pid or tid", i, e.Ph, e.Name)
		}
		tr := Track{*e.PID, *e.TID}
		switch e.Ph {
		case "M":
			name := e.Arg("name")
			switch e.Name {
			case "process_name":
				if name == "" {
					return nil, fmt.Errorf("tracecheck: event %d: process_name without a name", i)
				}
				t.Processes[tr.PID] = name
			case "thread_name":
				if name == "" {
					return nil, fmt.Errorf("tracecheck: event %d: thread_name without a name", i)
				}
				t.Tracks[tr] = name
			case "thread_sort_index", "process_sort_index":
			default:
				return nil, fmt.Errorf("tracecheck: event %d: unknown metadata %q", i, e.Name)
			}
		case "X":
			if e.Name == "" || e.TS == nil || e.Dur == nil || *e.TS < 0 || *e.Dur < 0 {
				return nil, fmt.Errorf("tracecheck: event %d: a slice needs a name, ts >= 0 and dur >= 0: %+v", i, e)
			}
			slices[tr] = append(slices[tr], e)
		case "s", "f":
			if e.ID == nil || e.TS == nil || e.Cat == "" {
				return nil, fmt.Errorf("tracecheck: event %d: a flow event needs an id, a ts and a cat", i)
			}
			m := starts
			if e.Ph == "f" {
				m = ends
				if e.BP != "e" {
					return nil, fmt.Errorf("tracecheck: event %d: flow end without \"bp\":\"e\"", i)
				}
			}
			if _, dup := m[*e.ID]; dup {
				return nil, fmt.Errorf("tracecheck: flow id %d has two %q events", *e.ID, e.Ph)
			}
			m[*e.ID] = flowEnd{e, tr}
		default:
			return nil, fmt.Errorf("tracecheck: event %d: unknown phase %q", i, e.Ph)
		}
	}
	for tr, ss := range slices {
		if _, ok := t.Tracks[tr]; !ok {
			return nil, fmt.Errorf("tracecheck: track %v holds slices but has no name", tr)
		}
		if err := nested(ss); err != nil {
			return nil, fmt.Errorf("tracecheck: track %q: %w", t.Tracks[tr], err)
		}
		if _, ok := t.Processes[tr.PID]; !ok {
			return nil, fmt.Errorf("tracecheck: process %d has no name", tr.PID)
		}
	}
	// A flow binds to the innermost slice enclosing its timestamp (the
	// deepest one, as Perfetto nests slices of one track).
	enclosing := func(tr Track, ts float64) (Event, bool) {
		var best Event
		found := false
		for _, s := range slices[tr] {
			if *s.TS <= ts && ts <= *s.TS+*s.Dur && (!found || *s.Dur < *best.Dur) {
				best, found = s, true
			}
		}
		return best, found
	}
	ids := make([]int, 0, len(starts))
	for id := range starts {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		s := starts[id]
		f, ok := ends[id]
		if !ok {
			return nil, fmt.Errorf("tracecheck: flow %d has no end", id)
		}
		if s.ev.Cat != f.ev.Cat {
			return nil, fmt.Errorf("tracecheck: flow %d: categories %q and %q differ", id, s.ev.Cat, f.ev.Cat)
		}
		from, ok1 := enclosing(s.track, *s.ev.TS)
		to, ok2 := enclosing(f.track, *f.ev.TS)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("tracecheck: flow %d (%q) does not start and end inside slices", id, s.ev.Name)
		}
		t.Flows = append(t.Flows, Flow{Name: s.ev.Name, From: s.track, To: f.track, FromSlice: from, ToSlice: to})
		delete(ends, id)
	}
	if len(ends) != 0 {
		return nil, fmt.Errorf("tracecheck: %d flow ends without a start", len(ends))
	}
	return t, nil
}

// nested checks that the slices of one track nest: each one either
// inside another or apart from it, as Perfetto draws a track's slices as
// a stack (slices that overlap only in part are import errors there).
// Times are compared in whole nanoseconds, the precision rocsync writes
// (µs with three decimals), so that float rounding does not make
// adjacent slices overlap.
func nested(ss []Event) error {
	type span struct {
		start, end int64
		name       string
	}
	ns := func(us float64) int64 { return int64(math.Round(us * 1000)) }
	sp := make([]span, len(ss))
	for i, s := range ss {
		sp[i] = span{ns(*s.TS), ns(*s.TS) + ns(*s.Dur), s.Name}
	}
	sort.SliceStable(sp, func(i, j int) bool {
		if sp[i].start != sp[j].start {
			return sp[i].start < sp[j].start
		}
		return sp[i].end > sp[j].end
	})
	var stack []span
	for _, s := range sp {
		for len(stack) > 0 && stack[len(stack)-1].end <= s.start {
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 && s.end > stack[n-1].end {
			top := stack[n-1]
			return fmt.Errorf("slice %q [%d, %d] ns overlaps %q [%d, %d] ns in part", s.name, s.start, s.end, top.name, top.start, top.end)
		}
		stack = append(stack, s)
	}
	return nil
}

// ProcessByName returns the pid of the process named name.
func (t *Trace) ProcessByName(name string) (int, bool) {
	for pid, n := range t.Processes {
		if n == name {
			return pid, true
		}
	}
	return 0, false
}

// TrackNames returns the names of pid's tracks, sorted.
func (t *Trace) TrackNames(pid int) []string {
	var out []string
	for tr, n := range t.Tracks {
		if tr.PID == pid {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// IsHost reports whether a track is a host track.
func (t *Trace) IsHost(tr Track) bool { return strings.HasPrefix(t.Tracks[tr], "host") }

// Slices returns pid's slices of category cat.
func (t *Trace) Slices(pid int, cat string) []Event {
	var out []Event
	for _, e := range t.Events {
		if e.Ph == "X" && *e.PID == pid && e.Cat == cat {
			out = append(out, e)
		}
	}
	return out
}

// Track returns an event's track.
func (e Event) Track() Track { return Track{*e.PID, *e.TID} }

// Counts are a run's counters, as rocsync.Stats has them (host waits by
// reason name: "boundary", "read-back", ...).
type Counts struct {
	Dispatches  uint64
	HostWaits   map[string]uint64
	DeviceWaits uint64
	// GPUSpans is how many ops have device timestamps (slices of category
	// "gpu" on the "<timeline> (GPU)" tracks).
	GPUSpans uint64
	// ClockSkew (µs) is how far a device timestamp may fall before the
	// host time it follows: the device clock's tick and the error of
	// mapping it to the host's clock.
	ClockSkew float64
}

// GPUSuffix ends the name of a timeline's track of device timestamps.
const GPUSuffix = " (GPU)"

// Check compares what the process named process shows with c: a slice
// per op on the track of its queue or stream (named by its fence) and one
// on a host track; a host-wait slice per host wait of each reason; a
// flow from the producing op to every device wait (to the op that waited,
// which lists the fence) and host wait (to the wait's slice) — except a
// host wait whose fence names a packet rocsync queued for itself before
// any op of its timeline, which has no producer and says so; and no
// track but host tracks and timelines that ran an op.
func (t *Trace) Check(process string, c Counts) error {
	pid, ok := t.ProcessByName(process)
	if !ok {
		return fmt.Errorf("tracecheck: no process %q in %v", process, t.Processes)
	}
	ops := t.Slices(pid, "op")
	if n := uint64(len(ops)); n != c.Dispatches {
		return fmt.Errorf("tracecheck: %d op slices on device tracks, %d dispatches", n, c.Dispatches)
	}
	if n := uint64(len(t.Slices(pid, "submit"))); n != c.Dispatches {
		return fmt.Errorf("tracecheck: %d op slices on host tracks, %d dispatches", n, c.Dispatches)
	}
	used := map[string]bool{}
	first := map[string]uint64{} // the first op's ticket per timeline
	for _, o := range ops {
		track := t.Tracks[o.Track()]
		if t.IsHost(o.Track()) {
			return fmt.Errorf("tracecheck: op %q on a host track", o.Name)
		}
		tl, ticket, ok := splitFence(o.Arg("fence"))
		if !ok || tl != track {
			return fmt.Errorf("tracecheck: op at %q drawn on %s", o.Arg("fence"), track)
		}
		if f, ok := first[tl]; !ok || ticket < f {
			first[tl] = ticket
		}
		used[track] = true
	}
	for _, s := range t.Slices(pid, "submit") {
		if !t.IsHost(s.Track()) {
			return fmt.Errorf("tracecheck: submission of %q off the host tracks", s.Name)
		}
	}
	if err := t.checkGPU(pid, c, used); err != nil {
		return err
	}
	hasHost := false
	for _, n := range t.TrackNames(pid) {
		hasHost = hasHost || n == "host"
		if !used[n] && !strings.HasPrefix(n, "host") {
			return fmt.Errorf("tracecheck: track %s holds no op", n)
		}
	}
	if !hasHost {
		return fmt.Errorf("tracecheck: no host track")
	}
	byReason := map[string]uint64{}
	var noProducer uint64
	for _, w := range t.Slices(pid, "host-wait") {
		if !t.IsHost(w.Track()) {
			return fmt.Errorf("tracecheck: host wait off the host tracks")
		}
		byReason[w.Arg("reason")]++
		if w.Arg("producer") == "" {
			noProducer++
			tl, ticket, _ := splitFence(w.Arg("fence"))
			if f, ok := first[tl]; ok && f <= ticket {
				return fmt.Errorf("tracecheck: the host wait for %s has no producer, but the op at %s#%d precedes it", w.Arg("fence"), tl, f)
			}
		}
	}
	for r, n := range c.HostWaits {
		if byReason[r] != n {
			return fmt.Errorf("tracecheck: %d %s host-wait slices, %d counted", byReason[r], r, n)
		}
		delete(byReason, r)
	}
	for r, n := range byReason {
		if n != 0 {
			return fmt.Errorf("tracecheck: %d %s host-wait slices, none counted", n, r)
		}
	}
	var device, host, total, gpuFlows uint64
	for _, n := range c.HostWaits {
		total += n
	}
	for _, f := range t.Flows {
		if f.From.PID != pid || f.To.PID != pid {
			continue
		}
		if f.Name == "gpu" {
			if f.FromSlice.Cat != "submit" || f.ToSlice.Cat != "gpu" || f.FromSlice.Arg("fence") != f.ToSlice.Arg("fence") {
				return fmt.Errorf("tracecheck: gpu flow from %q (%s) to %q (%s)", f.FromSlice.Name, f.FromSlice.Arg("fence"), f.ToSlice.Name, f.ToSlice.Arg("fence"))
			}
			gpuFlows++
			continue
		}
		if t.IsHost(f.From) || f.FromSlice.Cat != "op" {
			return fmt.Errorf("tracecheck: flow %q does not start at an op", f.Name)
		}
		fence := f.FromSlice.Arg("fence")
		switch f.Name {
		case "device wait":
			device++
			waited := false
			for _, w := range strings.Split(f.ToSlice.Arg("device_waits"), ", ") {
				waited = waited || covers(w, fence)
			}
			if t.IsHost(f.To) || f.From == f.To || !waited {
				return fmt.Errorf("tracecheck: device-wait flow from %s to the op at %s (waited for %q)", fence, f.ToSlice.Arg("fence"), f.ToSlice.Arg("device_waits"))
			}
		case "host wait":
			host++
			if !t.IsHost(f.To) || f.ToSlice.Cat != "host-wait" || !covers(f.ToSlice.Arg("fence"), fence) || f.ToSlice.Arg("producer") != fence {
				return fmt.Errorf("tracecheck: host-wait flow from %s to a wait for %s", fence, f.ToSlice.Arg("fence"))
			}
		case "callback":
			if !t.IsHost(f.To) || f.ToSlice.Cat != "callback" || !covers(f.ToSlice.Arg("fence"), fence) {
				return fmt.Errorf("tracecheck: callback flow from %s to %q", fence, f.ToSlice.Name)
			}
		default:
			return fmt.Errorf("tracecheck: unknown flow %q", f.Name)
		}
	}
	if gpuFlows != c.GPUSpans {
		return fmt.Errorf("tracecheck: %d gpu flows, %d ops with device timestamps", gpuFlows, c.GPUSpans)
	}
	if device != c.DeviceWaits {
		return fmt.Errorf("tracecheck: %d device-wait flows, %d device waits", device, c.DeviceWaits)
	}
	if host+noProducer != total {
		return fmt.Errorf("tracecheck: %d host-wait flows and %d waits without a producer, %d host waits", host, noProducer, total)
	}
	return nil
}

// checkGPU checks the device-timestamp slices: c.GPUSpans of them, each
// on the GPU track of its op's timeline, no earlier than its op's
// submission began, and none overlapping another on its track (queues and
// streams run their ops in order). It marks the GPU tracks used.
func (t *Trace) checkGPU(pid int, c Counts, used map[string]bool) error {
	gpu := t.Slices(pid, "gpu")
	if n := uint64(len(gpu)); n != c.GPUSpans {
		return fmt.Errorf("tracecheck: %d gpu slices, %d ops with device timestamps", n, c.GPUSpans)
	}
	submitted := map[string]float64{}
	for _, s := range t.Slices(pid, "submit") {
		submitted[s.Arg("fence")] = *s.TS
	}
	skew := c.ClockSkew
	byTrack := map[Track][]Event{}
	for _, g := range gpu {
		track := t.Tracks[g.Track()]
		fence := g.Arg("fence")
		tl, _, ok := splitFence(fence)
		if !ok || track != tl+GPUSuffix {
			return fmt.Errorf("tracecheck: gpu slice at %q drawn on %s", fence, track)
		}
		sub, ok := submitted[fence]
		if !ok {
			return fmt.Errorf("tracecheck: gpu slice at %s has no submission", fence)
		}
		if *g.TS+skew < sub {
			return fmt.Errorf("tracecheck: the op at %s starts on the GPU at %.3f µs, before its submission began at %.3f", fence, *g.TS, sub)
		}
		used[track] = true
		byTrack[g.Track()] = append(byTrack[g.Track()], g)
	}
	for tr, gs := range byTrack {
		sort.Slice(gs, func(i, j int) bool { return *gs[i].TS < *gs[j].TS })
		for i := 1; i < len(gs); i++ {
			if end := *gs[i-1].TS + *gs[i-1].Dur; *gs[i].TS+skew < end {
				return fmt.Errorf("tracecheck: on %s the op at %s (%.3f µs) starts before the op at %s ends (%.3f)", t.Tracks[tr],
					gs[i].Arg("fence"), *gs[i].TS, gs[i-1].Arg("fence"), end)
			}
		}
	}
	return nil
}

// splitFence splits "gpu0/hsa-q0#12".
func splitFence(f string) (tl string, ticket uint64, ok bool) {
	i := strings.LastIndexByte(f, '#')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(f[i+1:], 10, 64)
	return f[:i], n, err == nil
}

// covers reports whether waiting for fence w waits for the op at fence op:
// the same timeline, and w's ticket at or after op's (a fence may name a
// barrier or marker packet rocsync queued after the op).
func covers(w, op string) bool {
	wt, wn, ok1 := splitFence(w)
	ot, on, ok2 := splitFence(op)
	return ok1 && ok2 && wt == ot && on <= wn
}

// Package tracecheck reads the trace-event JSON that rocsync's Trace
// writes and checks it against the rules of the Chrome trace-event format
// that ui.perfetto.dev and chrome://tracing rely on, so that tests can
// compare what a trace shows with the counters of the run it recorded.
package tracecheck

import (
	"encoding/json"
	"fmt"
	"sort"
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
	for tr := range slices {
		if _, ok := t.Tracks[tr]; !ok {
			return nil, fmt.Errorf("tracecheck: track %v holds slices but has no name", tr)
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

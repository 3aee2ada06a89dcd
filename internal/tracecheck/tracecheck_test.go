package tracecheck

import (
	"strings"
	"testing"
)

// A small trace as rocsync writes it: one op on a queue, a boundary host
// wait for it on the host track inside the next op's submission, and that
// op on a stream.
const good = `{"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"p"}},
{"ph":"M","name":"thread_name","pid":1,"tid":0,"args":{"name":"host"}},
{"ph":"M","name":"thread_name","pid":1,"tid":65536,"args":{"name":"gpu0/hsa-q0"}},
{"ph":"M","name":"thread_name","pid":1,"tid":65537,"args":{"name":"gpu0/hip-s1"}},
{"ph":"X","name":"Mul","cat":"submit","pid":1,"tid":0,"ts":0,"dur":1,"args":{"fence":"gpu0/hsa-q0#1"}},
{"ph":"X","name":"Mul","cat":"op","pid":1,"tid":65536,"ts":1,"dur":4,"args":{"fence":"gpu0/hsa-q0#1"}},
{"ph":"X","name":"MatMul","cat":"submit","pid":1,"tid":0,"ts":2,"dur":6,"args":{"fence":"gpu0/hip-s1#1"}},
{"ph":"X","name":"MatMul","cat":"op","pid":1,"tid":65537,"ts":8,"dur":4,"args":{"fence":"gpu0/hip-s1#1"}},
{"ph":"X","name":"host wait (boundary)","cat":"host-wait","pid":1,"tid":0,"ts":2,"dur":3,"args":{"reason":"boundary","fence":"gpu0/hsa-q0#1","producer":"gpu0/hsa-q0#1"}},
{"ph":"s","name":"host wait","cat":"flow","id":1,"pid":1,"tid":65536,"ts":3},
{"ph":"f","bp":"e","name":"host wait","cat":"flow","id":1,"pid":1,"tid":0,"ts":3.5}
]}`

var goodCounts = Counts{Dispatches: 2, HostWaits: map[string]uint64{"boundary": 1}}

func TestGoodTracePasses(t *testing.T) {
	tr, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Check("p", goodCounts); err != nil {
		t.Fatal(err)
	}
	if len(tr.Flows) != 1 || tr.Flows[0].ToSlice.Cat != "host-wait" {
		t.Fatalf("the flow binds to %+v, want the host wait (the innermost slice)", tr.Flows)
	}
}

// Each rule fires: the format's, and the comparison with the counters.
func TestCheckerFires(t *testing.T) {
	for _, c := range []struct {
		name, old, new string
		counts         Counts
		want           string
	}{
		{"phase", `"ph":"X","name":"Mul","cat":"op"`, `"ph":"B","name":"Mul","cat":"op"`, goodCounts, "unknown phase"},
		{"negative duration", `"ts":1,"dur":4`, `"ts":1,"dur":-4`, goodCounts, "dur >= 0"},
		{"unnamed track", `{"ph":"M","name":"thread_name","pid":1,"tid":65537,"args":{"name":"gpu0/hip-s1"}},`, ``, goodCounts, "has no name"},
		{"flow end unbound", `"bp":"e",`, ``, goodCounts, "bp"},
		{"flow outside slices", `"tid":0,"ts":3.5}`, `"tid":0,"ts":30}`, goodCounts, "inside slices"},
		{"flow without end", `{"ph":"f","bp":"e","name":"host wait","cat":"flow","id":1,"pid":1,"tid":0,"ts":3.5}`, `{"ph":"M","name":"thread_sort_index","pid":1,"tid":0,"args":{"sort_index":0}}`, goodCounts, "no end"},
		{"dispatches", ``, ``, Counts{Dispatches: 3, HostWaits: map[string]uint64{"boundary": 1}}, "dispatches"},
		{"host waits", ``, ``, Counts{Dispatches: 2, HostWaits: map[string]uint64{"boundary": 2}}, "boundary host-wait slices"},
		{"unexpected reason", ``, ``, Counts{Dispatches: 2, HostWaits: map[string]uint64{"read-back": 1}}, "host-wait slices"},
		{"device waits", ``, ``, Counts{Dispatches: 2, DeviceWaits: 1, HostWaits: map[string]uint64{"boundary": 1}}, "device-wait flows"},
		{"op on the wrong track", `"cat":"op","pid":1,"tid":65537,"ts":8,"dur":4,"args":{"fence":"gpu0/hip-s1#1"}`, `"cat":"op","pid":1,"tid":65537,"ts":8,"dur":4,"args":{"fence":"gpu0/hsa-q0#2"}`, goodCounts, "drawn on"},
		{"flow from the wrong op", `"producer":"gpu0/hsa-q0#1"`, `"producer":"gpu0/hsa-q0#0"`, goodCounts, "host-wait flow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := strings.Replace(good, c.old, c.new, 1)
			tr, err := Parse([]byte(data))
			if err == nil {
				err = tr.Check("p", c.counts)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error about %q", err, c.want)
			}
		})
	}
}

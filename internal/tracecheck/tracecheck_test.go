package tracecheck

import (
	"strings"
	"testing"
)

// A small trace as rocsync writes it: one op on a queue, a boundary host
// wait for it on the host track inside the next op's submission, and that
// op on a stream, then another op on the queue; each op's device times on
// its timeline's GPU track, with a flow from its submission.
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
{"ph":"f","bp":"e","name":"host wait","cat":"flow","id":1,"pid":1,"tid":0,"ts":3.5},
{"ph":"X","name":"Add","cat":"submit","pid":1,"tid":0,"ts":9,"dur":1,"args":{"fence":"gpu0/hsa-q0#2"}},
{"ph":"X","name":"Add","cat":"op","pid":1,"tid":65536,"ts":10,"dur":2,"args":{"fence":"gpu0/hsa-q0#2"}},
{"ph":"M","name":"thread_name","pid":1,"tid":65538,"args":{"name":"gpu0/hsa-q0 (GPU)"}},
{"ph":"M","name":"thread_name","pid":1,"tid":65539,"args":{"name":"gpu0/hip-s1 (GPU)"}},
{"ph":"X","name":"Mul","cat":"gpu","pid":1,"tid":65538,"ts":0.5,"dur":2,"args":{"fence":"gpu0/hsa-q0#1"}},
{"ph":"X","name":"MatMul","cat":"gpu","pid":1,"tid":65539,"ts":8,"dur":3,"args":{"fence":"gpu0/hip-s1#1"}},
{"ph":"X","name":"Add","cat":"gpu","pid":1,"tid":65538,"ts":10.5,"dur":1,"args":{"fence":"gpu0/hsa-q0#2"}},
{"ph":"s","name":"gpu","cat":"flow","id":2,"pid":1,"tid":0,"ts":0.7},
{"ph":"f","bp":"e","name":"gpu","cat":"flow","id":2,"pid":1,"tid":65538,"ts":1.5},
{"ph":"s","name":"gpu","cat":"flow","id":3,"pid":1,"tid":0,"ts":6},
{"ph":"f","bp":"e","name":"gpu","cat":"flow","id":3,"pid":1,"tid":65539,"ts":9.5},
{"ph":"s","name":"gpu","cat":"flow","id":4,"pid":1,"tid":0,"ts":9.5},
{"ph":"f","bp":"e","name":"gpu","cat":"flow","id":4,"pid":1,"tid":65538,"ts":11}
]}`

var goodCounts = Counts{Dispatches: 3, HostWaits: map[string]uint64{"boundary": 1}, GPUSpans: 3}

func TestGoodTracePasses(t *testing.T) {
	tr, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Check("p", goodCounts); err != nil {
		t.Fatal(err)
	}
	if len(tr.Flows) != 4 || tr.Flows[0].ToSlice.Cat != "host-wait" {
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
		{"slices overlap in part", `"cat":"submit","pid":1,"tid":0,"ts":9,"dur":1`, `"cat":"submit","pid":1,"tid":0,"ts":7.5,"dur":1`, goodCounts, "overlaps"},
		{"unnamed track", `{"ph":"M","name":"thread_name","pid":1,"tid":65537,"args":{"name":"gpu0/hip-s1"}},`, ``, goodCounts, "has no name"},
		{"flow end unbound", `"bp":"e",`, ``, goodCounts, "bp"},
		{"flow outside slices", `"tid":0,"ts":3.5}`, `"tid":0,"ts":30}`, goodCounts, "inside slices"},
		{"flow without end", `{"ph":"f","bp":"e","name":"host wait","cat":"flow","id":1,"pid":1,"tid":0,"ts":3.5}`, `{"ph":"M","name":"thread_sort_index","pid":1,"tid":0,"args":{"sort_index":0}}`, goodCounts, "no end"},
		{"dispatches", ``, ``, Counts{Dispatches: 4, HostWaits: map[string]uint64{"boundary": 1}, GPUSpans: 3}, "dispatches"},
		{"host waits", ``, ``, Counts{Dispatches: 3, HostWaits: map[string]uint64{"boundary": 2}, GPUSpans: 3}, "boundary host-wait slices"},
		{"unexpected reason", ``, ``, Counts{Dispatches: 3, HostWaits: map[string]uint64{"read-back": 1}, GPUSpans: 3}, "host-wait slices"},
		{"device waits", ``, ``, Counts{Dispatches: 3, DeviceWaits: 1, HostWaits: map[string]uint64{"boundary": 1}, GPUSpans: 3}, "device-wait flows"},
		{"gpu spans", ``, ``, Counts{Dispatches: 3, HostWaits: map[string]uint64{"boundary": 1}, GPUSpans: 2}, "gpu slices"},
		{"gpu before its submission", `"cat":"gpu","pid":1,"tid":65539,"ts":8,"dur":3`, `"cat":"gpu","pid":1,"tid":65539,"ts":1.5,"dur":9`, goodCounts, "before its submission"},
		{"gpu spans overlap", `"cat":"gpu","pid":1,"tid":65538,"ts":0.5,"dur":2`, `"cat":"gpu","pid":1,"tid":65538,"ts":0.5,"dur":11.5`, goodCounts, "starts before the op"},
		{"gpu on the wrong track", `"cat":"gpu","pid":1,"tid":65539,"ts":8,"dur":3,"args":{"fence":"gpu0/hip-s1#1"}`, `"cat":"gpu","pid":1,"tid":65539,"ts":8,"dur":3,"args":{"fence":"gpu0/hsa-q0#3"}`, goodCounts, "drawn on"},
		{"gpu flow from another op", `{"ph":"s","name":"gpu","cat":"flow","id":3,"pid":1,"tid":0,"ts":6}`, `{"ph":"s","name":"gpu","cat":"flow","id":3,"pid":1,"tid":0,"ts":0.8}`, goodCounts, "gpu flow"},
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

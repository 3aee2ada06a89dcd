// Command traceview turns a trace that rocsync wrote (Options.Trace,
// ROCSYNC_TRACE, bench -trace) into one self-contained HTML page that
// draws it without a network: each process (device, or program/policy
// in bench) on its own time axis, a row per track (host tracks first,
// then each queue or stream), slices coloured by kind (blue: op
// submissions on the host, green: kernels on HSA queues, orange: library
// calls and copies on HIP streams, red: host waits) and the flows from
// producers to waits as arrows. It is for looking at a trace where
// ui.perfetto.dev cannot be reached; Perfetto opens the same JSON.
//
//	go run ./bench/traceview trace.json > trace.html
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

const usage = "usage: traceview trace.json > trace.html"

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-h" || os.Args[1] == "-help" || os.Args[1] == "--help") {
		fmt.Println(usage)
		return
	}
	if len(os.Args) != 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	page, err := render(data)
	if err != nil {
		fmt.Fprintf(os.Stderr, "traceview: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if _, err := os.Stdout.WriteString(page); err != nil {
		os.Exit(1)
	}
}

// render is the page for a trace: a JSON array of events, or an object
// whose traceEvents is one (Chrome's trace event format).
func render(data []byte) (string, error) {
	var shape struct {
		TraceEvents []json.RawMessage `json:"traceEvents"`
	}
	var events []json.RawMessage
	switch {
	case !json.Valid(data):
		return "", errors.New("not JSON")
	case json.Unmarshal(data, &events) == nil && events != nil:
	case json.Unmarshal(data, &shape) == nil && shape.TraceEvents != nil:
	default:
		return "", errors.New("not a trace: want an array of events or an object with traceEvents")
	}
	// The JSON goes into a script element, where "</script" would end it
	// and "<!--" change how the HTML parser reads on: a '<' can only be in
	// a JSON string, where \u003c is the same character.
	embedded := bytes.ReplaceAll(data, []byte("<"), []byte(`\u003c`))
	return strings.Replace(pageHTML, "/*TRACE*/null", string(embedded), 1), nil
}

const pageHTML = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>rocsync trace</title>
<style>body{margin:0;font:12px sans-serif;background:#fff}canvas{display:block}</style></head>
<body><canvas id="c"></canvas>
<script>
const trace = /*TRACE*/null;
const ev = trace.traceEvents || trace;
const procs = new Map();
function proc(pid) {
  if (!procs.has(pid)) procs.set(pid, {pid, name: "pid " + pid, tracks: new Map(), t0: Infinity, t1: -Infinity});
  return procs.get(pid);
}
function track(p, tid) {
  if (!p.tracks.has(tid)) p.tracks.set(tid, {tid, name: "tid " + tid, sort: tid, slices: []});
  return p.tracks.get(tid);
}
const flows = new Map();
for (const e of ev) {
  const p = proc(e.pid);
  if (e.ph === "M" && e.name === "process_name") p.name = e.args.name;
  else if (e.ph === "M" && e.name === "thread_name") track(p, e.tid).name = e.args.name;
  else if (e.ph === "M" && e.name === "thread_sort_index") track(p, e.tid).sort = e.args.sort_index;
  else if (e.ph === "X") {
    track(p, e.tid).slices.push(e);
    p.t0 = Math.min(p.t0, e.ts); p.t1 = Math.max(p.t1, e.ts + e.dur);
  } else if (e.ph === "s" || e.ph === "f") {
    if (!flows.has(e.id)) flows.set(e.id, {});
    flows.get(e.id)[e.ph] = e;
  }
}
const W = window.innerWidth, left = 150, right = 20, rowH = 22, gap = 34;
let H = 30;
for (const p of procs.values()) H += gap + rowH * p.tracks.size;
const c = document.getElementById("c");
c.width = W; c.height = H;
const g = c.getContext("2d");
g.fillStyle = "#fff"; g.fillRect(0, 0, W, H);
function colour(e, name) {
  if (e.cat === "host-wait") return "#d62728";
  if (e.cat === "submit") return "#1f77b4";
  if (e.cat === "gpu") return name.includes("hsa-q") ? "#146c14" : "#a65200";
  if (name.includes("hsa-q")) return "#2ca02c";
  return "#ff7f0e";
}
let y = 10;
const rowOf = new Map();
for (const p of procs.values()) {
  const span = Math.max(p.t1 - p.t0, 1e-3);
  const x = ts => left + (ts - p.t0) / span * (W - left - right);
  p.x = x;
  g.fillStyle = "#000"; g.font = "bold 13px sans-serif";
  g.fillText(p.name + "  (" + span.toFixed(1) + " µs)", 6, y + 16);
  y += gap - 8;
  const tracks = [...p.tracks.values()].sort((a, b) => a.sort - b.sort);
  for (const t of tracks) {
    rowOf.set(p.pid + "/" + t.tid, {y, x});
    g.fillStyle = "#f4f4f4"; g.fillRect(left, y, W - left - right, rowH - 2);
    g.fillStyle = "#333"; g.font = "12px sans-serif";
    g.fillText(t.name, 6, y + 15);
    // Nested slices (host waits inside submissions) draw thinner on top.
    t.slices.sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    const stack = [];
    for (const s of t.slices) {
      while (stack.length && stack[stack.length - 1] < s.ts + s.dur - 1e-9 && stack[stack.length - 1] <= s.ts) stack.pop();
      const depth = stack.length;
      stack.push(s.ts + s.dur);
      const x0 = x(s.ts), w = Math.max(x(s.ts + s.dur) - x0, 1);
      const inset = Math.min(depth * 4, 8);
      g.fillStyle = colour(s, t.name);
      g.fillRect(x0, y + inset, w, rowH - 2 - 2 * inset);
      if (w > 40) {
        g.fillStyle = "#fff"; g.font = "10px sans-serif";
        g.save(); g.beginPath(); g.rect(x0, y, w, rowH); g.clip();
        g.fillText(s.name, x0 + 2, y + 14); g.restore();
      }
    }
    y += rowH;
  }
  y += 8;
}
g.lineWidth = 1;
for (const fl of flows.values()) {
  if (!fl.s || !fl.f) continue;
  const a = rowOf.get(fl.s.pid + "/" + fl.s.tid), b = rowOf.get(fl.f.pid + "/" + fl.f.tid);
  if (!a || !b) continue;
  const x1 = a.x(fl.s.ts), y1 = a.y + rowH / 2, x2 = b.x(fl.f.ts), y2 = b.y + rowH / 2;
  g.strokeStyle = fl.s.name === "device wait" ? "#9467bd" : fl.s.name === "gpu" ? "#b8b8b8" : "#444";
  g.beginPath(); g.moveTo(x1, y1); g.lineTo(x2, y2); g.stroke();
  const ang = Math.atan2(y2 - y1, x2 - x1);
  g.beginPath(); g.moveTo(x2, y2);
  g.lineTo(x2 - 7 * Math.cos(ang - 0.4), y2 - 7 * Math.sin(ang - 0.4));
  g.lineTo(x2 - 7 * Math.cos(ang + 0.4), y2 - 7 * Math.sin(ang + 0.4));
  g.closePath(); g.fillStyle = g.strokeStyle; g.fill();
}
g.fillStyle = "#000"; g.font = "11px sans-serif";
g.fillText("blue: op submitted (host)   green: HSA queue   orange: HIP stream   dark: (GPU) device timestamps   red: host wait   arrows: producer -> wait (purple: device wait, grey: submission -> GPU)", left, H - 4);
</script></body></html>
`

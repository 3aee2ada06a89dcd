package emu

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rocsync/rocsync/hip"
)

// Stream capture and hipGraph, with the rules HIP enforces, taken from
// hipamd (rocm-5.2.3, rocm-5.5.x) and clr:
//
//   - while a stream captures, its kernels, rocBLAS gemms, copies and
//     memsets are recorded into the capture's graph instead of run; before
//     HIP 5.3, hipModuleLaunchKernel is not captured (it runs at once and
//     the graph lacks it); stream memory operations are never captured;
//   - an event recorded on a capturing stream is a dependency inside the
//     graph, not a stream command; a stream not capturing that waits for
//     it joins the capture (its later work goes into the same graph);
//     another capture waiting for it is hipErrorStreamCaptureIsolation;
//   - from HIP 5.5, hipStreamSynchronize and hipStreamQuery of a capturing
//     stream, or of any stream while a capture in Global mode is under
//     way, are hipErrorStreamCaptureUnsupported (before, they wait for or
//     query what ran on the stream);
//   - while a capture in Global mode is under way, the calls HIP deems
//     unsafe (hipMalloc, hipFree, hipHostMalloc, synchronous hipMemcpy)
//     are hipErrorStreamCaptureUnsupported (the calling thread's own mode
//     is taken to be Global, HIP's default: the emulator has no threads);
//   - hipStreamBeginCapture of the null stream is
//     hipErrorStreamCaptureUnsupported, of a capturing stream
//     hipErrorIllegalState; hipStreamEndCapture of a stream that did not
//     begin the capture is hipErrorStreamCaptureUnmatched.
//
// hipGraphLaunch submits the graph's work as one stream command, its nodes
// run in capture order with the stream's clock (the hazard checker sees
// each access). Memory freed after the capture is not looked for at
// launch, as HIP does not: a node touching it faults when it runs
// (hipErrorIllegalAddress on the stream). Not modelled: a forked stream
// that never rejoins (hipErrorStreamCaptureUnjoined), ThreadLocal mode's
// per-thread rule, graphs launched into a capturing stream.

// HIPVersionCaptureSyncChecked is the first HIP (5.5) whose
// hipStreamSynchronize and hipStreamQuery refuse a capturing stream.
const HIPVersionCaptureSyncChecked = 50_500_000

// graphState is the emulated HIP's captures and graphs, guarded by HIP.mu.
type graphState struct {
	globalCaptures int // captures under way in Global mode
	graphs         map[hip.Graph]*hgraph
	execs          map[hip.GraphExec]*hgraph
	launches       atomic.Uint64
	captured       atomic.Uint64 // captures ended with a graph
	unavailable    atomic.Bool   // SetGraphsUnavailable
}

// SetGraphsUnavailable makes the emulated HIP behave as a libamdhip64
// without the hipGraph API behind hip.Lib: every graph call fails with
// hip.ErrGraphsUnavailable.
func (h *HIP) SetGraphsUnavailable(v bool) { h.graphs.unavailable.Store(v) }

func (h *HIP) graphsUnavailable(fn string) error {
	if h.graphs.unavailable.Load() {
		return fmt.Errorf("%w: emulated HIP without %s", hip.ErrGraphsUnavailable, fn)
	}
	return nil
}

// hcapture is one capture sequence, begun on origin.
type hcapture struct {
	mu      sync.Mutex
	origin  *hstream
	mode    hip.StreamCaptureMode
	nodes   []cmd
	streams []*hstream // origin and the streams that joined
	events  []*hevent
}

func (cp *hcapture) add(c cmd) {
	cp.mu.Lock()
	cp.nodes = append(cp.nodes, c)
	cp.mu.Unlock()
}

// hgraph is a captured graph, or an instantiated one: its nodes in
// capture order.
type hgraph struct {
	nodes  []cmd
	dev    int                  // the capturing stream's GPU (gemms run there)
	origin *hstream             // the capturing stream (copies and launches run as on it)
	run    func(a *actor) error // an instantiated graph's work, made once
}

func init() {
	for c, n := range map[hip.ErrorCode]string{
		hip.ErrorIllegalState:             "hipErrorIllegalState",
		hip.ErrorStreamCaptureUnsupported: "hipErrorStreamCaptureUnsupported",
		hip.ErrorStreamCaptureInvalidated: "hipErrorStreamCaptureInvalidated",
		hip.ErrorStreamCaptureUnmatched:   "hipErrorStreamCaptureUnmatched",
		hip.ErrorStreamCaptureIsolation:   "hipErrorStreamCaptureIsolation",
		hip.ErrorStreamCaptureImplicit:    "hipErrorStreamCaptureImplicit",
		hip.ErrorCapturedEvent:            "hipErrorCapturedEvent",
	} {
		hipNames[c] = n
	}
}

var _ hip.GraphRuntime = (*HIP)(nil)

// GraphLaunches counts hipGraphLaunch calls that were accepted.
func (h *HIP) GraphLaunches() uint64 { return h.graphs.launches.Load() }

// Captures counts hipStreamEndCapture calls that returned a graph.
func (h *HIP) Captures() uint64 { return h.graphs.captured.Load() }

// LiveGraphs counts graphs and instantiated graphs not destroyed.
func (h *HIP) LiveGraphs() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.graphs.graphs) + len(h.graphs.execs)
}

// captureStream is the stream a capture call names: the null stream and
// unknown handles are hipErrorInvalidValue, as HIP's isValid check says.
func (h *HIP) captureStream(fn string, id hip.Stream) (*hstream, error) {
	s, err := h.stream(fn, id)
	if err != nil {
		return nil, hipErr(fn, hip.ErrorInvalidValue, "unknown stream")
	}
	return s, nil
}

func (h *HIP) StreamBeginCapture(id hip.Stream, mode hip.StreamCaptureMode) error {
	const fn = "hipStreamBeginCapture"
	if err := h.graphsUnavailable("hipStreamBeginCapture"); err != nil {
		return err
	}
	if id == 0 {
		return hipErr(fn, hip.ErrorStreamCaptureUnsupported, "capture cannot begin on the null stream")
	}
	s, err := h.captureStream(fn, id)
	if err != nil {
		return err
	}
	if mode > hip.StreamCaptureModeRelaxed {
		return hipErr(fn, hip.ErrorInvalidValue, fmt.Sprintf("mode %d", mode))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture != nil {
		return hipErr(fn, hip.ErrorIllegalState, "the stream is capturing")
	}
	s.capture = &hcapture{origin: s, mode: mode, streams: []*hstream{s}}
	if mode == hip.StreamCaptureModeGlobal {
		h.graphs.globalCaptures++
	}
	return nil
}

// endCapture ends cp on every stream in it; the caller holds h.mu.
func (h *HIP) endCapture(cp *hcapture) {
	for _, st := range cp.streams {
		st.mu.Lock()
		if st.capture == cp {
			st.capture = nil
		}
		st.mu.Unlock()
	}
	for _, e := range cp.events {
		e.mu.Lock()
		if e.captured == cp {
			e.captured = nil
		}
		e.mu.Unlock()
	}
	if cp.mode == hip.StreamCaptureModeGlobal {
		h.graphs.globalCaptures--
	}
}

func (h *HIP) StreamEndCapture(id hip.Stream) (hip.Graph, error) {
	const fn = "hipStreamEndCapture"
	if err := h.graphsUnavailable("hipStreamEndCapture"); err != nil {
		return 0, err
	}
	if id == 0 {
		return 0, hipErr(fn, hip.ErrorInvalidValue, "null stream")
	}
	s, err := h.captureStream(fn, id)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	cp := s.capture
	s.mu.Unlock()
	if cp == nil || cp.origin != s {
		return 0, hipErr(fn, hip.ErrorStreamCaptureUnmatched, "the capture did not begin on this stream")
	}
	h.endCapture(cp)
	cp.mu.Lock()
	nodes := cp.nodes
	cp.mu.Unlock()
	if h.graphs.graphs == nil {
		h.graphs.graphs = map[hip.Graph]*hgraph{}
		h.graphs.execs = map[hip.GraphExec]*hgraph{}
	}
	g := hip.Graph(h.handle())
	h.graphs.graphs[g] = &hgraph{nodes: nodes, dev: s.dev, origin: s}
	h.graphs.captured.Add(1)
	return g, nil
}

// endCaptureOnDestroy ends the capture a destroyed stream began, as
// hipStreamDestroy does.
func (h *HIP) endCaptureOnDestroy(s *hstream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	cp := s.capture
	s.mu.Unlock()
	if cp != nil && cp.origin == s {
		h.endCapture(cp)
	}
}

func (h *HIP) StreamIsCapturing(id hip.Stream) (hip.StreamCaptureStatus, error) {
	s, err := h.captureStream("hipStreamIsCapturing", id)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture != nil {
		return hip.StreamCaptureStatusActive, nil
	}
	return hip.StreamCaptureStatusNone, nil
}

// captureOngoing is HIP 5.5's check in hipStreamSynchronize and
// hipStreamQuery: the stream captures, or a Global capture is under way
// (every stream not capturing is in Global mode).
func (h *HIP) captureOngoing(fn string, s *hstream) error {
	if h.m.hipVersion() < HIPVersionCaptureSyncChecked {
		return nil
	}
	s.mu.Lock()
	capturing := s.capture != nil
	s.mu.Unlock()
	h.mu.Lock()
	global := h.graphs.globalCaptures > 0
	h.mu.Unlock()
	if capturing || global {
		return hipErr(fn, hip.ErrorStreamCaptureUnsupported, "a stream capture is under way")
	}
	return nil
}

// unsafeDuringCapture is HIP's CHECK_STREAM_CAPTURE_SUPPORTED: the
// "potentially unsafe" calls fail while a Global capture is under way.
func (h *HIP) unsafeDuringCapture(fn string) error {
	h.mu.Lock()
	global := h.graphs.globalCaptures > 0
	h.mu.Unlock()
	if global {
		return hipErr(fn, hip.ErrorStreamCaptureUnsupported, "a stream capture in hipStreamCaptureModeGlobal is under way")
	}
	return nil
}

// captureEventRecord makes a record on a capturing stream a dependency of
// the capture; it reports whether it did (nothing to enqueue).
func (h *HIP) captureEventRecord(e *hevent, s *hstream) bool {
	s.mu.Lock()
	cp := s.capture
	s.mu.Unlock()
	if cp == nil {
		return false
	}
	e.mu.Lock()
	e.captured = cp
	e.mu.Unlock()
	cp.mu.Lock()
	cp.events = append(cp.events, e)
	cp.mu.Unlock()
	return true
}

// captureStreamWait handles a wait for an event recorded during a capture:
// within the capture it is already ordered (the emulated graph runs in
// capture order); a stream not capturing joins the capture. done reports
// that nothing is to be enqueued.
func (h *HIP) captureStreamWait(e *hevent, s *hstream) (done bool, err error) {
	e.mu.Lock()
	cp := e.captured
	e.mu.Unlock()
	if cp == nil {
		return false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.capture {
	case cp:
		return true, nil
	case nil:
		s.capture = cp
		cp.mu.Lock()
		cp.streams = append(cp.streams, s)
		cp.mu.Unlock()
		return true, nil
	}
	return true, hipErr("hipStreamWaitEvent", hip.ErrorStreamCaptureIsolation, "the event was recorded in another capture")
}

// GraphInstantiate is hipGraphInstantiate: the executable graph holds
// the nodes of g as they are now.
func (h *HIP) GraphInstantiate(g hip.Graph) (hip.GraphExec, error) {
	if err := h.graphsUnavailable("hipGraphInstantiate"); err != nil {
		return 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	gr := h.graphs.graphs[g]
	if gr == nil {
		return 0, hipErr("hipGraphInstantiate", hip.ErrorInvalidValue, "unknown graph")
	}
	e := hip.GraphExec(h.handle())
	x := &hgraph{nodes: append([]cmd(nil), gr.nodes...), dev: gr.dev, origin: gr.origin}
	x.run = func(a *actor) error {
		for i := range x.nodes {
			n := &x.nodes[i]
			var err error
			// The fault injector is asked about each node as it runs, as
			// for the same op launched on its own: hipGraphLaunch itself
			// is only the submission.
			if h.m.injectFault(n.what) {
				return fmt.Errorf("graph node %d (%s): %s in %s", i, n.what, injectedFault, n.what)
			}
			switch n.kind {
			case cmdGemm:
				err = h.m.runGemm(x.dev, &n.g, a)
			case cmdCopy:
				err = x.origin.runCopy(&n.cp, a)
			case cmdLaunch:
				err = x.origin.runLaunch(&n.l, a)
			default:
				err = n.fn(a)
			}
			if err != nil {
				return fmt.Errorf("graph node %d (%s): %w", i, n.what, err)
			}
		}
		return nil
	}
	h.graphs.execs[e] = x
	return e, nil
}

// GraphDestroy is hipGraphDestroy.
func (h *HIP) GraphDestroy(g hip.Graph) error {
	return destroyGraph(h, &h.graphs.graphs, g, "hipGraphDestroy", "unknown graph")
}

// GraphExecDestroy is hipGraphExecDestroy; launches already made run to
// the end (they hold the nodes).
func (h *HIP) GraphExecDestroy(e hip.GraphExec) error {
	return destroyGraph(h, &h.graphs.execs, e, "hipGraphExecDestroy", "unknown executable graph")
}

// destroyGraph removes handle k from table *m (graphs or executable
// graphs), read under h.mu (the tables are made lazily); an unknown handle
// is fn's hipErrorInvalidValue.
func destroyGraph[K comparable](h *HIP, m *map[K]*hgraph, k K, fn, unknown string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if (*m)[k] == nil {
		return hipErr(fn, hip.ErrorInvalidValue, unknown)
	}
	delete(*m, k)
	return nil
}

// GraphLaunch is hipGraphLaunch: one command on the stream that runs the
// graph's nodes in capture order (gemms on the GPU the graph was captured
// on). A node that fails fails the launch like
// a kernel: the stream carries the error.
func (h *HIP) GraphLaunch(e hip.GraphExec, id hip.Stream) error {
	const fn = "hipGraphLaunch"
	if err := h.graphsUnavailable("hipGraphLaunch"); err != nil {
		return err
	}
	h.mu.Lock()
	gr := h.graphs.execs[e]
	h.mu.Unlock()
	if gr == nil {
		return hipErr(fn, hip.ErrorInvalidValue, "unknown executable graph")
	}
	s, err := h.stream(fn, id)
	if err != nil {
		return err
	}
	h.graphs.launches.Add(1)
	return s.enqueue(cmd{kind: cmdWork, what: fn, direct: true, graph: true, fn: gr.run})
}

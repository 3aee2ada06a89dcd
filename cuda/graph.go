package cuda

import (
	"errors"
	"runtime"

	"github.com/rocsync/rocsync/internal/cmem"
)

// CUDA graphs by stream capture: the work a stream is given between
// BeginCapture and EndCapture is recorded instead of run, GraphInstantiate
// makes the recorded graph launchable, and GraphLaunch submits the whole
// sequence in one call. The entry points are resolved on first use, not by
// Open (BoundSymbols), so a driver without them still opens; a call then
// returns an error matching ErrGraphUnavailable.

// Graph is a CUgraph, GraphExec a CUgraphExec.
type (
	Graph     uintptr
	GraphExec uintptr
)

// CaptureMode is CUstreamCaptureMode: which calls other threads may make
// while a capture is under way (cuda.h).
type CaptureMode uint32

const (
	CaptureModeGlobal      CaptureMode = 0
	CaptureModeThreadLocal CaptureMode = 1
	CaptureModeRelaxed     CaptureMode = 2
)

// ErrGraphUnavailable is matched by the error of a graph call on a driver
// that lacks the entry points.
var ErrGraphUnavailable = errors.New("cuda: the driver has no CUDA graph entry points")

// Indexes into GraphSymbols.
const (
	graphBeginCapture = iota
	graphEndCapture
	graphInstantiate
	graphLaunch
	graphDestroy
	graphExecDestroy
	numGraphSyms
)

// GraphSymbols are the entry points the graph calls bind. cuda.h maps
// cuStreamBeginCapture to its _v2 (with a mode) and, since CUDA 12,
// cuGraphInstantiate to cuGraphInstantiateWithFlags (CUDA 11.4 and later).
var GraphSymbols = []string{
	graphBeginCapture: "cuStreamBeginCapture_v2",
	graphEndCapture:   "cuStreamEndCapture",
	graphInstantiate:  "cuGraphInstantiateWithFlags",
	graphLaunch:       "cuGraphLaunch",
	graphDestroy:      "cuGraphDestroy",
	graphExecDestroy:  "cuGraphExecDestroy",
}

// graphSym returns entry point i, resolving them all on the first call.
func (l *Lib) graphSym(i int) (uintptr, error) {
	return l.graph.Addr(l.handle, l.path, GraphSymbols, i, ErrGraphUnavailable)
}

// graphCall calls entry point i with b's argument array, on c when non-nil
// (the thread locked and c current, as every Ctx call), and returns its
// error.
func (l *Lib) graphCall(c *Ctx, i int, args ...uintptr) error {
	fn, err := l.graphSym(i)
	if err != nil {
		return err
	}
	b := blocks.Get()
	defer blocks.Put(b)
	return l.graphCallIn(b, c, fn, i, args...)
}

func (l *Lib) graphCallIn(b *cmem.Block, c *Ctx, fn uintptr, i int, args ...uintptr) error {
	if c != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r, prev := l.currentIn(b, c)
		if uint32(r) != 0 {
			return l.check(symCtxSetCurrent, r)
		}
		defer l.restoreIn(b, c, prev)
	}
	code := Result(uint32(b.Call(fn, args...)))
	if code == Success {
		return nil
	}
	return l.errs.Get(numSyms+i, uint32(code), func() *Error {
		return &Error{Func: GraphSymbols[i], Code: code, Name: l.ErrorName(code), Text: l.ErrorString(code)}
	})
}

// graphOut calls entry point i with an out-parameter (a handle) at
// position out among args (whose entry there is ignored), and returns
// the handle written.
func (l *Lib) graphOut(c *Ctx, i, out int, args ...uintptr) (uintptr, error) {
	fn, err := l.graphSym(i)
	if err != nil {
		return 0, err
	}
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	args[out] = b.Word(0)
	if err := l.graphCallIn(b, c, fn, i, args...); err != nil {
		return 0, err
	}
	return uintptr(*b.U64(0)), nil
}

// BeginCapture is cuStreamBeginCapture: s records the work it is given
// from now on, until EndCapture, instead of running it.
func (l *Lib) BeginCapture(s Stream, mode CaptureMode) error {
	return l.graphCall(nil, graphBeginCapture, uintptr(s), uintptr(mode))
}

// EndCapture is cuStreamEndCapture(hStream, *phGraph): the graph of what
// s recorded.
func (l *Lib) EndCapture(s Stream) (Graph, error) {
	h, err := l.graphOut(nil, graphEndCapture, 1, uintptr(s), 0)
	return Graph(h), err
}

// GraphInstantiate is cuGraphInstantiateWithFlags(*phGraphExec, hGraph,
// flags) with no flags.
func (l *Lib) GraphInstantiate(g Graph) (GraphExec, error) {
	h, err := l.graphOut(nil, graphInstantiate, 0, 0, uintptr(g), 0)
	return GraphExec(h), err
}

// GraphLaunch is cuGraphLaunch: the whole recorded sequence on s.
func (l *Lib) GraphLaunch(e GraphExec, s Stream) error {
	return l.graphCall(nil, graphLaunch, uintptr(e), uintptr(s))
}

// GraphDestroy is cuGraphDestroy.
func (l *Lib) GraphDestroy(g Graph) error { return l.graphCall(nil, graphDestroy, uintptr(g)) }

// GraphExecDestroy is cuGraphExecDestroy.
func (l *Lib) GraphExecDestroy(e GraphExec) error {
	return l.graphCall(nil, graphExecDestroy, uintptr(e))
}

// The same on a Ctx, correct from any goroutine. A capture records what
// its stream is given from any thread under CaptureModeRelaxed; the
// stricter modes refuse, during a capture, the unsafe calls of the
// capturing thread (ThreadLocal) or of every thread (Global), and a
// goroutine may change threads between Ctx calls.

// BeginCapture is cuStreamBeginCapture on c.
func (c *Ctx) BeginCapture(s Stream, mode CaptureMode) error {
	return c.lib.graphCall(c, graphBeginCapture, uintptr(s), uintptr(mode))
}

// EndCapture is cuStreamEndCapture on c.
func (c *Ctx) EndCapture(s Stream) (Graph, error) {
	h, err := c.lib.graphOut(c, graphEndCapture, 1, uintptr(s), 0)
	return Graph(h), err
}

// GraphInstantiate is cuGraphInstantiateWithFlags on c.
func (c *Ctx) GraphInstantiate(g Graph) (GraphExec, error) {
	h, err := c.lib.graphOut(c, graphInstantiate, 0, 0, uintptr(g), 0)
	return GraphExec(h), err
}

// GraphLaunch is cuGraphLaunch on c.
func (c *Ctx) GraphLaunch(e GraphExec, s Stream) error {
	return c.lib.graphCall(c, graphLaunch, uintptr(e), uintptr(s))
}

// GraphDestroy is cuGraphDestroy on c.
func (c *Ctx) GraphDestroy(g Graph) error { return c.lib.graphCall(c, graphDestroy, uintptr(g)) }

// GraphExecDestroy is cuGraphExecDestroy on c.
func (c *Ctx) GraphExecDestroy(e GraphExec) error {
	return c.lib.graphCall(c, graphExecDestroy, uintptr(e))
}

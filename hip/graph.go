package hip

import "errors"

// Graph and GraphExec are hipGraph_t and hipGraphExec_t (pointers in C).
type (
	Graph     uintptr
	GraphExec uintptr
)

// StreamCaptureMode is hipStreamCaptureMode: which other calls a capture
// forbids. Under Global, a "potentially unsafe" call (hipMalloc, hipFree,
// hipHostMalloc, a synchronous hipMemcpy, ...) fails with
// ErrorStreamCaptureUnsupported on every thread while the capture lasts;
// under ThreadLocal only on the capturing thread; Relaxed forbids none.
type StreamCaptureMode uint32

const (
	StreamCaptureModeGlobal      StreamCaptureMode = 0
	StreamCaptureModeThreadLocal StreamCaptureMode = 1
	StreamCaptureModeRelaxed     StreamCaptureMode = 2
)

// StreamCaptureStatus is hipStreamCaptureStatus.
type StreamCaptureStatus uint32

const (
	StreamCaptureStatusNone        StreamCaptureStatus = 0
	StreamCaptureStatusActive      StreamCaptureStatus = 1
	StreamCaptureStatusInvalidated StreamCaptureStatus = 2
)

// The errors of stream capture (hip_runtime_api.h).
const (
	ErrorIllegalState             ErrorCode = 401 // hipStreamBeginCapture on a capturing stream
	ErrorStreamCaptureUnsupported ErrorCode = 900
	ErrorStreamCaptureInvalidated ErrorCode = 901
	ErrorStreamCaptureUnmatched   ErrorCode = 903
	ErrorStreamCaptureIsolation   ErrorCode = 905
	ErrorStreamCaptureImplicit    ErrorCode = 906
	ErrorCapturedEvent            ErrorCode = 907
	ErrorStreamCaptureWrongThread ErrorCode = 908
)

// HIPVersionModuleLaunchCaptured is the first HIP (5.3) whose
// hipModuleLaunchKernel is captured (see GraphRuntime).
const HIPVersionModuleLaunchCaptured = 50_300_000

// ErrGraphsUnavailable is matched by errors.Is when the loaded
// libamdhip64 lacks a hipGraph function (an old release).
var ErrGraphsUnavailable = errors.New("hip: the HIP runtime has no hipGraph API")

// GraphRuntime is a Runtime with stream capture and graphs (hipGraph).
// It is optional: a caller asks for it with a type assertion, and a
// Lib whose library lacks the functions answers ErrGraphsUnavailable.
//
// HIP before 5.3 does not capture hipModuleLaunchKernel: during a capture
// it launches the kernel on the stream at once, and the graph lacks it
// (hipamd rocm-5.2.3 src/hip_module.cpp has no STREAM_CAPTURE for it; 5.3
// added one). HIPVersionModuleLaunchCaptured is the first release that
// does.
type GraphRuntime interface {
	// StreamBeginCapture is hipStreamBeginCapture: the stream's work is
	// recorded into a graph instead of run, until StreamEndCapture.
	StreamBeginCapture(s Stream, mode StreamCaptureMode) error
	// StreamEndCapture is hipStreamEndCapture: the captured graph, or
	// ErrorStreamCaptureInvalidated when a rule of capture was broken.
	StreamEndCapture(s Stream) (Graph, error)
	// StreamIsCapturing is hipStreamIsCapturing.
	StreamIsCapturing(s Stream) (StreamCaptureStatus, error)
	// GraphInstantiate is hipGraphInstantiate (HIP 5.2's form: no error
	// node or log asked for).
	GraphInstantiate(g Graph) (GraphExec, error)
	// GraphLaunch is hipGraphLaunch: the graph's work runs on s, in
	// stream order with the rest of s.
	GraphLaunch(e GraphExec, s Stream) error
	GraphDestroy(g Graph) error
	GraphExecDestroy(e GraphExec) error
}

var _ GraphRuntime = (*Lib)(nil)

// Indexes into graphSymbols.
const (
	gsBeginCapture = iota
	gsEndCapture
	gsIsCapturing
	gsInstantiate
	gsLaunch
	gsDestroy
	gsExecDestroy
	numGraphSyms
)

// GraphSymbols are the hipGraph functions Lib resolves on first use. They
// are not in BoundSymbols: a libamdhip64 without them still opens.
var GraphSymbols = []string{
	gsBeginCapture: "hipStreamBeginCapture",
	gsEndCapture:   "hipStreamEndCapture",
	gsIsCapturing:  "hipStreamIsCapturing",
	gsInstantiate:  "hipGraphInstantiate",
	gsLaunch:       "hipGraphLaunch",
	gsDestroy:      "hipGraphDestroy",
	gsExecDestroy:  "hipGraphExecDestroy",
}

// graphSym returns hipGraph function i, resolving them all on the first
// call.
func (l *Lib) graphSym(i int) (uintptr, error) {
	return l.graph.Addr(l.handle, l.path, GraphSymbols, i, ErrGraphsUnavailable)
}

// noOut is graphCall's out for a call without an out-parameter.
const noOut = -1

// graphCall calls hipGraph function i with args (integers or C
// addresses) and checks its hipError_t; with out ≥ 0, args[out] (given
// as 0) becomes the address of a C word whose value it returns.
func (l *Lib) graphCall(i, out int, args ...uintptr) (uint64, error) {
	fn, err := l.graphSym(i)
	if err != nil {
		return 0, err
	}
	b := l.scratch.Get()
	defer l.scratch.Put(b)
	*b.U64(0) = 0
	if out >= 0 {
		args[out] = b.Word(0)
	}
	if code := ErrorCode(uint32(b.Call(fn, args...))); code != Success {
		return 0, l.graphError(i, code)
	}
	return *b.U64(0), nil
}

// graphError is the *Error of a failed hipGraph call (not cached: these
// calls are made once per recording, not per op).
func (l *Lib) graphError(i int, code ErrorCode) *Error {
	return &Error{Func: GraphSymbols[i], Code: code, Name: l.ErrorName(code), Text: l.ErrorString(code)}
}

// StreamBeginCapture is hipStreamBeginCapture(s, mode).
func (l *Lib) StreamBeginCapture(s Stream, mode StreamCaptureMode) error {
	_, err := l.graphCall(gsBeginCapture, noOut, uintptr(s), uintptr(mode))
	return err
}

// StreamEndCapture is hipStreamEndCapture(s, &graph).
func (l *Lib) StreamEndCapture(s Stream) (Graph, error) {
	v, err := l.graphCall(gsEndCapture, 1, uintptr(s), 0)
	return Graph(v), err
}

// StreamIsCapturing is hipStreamIsCapturing(s, &status).
func (l *Lib) StreamIsCapturing(s Stream) (StreamCaptureStatus, error) {
	v, err := l.graphCall(gsIsCapturing, 1, uintptr(s), 0)
	return StreamCaptureStatus(uint32(v)), err
}

// GraphInstantiate is hipGraphInstantiate(&exec, g, NULL, NULL, 0), the
// five-argument form every release since 4.3 has.
func (l *Lib) GraphInstantiate(g Graph) (GraphExec, error) {
	v, err := l.graphCall(gsInstantiate, 0, 0, uintptr(g), 0, 0, 0)
	return GraphExec(v), err
}

// GraphLaunch is hipGraphLaunch(e, s).
func (l *Lib) GraphLaunch(e GraphExec, s Stream) error {
	_, err := l.graphCall(gsLaunch, noOut, uintptr(e), uintptr(s))
	return err
}

// GraphDestroy is hipGraphDestroy.
func (l *Lib) GraphDestroy(g Graph) error {
	_, err := l.graphCall(gsDestroy, noOut, uintptr(g))
	return err
}

// GraphExecDestroy is hipGraphExecDestroy.
func (l *Lib) GraphExecDestroy(e GraphExec) error {
	_, err := l.graphCall(gsExecDestroy, noOut, uintptr(e))
	return err
}

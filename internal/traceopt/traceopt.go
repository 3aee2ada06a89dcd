//go:build !rocsync_notrace

// Package traceopt says whether the trace is compiled in. Built with the
// tag rocsync_notrace, Enabled is false and every trace hook (the front
// package's, the queues' and streams' device timing) folds away at compile
// time: that build is what the trace's cost when off is measured against
// (docs/benchmarks.md). Options.Trace and ROCSYNC_TRACE are then ignored.
package traceopt

// Enabled reports whether the trace is compiled in.
const Enabled = true

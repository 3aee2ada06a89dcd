//go:build rocsync_notrace

package traceopt

// Enabled reports whether the trace is compiled in: not under
// rocsync_notrace.
const Enabled = false

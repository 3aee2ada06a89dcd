package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress reports how far a run is on stderr: a first line at once (what
// will run), then iterations done of the total, the time elapsed and an
// estimate of the time left. On a terminal it rewrites one line at most
// every second; otherwise it writes a line at most every second during the
// first ten seconds and then at most every tenth of the time elapsed, so a
// long run's log stays short. stdout is never touched.
type progress struct {
	w     io.Writer
	now   func() time.Time
	tty   bool
	total int
	done  int
	start time.Time
	last  time.Time // the last report
	label string    // what runs now
}

// newProgress starts reporting total iterations to w (nil: no reports);
// now is the clock (nil: time.Now).
func newProgress(w io.Writer, tty bool, now func() time.Time, total int, what string) *progress {
	if now == nil {
		now = time.Now
	}
	p := &progress{w: w, now: now, tty: tty, total: total}
	p.start = now()
	p.last = p.start
	p.printf("bench: %s: %d iterations", what, total)
	p.endLine()
	return p
}

// isTerminal reports whether w is a character device, where progress
// rewrites its line in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// running names what the next iterations run ("mixed DeviceSide").
func (p *progress) running(label string) { p.label = label }

// step counts one iteration done and reports when it is time to.
func (p *progress) step() {
	if p == nil {
		return
	}
	p.done++
	if p.w == nil {
		return
	}
	now := p.now()
	elapsed := now.Sub(p.start)
	every := time.Second
	if !p.tty && elapsed > 10*time.Second {
		every = elapsed / 10
	}
	if now.Sub(p.last) < every {
		return
	}
	p.last = now
	p.report(elapsed)
}

func (p *progress) report(elapsed time.Duration) {
	left := "?"
	if p.done > 0 {
		rest := time.Duration(float64(elapsed) * float64(p.total-p.done) / float64(p.done))
		left = "about " + round(rest).String()
	}
	p.printf("bench: %d/%d iterations (%d%%), now %s; %s elapsed, %s left",
		p.done, p.total, 100*p.done/max(p.total, 1), p.label, round(elapsed), left)
	if !p.tty {
		p.endLine()
	}
}

// finish ends the report: the time the run took.
func (p *progress) finish() {
	if p == nil || p.w == nil {
		return
	}
	p.printf("bench: %d/%d iterations in %s", p.done, p.total, round(p.now().Sub(p.start)))
	p.endLine()
}

// printf writes one report: on a terminal it replaces the line there.
func (p *progress) printf(format string, args ...any) {
	if p.w == nil {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, format, args...)
}

func (p *progress) endLine() {
	if p.w != nil {
		fmt.Fprintln(p.w)
	}
}

// round keeps durations readable: whole seconds above 10 s, tenths below.
func round(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

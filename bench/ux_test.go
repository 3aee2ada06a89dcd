package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rocsync/rocsync"
)

// -h prints the summary, the programs, the policies, examples and then the
// flags on stdout, and succeeds.
func TestHelp(t *testing.T) {
	for _, h := range []string{"-h", "-help", "--help"} {
		var out, errOut bytes.Buffer
		if err := run([]string{h}, &out, &errOut); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		s := out.String()
		want := []string{"Usage: bench", "Programs", "matmul", "elementwise", "mixed", "mlp", "Policies"}
		for _, p := range []rocsync.Policy{rocsync.WaitAlways, rocsync.SkipSameQueue, rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge} {
			want = append(want, p.String())
		}
		want = append(want, "Examples", "bench -programs", "Flags", "-interleave", "-iters")
		last := -1
		for _, w := range want {
			i := strings.Index(s[max(last, 0):], w)
			if i < 0 {
				t.Fatalf("%s: %q missing or out of order in:\n%s", h, w, s)
			}
			last += i + 1
		}
		if errOut.Len() != 0 {
			t.Errorf("%s wrote to stderr: %s", h, errOut.String())
		}
	}
}

// The exit status of the command itself: 0 for -h, 2 for a bad flag. The
// test binary runs main when BENCH_RUN_MAIN is set.
func TestExitStatus(t *testing.T) {
	if os.Getenv("BENCH_RUN_MAIN") == "1" {
		os.Args = append([]string{"bench"}, strings.Fields(os.Getenv("BENCH_ARGS"))...)
		main()
		os.Exit(0)
	}
	for _, c := range []struct {
		args string
		code int
		out  string // on stdout (-h) or stderr
	}{
		{"-h", 0, "Usage: bench"},
		{"-no-such-flag", 2, "Usage: bench"},
		{"-n 0", 2, "bench -h"},
		{"-backend tpu", 2, "unknown backend"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExitStatus$")
		cmd.Env = append(os.Environ(), "BENCH_RUN_MAIN=1", "BENCH_ARGS="+c.args)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code {
			t.Errorf("bench %s: exit status %d, want %d\nstderr: %s", c.args, code, c.code, errOut.String())
		}
		if got := out.String() + errOut.String(); !strings.Contains(got, c.out) {
			t.Errorf("bench %s: output lacks %q:\n%s", c.args, c.out, got)
		}
	}
}

// With the default settings, every line of the tables fits in 100
// columns, even with times of six digits and long checksums.
func TestTableWidth(t *testing.T) {
	cfg, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var rs []result
	for _, prog := range cfg.programs {
		for _, pol := range cfg.policies {
			rs = append(rs, result{Program: prog, Policy: pol.String(), Backend: "emulator",
				DispatchMedianUS: 123456.7, DispatchP90US: 234567.8, TotalMedianUS: 345678.9, TotalP90US: 456789.1,
				HostWaitsPerIter: 159.25, BoundaryPerIter: 17.5, DeviceWaitsIter: 114.75, Crossings: 7,
				Checksum: -1.23456e-05, DispatchRatio: 1234.56, TotalRatio: 0.99})
		}
	}
	for _, delay := range []time.Duration{0, 1500 * time.Microsecond} {
		cfg.emuDelay = delay
		cfg.interleave = delay > 0
		var out bytes.Buffer
		printTable(&out, cfg, rs)
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) < 2*len(rs) {
			t.Fatalf("%d lines for %d results:\n%s", len(lines), len(rs), out.String())
		}
		for i, l := range lines {
			if n := utf8.RuneCountInString(l); n > 100 {
				t.Errorf("line %d is %d columns:\n%s", i+1, n, l)
			}
			if strings.HasSuffix(l, " ") {
				t.Errorf("line %d ends in spaces: %q", i+1, l)
			}
		}
		if t.Failed() {
			t.Logf("table:\n%s", out.String())
		}
	}
	// A real run prints the same shape.
	var out bytes.Buffer
	if err := run(args(), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(out.String(), "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("real run: line %d is %d columns: %s", i+1, n, l)
		}
	}
}

// fakeClock advances only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// Not on a terminal: a first line at once, then at most one line a second
// with the count, the time elapsed and the time left, then a line every
// tenth of the elapsed time after ten seconds, and a last line.
func TestProgressLines(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	var w bytes.Buffer
	p := newProgress(&w, false, clk.now, 400, "test run")
	if got := w.String(); got != "bench: test run: 400 iterations\n" {
		t.Fatalf("first line %q", got)
	}
	p.running("mixed DeviceSide")
	for i := 0; i < 40; i++ { // 40 iterations of 100 ms: 4 s
		clk.advance(100 * time.Millisecond)
		p.step()
	}
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 1+4 {
		t.Fatalf("%d lines after 4 s, want 5:\n%s", len(lines), w.String())
	}
	if want := "bench: 10/400 iterations (2%), now mixed DeviceSide; 1s elapsed, about 39s left"; lines[1] != want {
		t.Errorf("line 2:\n got %q\nwant %q", lines[1], want)
	}
	if want := "bench: 40/400 iterations (10%), now mixed DeviceSide; 4s elapsed, about 36s left"; lines[4] != want {
		t.Errorf("line 5:\n got %q\nwant %q", lines[4], want)
	}
	// From 4 s to 40 s: a line a second until 10 s, then every tenth of
	// the elapsed time (1 s at 10 s, 3.9 s at 39 s): not one a second.
	for i := 40; i < 400; i++ {
		clk.advance(100 * time.Millisecond)
		p.step()
	}
	p.finish()
	lines = strings.Split(strings.TrimSpace(w.String()), "\n")
	if n := len(lines); n < 14 || n > 24 {
		t.Errorf("%d lines for a 40 s run, want between 14 and 24:\n%s", n, w.String())
	}
	if last := lines[len(lines)-1]; last != "bench: 400/400 iterations in 40s" {
		t.Errorf("last line %q", last)
	}
	re := regexp.MustCompile(`^bench: \d+/400 iterations \(\d+%\), now mixed DeviceSide; [\d.]+s elapsed, about [\d.]+m?s left$`)
	for _, l := range lines[1 : len(lines)-1] {
		if !re.MatchString(l) {
			t.Errorf("progress line %q", l)
		}
	}
}

// On a terminal the report is one line, rewritten at most once a second.
func TestProgressTerminal(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	var w bytes.Buffer
	p := newProgress(&w, true, clk.now, 100, "tty run")
	for i := 0; i < 100; i++ {
		clk.advance(50 * time.Millisecond)
		p.step()
	}
	p.finish()
	s := w.String()
	if n := strings.Count(s, "\n"); n != 2 {
		t.Errorf("%d newlines, want 2 (the first line and the last):\n%q", n, s)
	}
	if n := strings.Count(s, "\r\x1b[K"); n != 1+5+1 {
		t.Errorf("%d rewrites in 5 s, want 7:\n%q", n, s)
	}
	if !strings.HasSuffix(s, "\r\x1b[Kbench: 100/100 iterations in 5s\n") {
		t.Errorf("does not end with the total: %q", s)
	}
}

// A run reports progress on stderr from its start, and nothing of it on
// stdout (the JSON there parses, runJSON checks).
func TestProgressOnStderr(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(args("-programs", "elementwise", "-policies", "DeviceSide,Unified", "-json"), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(errOut.String(), "bench: 1 programs × 2 policies, 1+3 iterations each: 8 iterations\n") ||
		!strings.Contains(errOut.String(), "bench: 8/8 iterations in ") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
	if strings.Contains(out.String(), "iterations in") {
		t.Errorf("progress on stdout:\n%s", out.String())
	}
}

// The JSON records the machine, the build, the time, the backend and the
// device next to the results.
func TestJSONMeta(t *testing.T) {
	var out bytes.Buffer
	if err := run(args("-programs", "elementwise", "-policies", "DeviceSide", "-json"), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var o output
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	m := o.Meta
	for name, v := range map[string]string{"time": m.Time, "go_version": m.GoVersion, "backend": m.Backend,
		"device": m.Device, "driver_version": m.Driver, "target": m.Target, "os": m.Machine.OS, "arch": m.Machine.Arch} {
		if v == "" {
			t.Errorf("meta %s is empty", name)
		}
	}
	if ts, err := time.Parse(time.RFC3339, m.Time); err != nil || ts.Location() != time.UTC || time.Since(ts) > time.Hour {
		t.Errorf("time %q: %v", m.Time, err)
	}
	if m.Backend != "emulator" || !strings.Contains(m.Device, "emulated") || !strings.Contains(m.Driver, "HIP") {
		t.Errorf("device: %+v", m)
	}
	if m.Machine.CPUs < 1 || m.Machine.GOMAXPROCS < 1 {
		t.Errorf("machine: %+v", m.Machine)
	}
	if _, err := os.Stat("/proc/cpuinfo"); err == nil && m.Machine.CPU == "" {
		t.Errorf("no CPU model although /proc/cpuinfo exists")
	}
	// The tests run inside the repository's git work tree: the commit
	// comes from git (go test stamps no revision).
	if _, err := exec.LookPath("git"); err == nil {
		if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(m.Commit) || m.CommitFrom == "" {
			t.Errorf("commit %q from %q", m.Commit, m.CommitFrom)
		}
	}
	if s := m.Settings; s.Iterations != 3 || s.Warmup != 1 || s.N != 8 || len(s.Programs) != 1 || len(s.Policies) != 1 {
		t.Errorf("settings %+v", s)
	}
	if len(o.Results) != 1 || raw["meta"] == nil {
		t.Errorf("%d results, meta %v", len(o.Results), raw["meta"])
	}
}

// Flags a new user combined wrongly are usage errors before anything
// runs: dp-mlp named twice (it crashed), with -trace (the trace file was
// replaced by an empty one) or -replay (ignored); two outputs naming one
// file (the second replaced the first); an output that is a directory or
// whose folder is missing (found only after the whole run).
func TestOutputAndProgramFlagsRefusedUpFront(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-programs", "dp-mlp,dp-mlp"},
		{"-programs", "matmul,matmul"},
		{"-programs", "dp-mlp", "-trace", filepath.Join(dir, "t.json")},
		{"-programs", "dp-mlp", "-replay"},
		{"-json-file", filepath.Join(dir, "s.png"), "-plot", filepath.Join(dir, "s.png")},
		{"-trace", filepath.Join(dir, "x"), "-json-file", filepath.Join(dir, "x")},
		{"-json-file", dir},
		{"-plot", filepath.Join(dir, "missing", "p.png")},
		{"-cpuprofile", filepath.Join(dir, "missing", "cpu.prof")},
	} {
		var ue usageError
		if err := run(append(args, "-backend", "emulator", "-iters", "1", "-warmup", "0"), &bytes.Buffer{}, &bytes.Buffer{}); !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// -cpuprofile writes the profile whole, through a temporary file that it
// renames: an existing profile is replaced only by a complete one.
func TestCPUProfileIsRenamedIntoPlace(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	if err := os.WriteFile(prof, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-backend", "emulator", "-programs", "elementwise", "-policies", "DeviceSide", "-n", "8",
		"-iters", "2", "-warmup", "0", "-cpuprofile", prof}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(prof); err != nil || bytes.Equal(b, []byte("old")) || len(b) == 0 {
		t.Errorf("profile not replaced by a new one: %q, %v", b, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

// A run killed while it profiles leaves an existing profile as it was:
// the profile goes to a temporary file until the run ends. (The profile
// was created, so truncated, as the run began: a run interrupted then
// left an empty file where the old profile was.)
func TestKilledRunKeepsTheOldProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	if err := os.WriteFile(prof, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExitStatus$")
	cmd.Env = append(os.Environ(), "BENCH_RUN_MAIN=1", "BENCH_ARGS=-backend emulator -programs elementwise -policies DeviceSide -n 8 -warmup 0 -iters 100000000 -cpuprofile "+prof)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Until the run is profiling: its temporary file exists, or (the old
	// way) the profile itself changed. The bound only keeps a broken run
	// from hanging the test.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		tmp, _ := filepath.Glob(prof + ".tmp-*")
		if b, _ := os.ReadFile(prof); len(tmp) > 0 || string(b) != "old" {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatal("the run never began its profile")
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if b, err := os.ReadFile(prof); err != nil || string(b) != "old" {
		t.Errorf("the killed run changed the old profile: %q, %v", b, err)
	}
}

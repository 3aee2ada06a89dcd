package main

import (
	"bytes"
	"strings"
	"testing"
)

// A benchmark that only one binary ran (both flags naming one binary,
// or a benchmark one build lacks) is reported as skipped: report indexed
// the missing side and panicked.
func TestReportSkipsABenchmarkOfOneBinary(t *testing.T) {
	var out bytes.Buffer
	report(&out, map[string]*pair{
		"BenchmarkA": {with: []float64{10, 12, 11, 13}},
		"BenchmarkB": {with: []float64{10, 10}, without: []float64{5, 5}},
	})
	s := out.String()
	if !strings.Contains(s, "BenchmarkA: in one binary only (4 runs with the trace, 0 without); skipped") ||
		!strings.Contains(s, "BenchmarkB: 1 rounds") || !strings.Contains(s, "ratio per round: median 2.0000") {
		t.Errorf("report:\n%s", s)
	}
}

// Flags that cannot make a comparison are refused before anything runs.
func TestRunRefusesUselessFlags(t *testing.T) {
	for _, c := range []struct {
		rounds        int
		with, without string
	}{{0, "", ""}, {-1, "", ""}, {1, "a.test", ""}, {1, "", "b.test"}} {
		if err := run(c.rounds, "x", "1x", c.with, c.without, false); err == nil {
			t.Errorf("run(rounds %d, -with %q, -without %q) accepted", c.rounds, c.with, c.without)
		}
	}
}

// Command tracecost measures what the trace costs when it is off: it
// builds the root package's test binary twice, as it is and with the tag
// rocsync_notrace (every trace hook compiled out), and runs the submit
// benchmarks in both, alternating in ABBA order for -rounds rounds so
// that drift on a shared host falls on both alike. It prints each
// round's ns/op and, per benchmark, the median of the per-round ratios
// (trace compiled in, off ÷ compiled out) with its quartiles, range and a
// bootstrap 95% interval of the median.
//
//	go run ./bench/tracecost -rounds 20
//	go run ./bench/tracecost -callgrind -benchtime 20000x
//
// -callgrind counts, under valgrind's callgrind, the instructions each
// function of the submit path executes per op in both builds, which the
// host's load does not change.
//
// -with and -without take binaries built elsewhere (to run on a machine
// without Go, build them with CGO_ENABLED=0 go test -c [-tags
// rocsync_notrace] and copy this command's binary with them).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/rocsync/rocsync/bench/internal/measure"
)

func main() {
	rounds := flag.Int("rounds", 20, "ABBA rounds (each runs both binaries twice)")
	bench := flag.String("bench", `BenchmarkTraceOverhead$/^off$|BenchmarkBoundaryOp$`, "benchmarks to run (-test.bench)")
	benchtime := flag.String("benchtime", "100000x", "-test.benchtime of each run")
	with := flag.String("with", "", "test binary with the trace compiled in (default: build it)")
	without := flag.String("without", "", "test binary built with -tags rocsync_notrace (default: build it)")
	callgrind := flag.Bool("callgrind", false, "count instructions per op under valgrind's callgrind instead of timing")
	flag.Parse()
	if err := run(*rounds, *bench, *benchtime, *with, *without, *callgrind); err != nil {
		fmt.Fprintln(os.Stderr, "tracecost:", err)
		os.Exit(1)
	}
}

func run(rounds int, bench, benchtime, with, without string, callgrind bool) error {
	if rounds < 1 {
		return fmt.Errorf("-rounds %d: want at least 1", rounds)
	}
	if (with == "") != (without == "") {
		return errors.New("-with and -without go together (or neither, to build both)")
	}
	if with == "" {
		dir, err := os.MkdirTemp("", "tracecost")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		with, without = filepath.Join(dir, "trace.test"), filepath.Join(dir, "notrace.test")
		for _, b := range []struct{ out, tags string }{{with, ""}, {without, "rocsync_notrace"}} {
			cmd := exec.Command("go", "test", "-c", "-o", b.out, "-tags", b.tags, ".")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("building %s: %w", b.out, err)
			}
		}
	}
	if callgrind {
		return instructions(with, without, benchtime)
	}
	// ns/op by benchmark, per round, for each binary.
	res := map[string]*pair{}
	for r := 0; r < rounds; r++ {
		// ABBA, by position: -with and -without may name one binary (a
		// check that the method finds no difference).
		order := []struct {
			bin    string
			traced bool
		}{{with, true}, {without, false}, {without, false}, {with, true}}
		for _, o := range order {
			got, err := runOnce(o.bin, bench, benchtime)
			if err != nil {
				return err
			}
			for name, ns := range got {
				p := res[name]
				if p == nil {
					p = &pair{}
					res[name] = p
				}
				if o.traced {
					p.with = append(p.with, ns)
				} else {
					p.without = append(p.without, ns)
				}
			}
		}
		fmt.Fprintf(os.Stderr, "round %d/%d done\n", r+1, rounds)
	}
	report(os.Stdout, res)
	return nil
}

// pair is one benchmark's ns/op, run by run, in each binary.
type pair struct{ with, without []float64 }

// report prints each benchmark's medians and per-round ratios.
func report(w io.Writer, res map[string]*pair) {
	for _, name := range slices.Sorted(maps.Keys(res)) {
		p := res[name]
		if len(p.with) < 2 || len(p.without) < 2 {
			// A benchmark that one binary has and the other lacks: no
			// round compares them.
			fmt.Fprintf(w, "%s: in one binary only (%d runs with the trace, %d without); skipped\n", name, len(p.with), len(p.without))
			continue
		}
		// A round's two runs of a binary average into one value, and its
		// ratio compares the two binaries within the round.
		var ratios []float64
		for i := 0; i+1 < len(p.with) && i+1 < len(p.without); i += 2 {
			ratios = append(ratios, (p.with[i]+p.with[i+1])/(p.without[i]+p.without[i+1]))
		}
		fmt.Fprintf(w, "%s: %d rounds\n", name, len(ratios))
		fmt.Fprintf(w, "  trace compiled in, off: median %.0f [%.0f–%.0f]\n", measure.Quantile(p.with, 0.5), slices.Min(p.with), slices.Max(p.with))
		fmt.Fprintf(w, "  trace compiled out:     median %.0f [%.0f–%.0f]\n", measure.Quantile(p.without, 0.5), slices.Min(p.without), slices.Max(p.without))
		lo, hi := bootstrapMedian(ratios)
		fmt.Fprintf(w, "  ratio per round: median %.4f, quartiles %.4f–%.4f, range %.4f–%.4f, bootstrap 95%% interval of the median %.4f–%.4f\n",
			measure.Quantile(ratios, 0.5), measure.Quantile(ratios, 0.25), measure.Quantile(ratios, 0.75), slices.Min(ratios), slices.Max(ratios), lo, hi)
	}
}

// bootstrapMedian is a percentile bootstrap 95% interval of the median.
func bootstrapMedian(xs []float64) (lo, hi float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	meds := make([]float64, 2000)
	s := make([]float64, len(xs))
	for i := range meds {
		for j := range s {
			s[j] = xs[rng.IntN(len(xs))]
		}
		meds[i] = measure.Quantile(s, 0.5)
	}
	return measure.Quantile(meds, 0.025), measure.Quantile(meds, 0.975)
}

var (
	benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op`)
	cpuMetric = regexp.MustCompile(`\s([\d.]+) cpu-ns/op`)
)

// runOnce runs one binary's benchmarks once and returns ns/op by name.
func runOnce(bin, bench, benchtime string) (map[string]float64, error) {
	cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", bench, "-test.benchtime", benchtime, "-test.benchmem")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", bin, err, out.String())
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if m := benchLine.FindStringSubmatch(sc.Text()); m != nil {
			ns, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return nil, err
			}
			got[m[1]] = ns
			if c := cpuMetric.FindStringSubmatch(sc.Text()); c != nil {
				if cpu, err := strconv.ParseFloat(c[1], 64); err == nil {
					got[m[1]+" cpu-ns/op"] = cpu
				}
			}
		}
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("%s: no benchmark results in\n%s", bin, out.String())
	}
	return got, nil
}

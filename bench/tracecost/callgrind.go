package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// callgrindFuncs are the functions whose own instructions per op
// -callgrind reports: the submit path and the trace hooks' places.
var callgrindFuncs = []string{
	"rocsync.(*Task).submit",
	"rocsync.(*Task).submitEntered",
	"rocsync.(*Task).afterSubmit",
	"queue.(*Queue).Dispatch",
	"queue.(*Queue).publishLocked",
	"queue.(*Queue).reserveWithLocked",
	"syncstate.(*Op).Begin",
	"syncstate.(*Op).Commit",
}

// instructions runs one benchmark of each binary under valgrind's
// callgrind, counting instructions only inside Task.submit, and prints
// each function's own instructions per op: unlike time, these do not
// depend on the host's load. (Functions whose loops depend on the
// emulated device's progress, such as the queue's retire, vary from run
// to run and are left out.)
func instructions(with, without, benchtime string) error {
	dir, err := os.MkdirTemp("", "tracecost-cg")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	per := map[string]map[string]float64{}
	for _, b := range []struct{ name, bin string }{{"compiled in", with}, {"compiled out", without}} {
		out := filepath.Join(dir, "cg.out")
		cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out,
			"--toggle-collect=github.com/rocsync/rocsync.(*Task).submit",
			b.bin, "-test.run", "^$", "-test.bench", "BenchmarkTraceOverhead$/^off$", "-test.benchtime", benchtime)
		// Callgrind trips over the signals of Go's asynchronous preemption.
		cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("valgrind %s: %w\n%s", b.bin, err, msg)
		}
		self, calls, err := parseCallgrind(out)
		if err != nil {
			return err
		}
		ops := calls["rocsync.(*Task).afterSubmit"] // once per op submitted
		if ops == 0 {
			return fmt.Errorf("%s: no op submitted under callgrind", b.bin)
		}
		per[b.name] = map[string]float64{}
		for _, f := range callgrindFuncs {
			per[b.name][f] = float64(self[f]) / float64(ops)
		}
		fmt.Printf("trace %s: %d ops\n", b.name, ops)
	}
	fmt.Printf("%-36s %12s %12s %8s\n", "own instructions per op", "compiled in", "compiled out", "extra")
	var extra float64
	for _, f := range callgrindFuncs {
		in, out := per["compiled in"][f], per["compiled out"][f]
		extra += in - out
		fmt.Printf("%-36s %12.1f %12.1f %+8.1f\n", f, in, out, in-out)
	}
	fmt.Printf("%-36s %12s %12s %+8.1f\n", "total", "", "", extra)
	return nil
}

var (
	cgFn    = regexp.MustCompile(`^(c?fn)=\((\d+)\)(?: (.*))?$`)
	cgCost  = regexp.MustCompile(`^\S+\s+(\d+)$`)
	cgCalls = regexp.MustCompile(`^calls=(\d+)`)
)

// parseCallgrind reads a callgrind output file (name compression on) and
// returns each function's own instruction count and how often it was
// called, by function name without the package path and without
// callgrind's recursion suffixes ('2).
func parseCallgrind(path string) (self, calls map[string]uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	names := map[string]string{}
	self, calls = map[string]uint64{}, map[string]uint64{}
	short := func(n string) string {
		n, _, _ = strings.Cut(n, "'")
		if i := strings.LastIndex(n, "/"); i >= 0 {
			n = n[i+1:]
		}
		return n
	}
	var cur, callee string
	inCall := false // the cost line after calls= belongs to the call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ln := sc.Text()
		if m := cgFn.FindStringSubmatch(ln); m != nil {
			if m[3] != "" {
				names[m[2]] = short(m[3])
			}
			if m[1] == "fn" {
				cur = names[m[2]]
			} else {
				callee = names[m[2]]
			}
			continue
		}
		if m := cgCalls.FindStringSubmatch(ln); m != nil {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			calls[callee] += n
			inCall = true
			continue
		}
		if m := cgCost.FindStringSubmatch(ln); m != nil && cur != "" {
			if inCall {
				inCall = false
				continue
			}
			n, _ := strconv.ParseUint(m[1], 10, 64)
			self[cur] += n
		}
	}
	return self, calls, sc.Err()
}

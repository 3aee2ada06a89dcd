// Command allreduce times back-to-back all-reduces (sum, float32) over N
// GPUs in two shapes: one process driving every GPU (NewCommunicator), and
// N processes of one GPU each meeting through a unique id
// (JoinCommunicator), the way a multi-process trainer runs. Each rank
// submits -batch all-reduces back to back and then synchronizes; the time
// per all-reduce is that round's time over -batch, and the table gives
// the median over -rounds rounds, with the bus bandwidth NCCL's tests
// report (2·(N-1)/N · bytes / time).
//
//	go run ./bench/allreduce -backend cuda -devices 4 -sizes 1MiB,256MiB
//
// In one process, -submit chooses how each all-reduce's parts are
// submitted: threads (the default: one locked thread per GPU) or group
// (one thread, inside ncclGroupStart/ncclGroupEnd),
// so that both can be timed, alternating, in one session.
//
// -raw times the one-process shape with NCCL and the CUDA driver alone,
// without rocsync: the floor of that shape, which rocsync's one-process
// figures are read against.
//
// With -procs the command re-executes itself once per rank beyond the
// first; the children's environment goes through nccl.ChildEnv, so NVLink
// multicast stays off in them. On the emulator the ranks of -procs are
// separate Opens in one process (the emulated machine is per process).
// After timing, every rank checks one all-reduce of known values.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rocsync/rocsync"
	_ "github.com/rocsync/rocsync/backends" // the ROCm, CUDA and emulator drivers
	"github.com/rocsync/rocsync/bench/internal/measure"
	"github.com/rocsync/rocsync/nccl"
)

// The variables that make a process a rank of a -procs run.
const (
	envID   = "ROCSYNC_ALLREDUCE_ID"
	envRank = "ROCSYNC_ALLREDUCE_RANK"
)

type config struct {
	backend rocsync.Backend
	devices int
	procs   bool
	raw     bool
	// lockstep, with -raw -submit threads: every rank's thread waits for
	// the others' calls after each all-reduce, as rocsync's AllReduce
	// returns only once every rank's part is submitted.
	lockstep bool
	sizes    []int // bytes
	rounds   int
	batch    int
	warmup   int
	policy   rocsync.Policy
	submit   rocsync.CommSubmit
	json     bool
}

// result is one message size in one shape.
type result struct {
	Shape     string  `json:"shape"`            // "1 process" or "N processes"
	Submit    string  `json:"submit,omitempty"` // one process: "group" or "threads"
	Backend   string  `json:"backend"`
	Devices   int     `json:"devices"`
	Bytes     int     `json:"bytes"`
	MedianUS  float64 `json:"median_us"` // per all-reduce
	P90US     float64 `json:"p90_us"`
	BusGBps   float64 `json:"bus_gb_per_s"`
	Rounds    int     `json:"rounds"`
	Batch     int     `json:"batch"`
	HostWaits uint64  `json:"host_waits_while_submitting"`
}

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	var ue usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		// The flag package printed the flags; asked for, not a failure.
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		os.Exit(1)
	}
}

// usageError is a bad command line: exit status 2, as the flag package's.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return usageError{err}
	}
	if id := os.Getenv(envID); id != "" {
		rank, err := strconv.Atoi(os.Getenv(envRank))
		if err != nil {
			return fmt.Errorf("%s: %w", envRank, err)
		}
		rs, err := joinedRank(cfg, id, rank)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(rs)
	}
	var rs []result
	switch {
	case cfg.raw:
		rs, err = rawOneProcess(cfg)
	case cfg.procs:
		rs, err = processes(cfg)
	default:
		rs, err = oneProcess(cfg)
	}
	if err != nil {
		return err
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rs)
	}
	printTable(stdout, rs)
	return nil
}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var backend, sizes, policy, submit string
	fs.StringVar(&backend, "backend", "auto", "auto, emulator, rocm or cuda")
	fs.IntVar(&cfg.devices, "devices", 2, "GPUs (ranks)")
	fs.BoolVar(&cfg.procs, "procs", false, "one process per GPU (JoinCommunicator) instead of one process over all")
	fs.BoolVar(&cfg.raw, "raw", false, "one process over all GPUs with NCCL and the CUDA driver alone, without rocsync (CUDA only; -submit applies)")
	fs.BoolVar(&cfg.lockstep, "lockstep", false, "with -raw -submit threads: each rank's thread waits for every rank's call after each all-reduce (rocsync's AllReduce's lock-step, without rocsync)")
	fs.StringVar(&sizes, "sizes", "1MiB,256MiB", "comma-separated message sizes per rank (B, KiB, MiB, GiB)")
	fs.IntVar(&cfg.rounds, "rounds", 30, "timed rounds per size")
	fs.IntVar(&cfg.batch, "batch", 20, "all-reduces submitted back to back per round")
	fs.IntVar(&cfg.warmup, "warmup", 3, "rounds before timing")
	fs.StringVar(&policy, "policy", "DeviceBridge", "policy")
	fs.StringVar(&submit, "submit", "threads", "one process: how a collective's parts are submitted, group (one thread, ncclGroupStart/End) or threads (one locked thread per GPU)")
	fs.BoolVar(&cfg.json, "json", false, "print JSON instead of the table")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.procs && set["submit"] {
		return cfg, errors.New("-submit is how one process submits its parts; -procs runs a process per GPU")
	}
	var err error
	if cfg.backend, err = rocsync.ParseBackend(backend); err != nil {
		return cfg, err
	}
	if cfg.policy, err = rocsync.ParsePolicy(policy); err != nil {
		return cfg, err
	}
	if cfg.submit, err = rocsync.ParseCommSubmit(submit); err != nil {
		return cfg, err
	}
	for s := range strings.SplitSeq(sizes, ",") {
		n, err := parseSize(s)
		if err != nil {
			return cfg, err
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	if cfg.raw && (cfg.procs || cfg.backend != rocsync.CUDA) {
		return cfg, fmt.Errorf("-raw runs one process on CUDA: give -backend cuda and no -procs")
	}
	if cfg.lockstep && (!cfg.raw || cfg.submit != rocsync.SubmitThreads) {
		return cfg, fmt.Errorf("-lockstep goes with -raw -submit threads")
	}
	if cfg.devices < 1 || cfg.rounds < 1 || cfg.batch < 1 || cfg.warmup < 0 {
		return cfg, fmt.Errorf("-devices, -rounds and -batch must be positive, -warmup not negative")
	}
	return cfg, nil
}

// parseSize reads "4096", "64KiB", "1MiB", "2GiB": a positive multiple of 4
// bytes (whole float32 elements).
func parseSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > math.MaxInt/mult || n*mult%4 != 0 {
		// n > MaxInt/mult: the product would overflow (and wrapped to a
		// small size that ran instead).
		return 0, fmt.Errorf("size %q: want a positive multiple of 4 bytes, such as 1MiB", s)
	}
	return n * mult, nil
}

// ranks is every local rank of one process: its devices, tasks and
// communicator.
type ranks struct {
	devs  []*rocsync.Device
	tasks []*rocsync.Task
	comm  *rocsync.Communicator
}

func (r *ranks) close() error {
	var err error
	if r.comm != nil {
		err = r.comm.Close()
	}
	for _, d := range r.devs {
		err = errors.Join(err, d.Close())
	}
	return err
}

func options(cfg config) rocsync.Options {
	return rocsync.Options{Backend: cfg.backend, Policy: cfg.policy, LogLevel: rocsync.LogOff,
		Emulator: rocsync.EmulatorOptions{Devices: cfg.devices}}
}

// oneProcess times the all-reduces with every GPU in this process.
func oneProcess(cfg config) ([]result, error) {
	devs, err := rocsync.OpenAll(options(cfg))
	if err != nil {
		return nil, err
	}
	r := &ranks{devs: devs}
	if len(devs) < cfg.devices {
		return nil, errors.Join(fmt.Errorf("%d devices asked for, %d present", cfg.devices, len(devs)), r.close())
	}
	for _, d := range devs[cfg.devices:] {
		_ = d.Close()
	}
	r.devs = devs[:cfg.devices]
	for _, d := range r.devs {
		t, err := d.NewTask()
		if err != nil {
			return nil, errors.Join(err, r.close())
		}
		r.tasks = append(r.tasks, t)
	}
	if r.comm, err = rocsync.NewCommunicator(r.tasks...); err != nil {
		return nil, errors.Join(err, r.close())
	}
	if err := r.comm.SetSubmit(cfg.submit); err != nil {
		return nil, errors.Join(err, r.close())
	}
	rs, err := timeSizes(cfg, r, 0, "1 process")
	for i := range rs {
		rs[i].Submit = cfg.submit.String()
	}
	return rs, errors.Join(err, r.close())
}

// joinedRank is one rank of a -procs run: GPU rank, joined through id.
func joinedRank(cfg config, idText string, rank int) ([]result, error) {
	id, err := rocsync.ParseUniqueID(idText)
	if err != nil {
		return nil, err
	}
	o := options(cfg)
	o.Device = rank
	if cfg.backend == rocsync.Emulator {
		// One emulated machine per Open: the rank's own one-GPU machine.
		o.Device, o.Emulator.Devices = 0, 1
	}
	d, err := rocsync.Open(o)
	if err != nil {
		return nil, err
	}
	r := &ranks{devs: []*rocsync.Device{d}}
	t, err := d.NewTask()
	if err != nil {
		return nil, errors.Join(err, r.close())
	}
	r.tasks = []*rocsync.Task{t}
	if r.comm, err = rocsync.JoinCommunicator(t, id, rank, cfg.devices); err != nil {
		return nil, errors.Join(err, r.close())
	}
	rs, err := timeSizes(cfg, r, rank, fmt.Sprintf("%d processes", cfg.devices))
	return rs, errors.Join(err, r.close())
}

// processes runs rank 0 here and the others as processes of this program
// (goroutines with their own Opens on the emulator), and reports rank 0's
// times.
func processes(cfg config) ([]result, error) {
	o := options(cfg)
	o.Emulator.Devices = 1
	d, err := rocsync.Open(o)
	if err != nil {
		return nil, err
	}
	id, err := d.NewUniqueID()
	if err = errors.Join(err, d.Close()); err != nil {
		return nil, err
	}
	if cfg.backend == rocsync.Emulator {
		out := make([][]result, cfg.devices)
		errs := make([]error, cfg.devices)
		var wg sync.WaitGroup
		for rank := range cfg.devices {
			wg.Go(func() { out[rank], errs[rank] = joinedRank(cfg, id.String(), rank) })
		}
		wg.Wait()
		return out[0], errors.Join(errs...)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var children []*exec.Cmd
	var outs []*strings.Builder
	for rank := 1; rank < cfg.devices; rank++ {
		env, err := nccl.ChildEnv(append(os.Environ(), envID+"="+id.String(), envRank+"="+strconv.Itoa(rank)))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(exe, os.Args[1:]...)
		cmd.Env = env
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			killAll(children)
			return nil, err
		}
		children, outs = append(children, cmd), append(outs, &out)
	}
	rs, err := joinedRank(cfg, id.String(), 0)
	if err != nil {
		killAll(children) // they would wait for rank 0 on the device
	}
	for i, c := range children {
		if werr := c.Wait(); werr != nil {
			err = errors.Join(err, fmt.Errorf("rank %d: %w\n%s", i+1, werr, outs[i].String()))
		}
	}
	return rs, err
}

func killAll(cmds []*exec.Cmd) {
	for _, c := range cmds {
		_ = c.Process.Kill()
	}
}

// timeSizes times every size on this process's ranks (first is the global
// rank of r's first device) and then checks one all-reduce's values.
func timeSizes(cfg config, r *ranks, first int, shape string) ([]result, error) {
	var out []result
	for _, size := range cfg.sizes {
		elems := size / 4
		arrays := make([]*rocsync.Array, len(r.devs))
		for i, d := range r.devs {
			a, err := d.Empty(1, elems, rocsync.Float32)
			if err != nil {
				return out, err
			}
			arrays[i] = a
		}
		// Zeros stay zeros however often they are summed.
		for i, a := range arrays {
			if err := r.tasks[i].Fill(a, 0); err != nil {
				return out, err
			}
		}
		per := make([]float64, 0, cfg.rounds)
		var waits uint64
		for round := 0; round < cfg.warmup+cfg.rounds; round++ {
			h0 := hostWaits(r.devs)
			t0 := time.Now()
			for range cfg.batch {
				if err := r.comm.AllReduce(rocsync.ReduceSum, arrays...); err != nil {
					return out, err
				}
			}
			h1 := hostWaits(r.devs)
			for _, t := range r.tasks {
				if err := t.Synchronize(); err != nil {
					return out, err
				}
			}
			if round >= cfg.warmup {
				per = append(per, measure.Micros(time.Since(t0))/float64(cfg.batch))
				waits += h1 - h0
			}
		}
		if err := checkSum(r, arrays, first, cfg.devices); err != nil {
			return out, fmt.Errorf("%d bytes: %w", size, err)
		}
		for _, a := range arrays {
			if err := a.Free(); err != nil {
				return out, err
			}
		}
		med := measure.Quantile(per, 0.5)
		res := result{Shape: shape, Backend: r.devs[0].Backend(), Devices: cfg.devices, Bytes: size, MedianUS: med,
			P90US: measure.Quantile(per, 0.9), Rounds: cfg.rounds, Batch: cfg.batch, HostWaits: waits}
		if med > 0 {
			res.BusGBps = 2 * float64(cfg.devices-1) / float64(cfg.devices) * float64(size) / (med * 1e3)
		}
		out = append(out, res)
	}
	return out, nil
}

func hostWaits(devs []*rocsync.Device) uint64 {
	var n uint64
	for _, d := range devs {
		n += d.Stats().HostWaitsTotal()
	}
	return n
}

// checkSum sets rank k's elements to k+1 (and the first to k+i for a
// varying pattern), all-reduces once, and checks the sums.
func checkSum(r *ranks, arrays []*rocsync.Array, first, nranks int) error {
	elems := arrays[0].Cols()
	for i, a := range arrays {
		host := make([]float32, elems)
		for j := range host {
			host[j] = float32(first+i+1) * float32(j%7+1)
		}
		if err := r.tasks[i].UploadFloat32(a, host); err != nil {
			return err
		}
	}
	if err := r.comm.AllReduce(rocsync.ReduceSum, arrays...); err != nil {
		return err
	}
	ranksSum := float32(nranks * (nranks + 1) / 2)
	for i, a := range arrays {
		got, err := a.Float32s()
		if err != nil {
			return err
		}
		for j, v := range got {
			if want := ranksSum * float32(j%7+1); v != want {
				return fmt.Errorf("rank %d: element %d is %g after the all-reduce, want %g", first+i, j, v, want)
			}
		}
	}
	return nil
}

func printTable(w io.Writer, rs []result) {
	if len(rs) == 0 {
		return
	}
	shape := rs[0].Shape
	if rs[0].Submit != "" {
		shape += ", submit " + rs[0].Submit
	}
	fmt.Fprintf(w, "all-reduce (sum, float32), %s, %d ranks, %s; %d back to back per round, median of %d rounds\n",
		rs[0].Backend, rs[0].Devices, shape, rs[0].Batch, rs[0].Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "bytes per rank\tµs per all-reduce\tp90\tbus GB/s\thost waits\t\n")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%d\t\n", r.Bytes, r.MedianUS, r.P90US, r.BusGBps, r.HostWaits)
	}
	tw.Flush()
}

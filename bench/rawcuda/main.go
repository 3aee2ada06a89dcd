// Command rawcuda is the baseline for rocsync's CUDA backend: the seed's
// programs written directly against the CUDA driver API and cuBLAS (the
// purego bindings in cuda/ and cublas/, nothing of rocsync above them), each
// iteration ended by one final stream synchronization. bench runs the same
// op sequences through rocsync, so the layer's overhead is the ratio of the
// two, measured side by side on one machine.
//
//	go run ./bench/rawcuda -json                 # 128×128, every program
//	go run ./bench/rawcuda -n 1024 -iters 500
//	go run ./bench/rawcuda -percall              # set the context per call, as rocsync does
//
// Programs (same inputs, shapes and checksums as bench):
//
//	matmul                 t1 = x·x, t2 = x·t1, t3 = x·t2 (cublasSgemm_v2), one stream
//	elementwise            t1 = x∘x, t2 = x∘t1, t3 = x∘t2 (rocsync_mul_f32), one stream
//	mixed/one-stream       (x∘x)·x, -repeat times, kernel and cuBLAS on one stream (Unified's shape)
//	mixed/event            the kernel on stream K, cuBLAS on stream L, ordered by
//	                       cuEventRecord + cuStreamWaitEvent (DeviceBridge's shape)
//	mixed/host-wait        the same two streams, ordered by cuEventRecord +
//	                       cuEventSynchronize (DeviceSide's shape)
//
// By default every driver call is made from one goroutine locked to its OS
// thread with the context made current once, which is what a C program
// does and the fastest a Go program can do. With -percall each call locks
// the thread and calls cuCtxSetCurrent first, as cuda.Ctx (and so rocsync)
// does to be correct from any goroutine.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/kernels"
)

type config struct {
	n, iters, warmup, repeat int
	seed                     uint64
	device                   int
	perCall                  bool
	json                     bool
	programs                 []string
}

// Meta describes the machine and the start-up costs.
type Meta struct {
	Tool           string  `json:"tool"`
	Device         string  `json:"device"`
	ComputeCap     string  `json:"compute_capability"`
	DriverVersion  int     `json:"driver_api_version"`
	CUBLAS         string  `json:"cublas"`
	CUBLASPath     string  `json:"cublas_path"`
	LibCUDA        string  `json:"libcuda"`
	PTX            string  `json:"ptx"`
	ContextPerCall bool    `json:"context_per_call"`
	InitMS         float64 `json:"cuinit_ms"`
	CtxRetainMS    float64 `json:"primary_ctx_retain_ms"`
	ModuleLoadMS   float64 `json:"module_load_first_ms"`
	ModuleLoad2MS  float64 `json:"module_load_second_ms"`
	CUBLASCreateMS float64 `json:"cublas_create_ms"`
	GoVersion      string  `json:"go_version"`
	GOMAXPROCS     int     `json:"gomaxprocs"`
}

// Result is one program, in bench's field names where they overlap.
type Result struct {
	Program          string  `json:"program"`
	Policy           string  `json:"policy"`
	Backend          string  `json:"backend"`
	Shape            string  `json:"shape"`
	N                int     `json:"n"`
	Iterations       int     `json:"iterations"`
	Warmup           int     `json:"warmup"`
	DispatchMedianUS float64 `json:"dispatch_median_us"`
	DispatchP90US    float64 `json:"dispatch_p90_us"`
	TotalMedianUS    float64 `json:"total_median_us"`
	TotalP90US       float64 `json:"total_p90_us"`
	TotalMinUS       float64 `json:"total_min_us"`
	TotalMeanUS      float64 `json:"total_mean_us"`
	HostWaitsPerIter float64 `json:"host_waits_per_iter"`
	MallocsPerIter   float64 `json:"go_mallocs_per_iter"`
	GCs              uint32  `json:"gcs"`
	Checksum         float64 `json:"checksum"`
	MaxRelErr        float64 `json:"max_rel_err_vs_cpu"`
}

// Output is what -json prints.
type Output struct {
	Meta    Meta     `json:"meta"`
	Results []Result `json:"results"`
}

func main() {
	var cfg config
	var progs string
	flag.IntVar(&cfg.n, "n", 128, "matrix size (n×n float32)")
	flag.IntVar(&cfg.iters, "iters", 1000, "measured iterations per program")
	flag.IntVar(&cfg.warmup, "warmup", 100, "warm-up iterations, not measured")
	flag.IntVar(&cfg.repeat, "repeat", 3, "repetitions of (x∘x)·x per mixed iteration (bench's default)")
	flag.Uint64Var(&cfg.seed, "seed", 1, "input seed (bench's inputs)")
	flag.IntVar(&cfg.device, "device", 0, "CUDA device ordinal")
	flag.BoolVar(&cfg.perCall, "percall", false, "lock the thread and set the context on every call, as rocsync does")
	flag.BoolVar(&cfg.json, "json", false, "print JSON")
	flag.StringVar(&progs, "programs", "matmul,elementwise,mixed/one-stream,mixed/event,mixed/host-wait", "comma-separated programs")
	flag.Parse()
	cfg.programs = strings.Split(progs, ",")
	out, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawcuda:", err)
		os.Exit(1)
	}
	if cfg.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return
	}
	m := out.Meta
	fmt.Printf("%s (cc %s), driver API %d, cuBLAS %s, %s PTX; context per call: %v\n", m.Device, m.ComputeCap, m.DriverVersion, m.CUBLAS, m.PTX, m.ContextPerCall)
	fmt.Printf("start-up: cuInit %.1f ms, primary context %.1f ms, first cuModuleLoadData %.1f ms (second %.1f ms), cublasCreate %.1f ms\n",
		m.InitMS, m.CtxRetainMS, m.ModuleLoadMS, m.ModuleLoad2MS, m.CUBLASCreateMS)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tshape\tdispatch med µs\tp90\ttotal med µs\tp90\tmin\tmallocs/it\tGCs\tchecksum\tmax rel err\t")
	for _, r := range out.Results {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.6g\t%.1e\t\n", r.Program, r.Shape, r.DispatchMedianUS, r.DispatchP90US,
			r.TotalMedianUS, r.TotalP90US, r.TotalMinUS, r.MallocsPerIter, r.GCs, r.Checksum, r.MaxRelErr)
	}
	tw.Flush()
}

// gpu is everything one program needs, with the call forms chosen by
// -percall.
type gpu struct {
	lib     *cuda.Lib
	ctx     *cuda.Ctx
	blas    *cublas.Lib
	h       cublas.Handle
	mul     cuda.Function
	pb      *cuda.ParamBlock
	perCall bool
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func run(cfg config) (*Output, error) {
	// One OS thread with the context current for the whole run.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var out Output
	m := &out.Meta
	m.Tool, m.ContextPerCall, m.GoVersion, m.GOMAXPROCS = "rawcuda", cfg.perCall, runtime.Version(), runtime.GOMAXPROCS(0)

	lib, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	m.LibCUDA = lib.Path()
	t := time.Now()
	if err := lib.Init(); err != nil {
		return nil, err
	}
	m.InitMS = ms(time.Since(t))
	if m.DriverVersion, err = lib.DriverVersion(); err != nil {
		return nil, err
	}
	dev, err := lib.DeviceGet(cfg.device)
	if err != nil {
		return nil, err
	}
	if m.Device, err = lib.DeviceName(dev); err != nil {
		return nil, err
	}
	major, minor, err := lib.ComputeCapability(dev)
	if err != nil {
		return nil, err
	}
	m.ComputeCap = fmt.Sprintf("%d.%d", major, minor)
	m.PTX = "sm_80"
	if major >= 9 {
		m.PTX = "sm_90"
	}
	t = time.Now()
	ctx, err := lib.PrimaryCtxRetain(dev)
	if err != nil {
		return nil, err
	}
	defer ctx.Release()
	if err := ctx.MakeCurrent(); err != nil {
		return nil, err
	}
	m.CtxRetainMS = ms(time.Since(t))

	ptx, err := kernels.PTX(m.PTX)
	if err != nil {
		return nil, err
	}
	t = time.Now()
	mod, err := lib.ModuleLoadData(ptx)
	if err != nil {
		return nil, err
	}
	m.ModuleLoadMS = ms(time.Since(t))
	defer lib.ModuleUnload(mod)
	t = time.Now()
	mod2, err := lib.ModuleLoadData(ptx)
	if err != nil {
		return nil, err
	}
	m.ModuleLoad2MS = ms(time.Since(t))
	_ = lib.ModuleUnload(mod2)
	mul, err := lib.ModuleGetFunction(mod, kernels.Mul.KernelName(kernels.F32))
	if err != nil {
		return nil, err
	}

	blas, err := cublas.Open()
	if err != nil {
		return nil, err
	}
	m.CUBLASPath = blas.Path()
	if a, b, c, err := blas.Version(); err == nil {
		m.CUBLAS = fmt.Sprintf("%d.%d.%d", a, b, c)
	}
	t = time.Now()
	h, err := blas.Create()
	if err != nil {
		return nil, err
	}
	m.CUBLASCreateMS = ms(time.Since(t))
	defer blas.Destroy(h)

	pb, err := cuda.NewParamBlock(kernels.KernargSize, []int{kernels.OffsetOut, kernels.OffsetA, kernels.OffsetB, kernels.OffsetAlpha, kernels.OffsetN})
	if err != nil {
		return nil, err
	}
	defer pb.Free()
	g := &gpu{lib: lib, ctx: ctx, blas: blas, h: h, mul: mul, pb: pb, perCall: cfg.perCall}
	for _, p := range cfg.programs {
		r, err := g.runProgram(cfg, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out.Results = append(out.Results, r)
	}
	return &out, nil
}

// The calls, in the form -percall chose.

func (g *gpu) launchMul(s cuda.Stream, out, a, b cuda.DevicePtr, n int) error {
	args := kernels.Args{Out: uint64(out), A: uint64(a), B: uint64(b), N: uint64(n)}
	args.Encode(g.pb.Bytes(), kernels.F32)
	grid := cuda.Dim3{X: uint32((n + 255) / 256), Y: 1, Z: 1}
	block := cuda.Dim3{X: 256, Y: 1, Z: 1}
	if g.perCall {
		return g.ctx.LaunchKernel(g.mul, grid, block, 0, s, g.pb.Params())
	}
	return g.lib.LaunchKernel(g.mul, grid, block, 0, s, g.pb.Params())
}

// matmul is row-major c = a·b (bench's MatMul): column-major cuBLAS
// computes cᵀ = bᵀ·aᵀ on the row-major buffers as they are.
func (g *gpu) matmul(s cuda.Stream, c, a, b cuda.DevicePtr, n int) error {
	if g.perCall {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := g.ctx.MakeCurrent(); err != nil {
			return err
		}
	}
	return g.blas.Sgemm(g.h, cublas.OpN, cublas.OpN, n, n, n, 1, b, n, a, n, 0, c, n)
}

func (g *gpu) setStream(s cuda.Stream) error { return g.blas.SetStream(g.h, s) }

func (g *gpu) record(e cuda.Event, s cuda.Stream) error {
	if g.perCall {
		return g.ctx.EventRecord(e, s)
	}
	return g.lib.EventRecord(e, s)
}

func (g *gpu) wait(s cuda.Stream, e cuda.Event) error {
	if g.perCall {
		return g.ctx.StreamWaitEvent(s, e)
	}
	return g.lib.StreamWaitEvent(s, e)
}

func (g *gpu) eventSync(e cuda.Event) error {
	if g.perCall {
		return g.ctx.EventSynchronize(e)
	}
	return g.lib.EventSynchronize(e)
}

func (g *gpu) streamSync(s cuda.Stream) error {
	if g.perCall {
		return g.ctx.StreamSynchronize(s)
	}
	return g.lib.StreamSynchronize(s)
}

func (g *gpu) runProgram(cfg config, name string) (Result, error) {
	n, nn := cfg.n, cfg.n*cfg.n
	r := Result{Program: name, Policy: "raw", Backend: "cuda-raw", N: n, Iterations: cfg.iters, Warmup: cfg.warmup,
		Shape: fmt.Sprintf("%dx%d", n, n)}
	lib := g.lib
	k, err := lib.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return r, err
	}
	defer lib.StreamDestroy(k)
	l, err := lib.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return r, err
	}
	defer lib.StreamDestroy(l)
	ev, err := lib.EventCreate(cuda.EventDisableTiming)
	if err != nil {
		return r, err
	}
	defer lib.EventDestroy(ev)

	host := inputMatrix(n, cfg.seed)
	nbuf := 1 + 2*max(cfg.repeat, 3)
	bufs := make([]cuda.DevicePtr, nbuf)
	for i := range bufs {
		if bufs[i], err = lib.MemAlloc(uint64(4 * nn)); err != nil {
			return r, err
		}
	}
	defer func() {
		for _, p := range bufs {
			_ = lib.MemFree(p)
		}
	}()
	x := bufs[0]
	if err := lib.MemcpyHtoD(x, unsafe.Pointer(&host[0]), uint64(4*nn)); err != nil {
		return r, err
	}
	if err := lib.StreamSynchronize(0); err != nil { // the pageable copy's DMA
		return r, err
	}

	var body func() error
	var final cuda.Stream
	var result cuda.DevicePtr
	var ref func() []float64
	hx := widen(host)
	switch name {
	case "matmul":
		final, result = l, bufs[3]
		if err := g.setStream(l); err != nil {
			return r, err
		}
		body = func() error {
			return errors.Join(g.matmul(l, bufs[1], x, x, n), g.matmul(l, bufs[2], x, bufs[1], n), g.matmul(l, bufs[3], x, bufs[2], n))
		}
		ref = func() []float64 { return refMatMul(hx, refMatMul(hx, refMatMul(hx, hx, n), n), n) }
	case "elementwise":
		final, result = k, bufs[3]
		body = func() error {
			return errors.Join(g.launchMul(k, bufs[1], x, x, nn), g.launchMul(k, bufs[2], x, bufs[1], nn), g.launchMul(k, bufs[3], x, bufs[2], nn))
		}
		ref = func() []float64 { return refMul(hx, refMul(hx, refMul(hx, hx))) }
	case "mixed/one-stream", "mixed/event", "mixed/host-wait":
		r.Shape = fmt.Sprintf("%dx%d, repeat %d", n, n, cfg.repeat)
		ks := k
		if name == "mixed/one-stream" {
			ks = l
		}
		if err := g.setStream(l); err != nil {
			return r, err
		}
		final, result = l, bufs[2*cfg.repeat]
		if name == "mixed/host-wait" {
			r.HostWaitsPerIter = float64(cfg.repeat)
		}
		body = func() error {
			for i := 0; i < cfg.repeat; i++ {
				sq, out := bufs[1+2*i], bufs[2+2*i]
				if err := g.launchMul(ks, sq, x, x, nn); err != nil {
					return err
				}
				switch name {
				case "mixed/event":
					if err := errors.Join(g.record(ev, k), g.wait(l, ev)); err != nil {
						return err
					}
				case "mixed/host-wait":
					if err := errors.Join(g.record(ev, k), g.eventSync(ev)); err != nil {
						return err
					}
				}
				if err := g.matmul(l, out, sq, x, n); err != nil {
					return err
				}
			}
			return nil
		}
		ref = func() []float64 { return refMatMul(refMul(hx, hx), hx, n) }
	default:
		return r, fmt.Errorf("unknown program %q", name)
	}

	dispatch := make([]float64, 0, cfg.iters)
	totals := make([]float64, 0, cfg.iters)
	var before, after runtime.MemStats
	for i := 0; i < cfg.warmup+cfg.iters; i++ {
		if i == cfg.warmup {
			runtime.ReadMemStats(&before)
		}
		t0 := time.Now()
		if err := body(); err != nil {
			return r, err
		}
		t1 := time.Now()
		if err := g.streamSync(final); err != nil {
			return r, err
		}
		t2 := time.Now()
		if i >= cfg.warmup {
			dispatch = append(dispatch, micros(t1.Sub(t0)))
			totals = append(totals, micros(t2.Sub(t0)))
		}
	}
	runtime.ReadMemStats(&after)
	r.MallocsPerIter = float64(after.Mallocs-before.Mallocs) / float64(cfg.iters)
	r.GCs = after.NumGC - before.NumGC
	r.DispatchMedianUS, r.DispatchP90US = quantile(dispatch, 0.5), quantile(dispatch, 0.9)
	r.TotalMedianUS, r.TotalP90US = quantile(totals, 0.5), quantile(totals, 0.9)
	r.TotalMinUS = slices.Min(totals)
	for _, v := range totals {
		r.TotalMeanUS += v / float64(len(totals))
	}

	got := make([]float32, nn)
	if err := lib.MemcpyDtoH(unsafe.Pointer(&got[0]), result, uint64(4*nn)); err != nil {
		return r, err
	}
	r.Checksum = checksum(got)
	want := ref()
	scale := 0.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range want {
		r.MaxRelErr = math.Max(r.MaxRelErr, math.Abs(want[i]-float64(got[i]))/scale)
	}
	if r.MaxRelErr > 1e-4 {
		return r, fmt.Errorf("wrong result: max relative error %g", r.MaxRelErr)
	}
	return r, nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Round(q*float64(len(s)-1)))]
}

// checksum and inputMatrix are bench's, so the checksums compare.
func checksum(v []float32) float64 {
	var s float64
	for i, x := range v {
		s += float64(x) * float64(i%7+1)
	}
	return s
}

func inputMatrix(n int, seed uint64) []float32 {
	out := make([]float32, n*n)
	x := seed*2862933555777941757 + 3037000493
	for i := range out {
		x = x*2862933555777941757 + 3037000493
		out[i] = (float32(x>>40)/float32(1<<24) - 0.5) / float32(n)
	}
	return out
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func refMul(a, b []float64) []float64 {
	c := make([]float64, len(a))
	for i := range a {
		c[i] = a[i] * b[i]
	}
	return c
}

func refMatMul(a, b []float64, n int) []float64 {
	c := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for k := 0; k < n; k++ {
			av := a[i*n+k]
			for j := 0; j < n; j++ {
				c[i*n+j] += av * b[k*n+j]
			}
		}
	}
	return c
}

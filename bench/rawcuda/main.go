// Command rawcuda is the baseline for rocsync's CUDA backend: the seed
// programs written directly against the CUDA driver API and cuBLAS (the
// purego bindings in cuda/ and cublas/, nothing of rocsync above them), each
// iteration ended by one final stream synchronization. The programs live in
// package bench/rawcuda/raw, which bench -paired-raw also runs, alternating
// their iterations with rocsync's in one process so that the layer's
// overhead is a ratio measured side by side.
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
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/rocsync/rocsync/bench/rawcuda/raw"
)

func main() {
	var cfg raw.Config
	var progs string
	var asJSON bool
	flag.IntVar(&cfg.N, "n", 128, "matrix size (n×n float32)")
	flag.IntVar(&cfg.Iters, "iters", 1000, "measured iterations per program")
	flag.IntVar(&cfg.Warmup, "warmup", 100, "warm-up iterations, not measured")
	flag.IntVar(&cfg.Repeat, "repeat", 3, "repetitions of (x∘x)·x per mixed iteration (bench's default)")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "input seed (bench's inputs)")
	flag.IntVar(&cfg.Device, "device", 0, "CUDA device ordinal")
	flag.BoolVar(&cfg.PerCall, "percall", false, "lock the thread and set the context on every call, as rocsync does")
	flag.BoolVar(&cfg.Graph, "graph", false, "also capture the single-stream programs (matmul, elementwise, chain99, mixed/one-stream) into CUDA graphs and replay them, alternating with the eager iterations")
	flag.BoolVar(&asJSON, "json", false, "print JSON")
	flag.StringVar(&progs, "programs", strings.Join(raw.Programs, ","), "comma-separated programs")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rawcuda: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	cfg.Programs = strings.Split(progs, ",")
	out, err := raw.Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawcuda:", err)
		os.Exit(1)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return
	}
	raw.WriteText(os.Stdout, out)
}

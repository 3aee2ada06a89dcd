package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/internal/measure"
	"github.com/rocsync/rocsync/bench/rawcuda/raw"
	"github.com/rocsync/rocsync/cublas"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/internal/cudadev/fakelib"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakelib.Cleanup()
	os.Exit(code)
}

func TestPairedFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-backend", "cuda", "-paired-raw", "-iters", "2000", "-warmup", "100"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.paired || cfg.rawPerCall || cfg.backend != rocsync.CUDA || cfg.iters != 2000 || cfg.warmup != 100 {
		t.Errorf("parsed %+v", cfg)
	}
	if !slices.Equal(cfg.programs, defaultPairedPrograms(false)) {
		t.Errorf("programs %q, want %q (mlp has no raw counterpart)", cfg.programs, defaultPairedPrograms(false))
	}
	if !slices.Equal(cfg.pairs, defaultPairs) {
		t.Errorf("pairs %v, want %v", cfg.pairs, defaultPairs)
	}

	// Explicit lists pair every program with every policy.
	cfg, err = parseFlags([]string{"-backend", "cuda", "-paired-raw", "-raw-percall", "-programs", "elementwise,mixed",
		"-policies", "SkipSameQueue,DeviceBridge,Unified", "-json-file", "x.json", "-cpuprofile", "cpu.out"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := []pair{
		{"elementwise", rocsync.SkipSameQueue, "elementwise"},
		{"elementwise", rocsync.DeviceBridge, "elementwise"},
		{"elementwise", rocsync.Unified, "elementwise"},
		{"mixed", rocsync.SkipSameQueue, "mixed/host-wait"},
		{"mixed", rocsync.DeviceBridge, "mixed/event"},
		{"mixed", rocsync.Unified, "mixed/one-stream"},
	}
	if !slices.Equal(cfg.pairs, want) || !cfg.rawPerCall || cfg.jsonFile != "x.json" || cfg.cpuProfile != "cpu.out" {
		t.Errorf("pairs %v, raw per call %v, json file %q, profile %q", cfg.pairs, cfg.rawPerCall, cfg.jsonFile, cfg.cpuProfile)
	}

	// Only mixed from the defaults.
	cfg, err = parseFlags([]string{"-backend", "cuda", "-paired-raw", "-programs", "mixed"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.pairs) != 3 || cfg.pairs[0].raw != "mixed/host-wait" {
		t.Errorf("pairs %v", cfg.pairs)
	}
	for _, p := range defaultPairs {
		if !slices.Contains(raw.Programs, p.raw) {
			t.Errorf("raw program %q is not one of %q", p.raw, raw.Programs)
		}
	}
}

// The paired mode compares with the CUDA driver API, so any other backend
// is a usage error that says so.
func TestPairedNeedsCUDA(t *testing.T) {
	for _, backend := range []string{"auto", "emulator", "rocm"} {
		var errOut bytes.Buffer
		err := run([]string{"-paired-raw", "-backend", backend}, &bytes.Buffer{}, &errOut)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Fatalf("-backend %s: got %v, want a usage error", backend, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "-backend cuda") || !strings.Contains(msg, backend) {
			t.Errorf("-backend %s: unclear error %q", backend, msg)
		}
	}
	// The default backend is auto.
	if err := run([]string{"-paired-raw"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "-backend cuda") {
		t.Errorf("no -backend: %v", err)
	}
}

func TestPairedBadFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"-paired-raw", "-backend", "cuda", "-programs", "mlp"},
		{"-paired-raw", "-backend", "cuda", "-programs", "matmul,mlp"},
		{"-paired-raw", "-backend", "cuda", "-policies", "WaitAlways"},
		{"-paired-raw", "-backend", "cuda", "-programs", "mixed", "-policies", "DeviceSide,WaitAlways"},
		{"-paired-raw", "-backend", "cuda", "-plot", "x.png"},
		{"-paired-raw", "-backend", "cuda", "-iters", "0"},
		{"-raw-percall", "-backend", "cuda"},
		{"-paired-raw", "-backend", "cuda", "-interleave"},
	} {
		err := run(bad, &bytes.Buffer{}, &bytes.Buffer{})
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", bad, err)
		}
	}
}

// Without libcuda the paired mode fails, naming what it was opening.
func TestPairedWithoutDriver(t *testing.T) {
	t.Setenv(cuda.EnvLibCUDA, filepath.Join(t.TempDir(), "libcuda.so.1"))
	err := run([]string{"-paired-raw", "-backend", "cuda", "-iters", "1"}, &bytes.Buffer{}, &bytes.Buffer{})
	var ue usageError
	if err == nil || errors.As(err, &ue) {
		t.Fatalf("got %v, want a run-time error", err)
	}
	if !errors.Is(err, rocsync.ErrUnavailable) || !errors.Is(err, cuda.ErrNoDriver) || !strings.Contains(err.Error(), "paired-raw") {
		t.Errorf("unclear error: %v", err)
	}
}

// fakeCUDA points the bindings at the fake libcuda and libcublas (host
// memory, kernels and sgemm run on the CPU, synchronously), or skips.
func fakeCUDA(t *testing.T) {
	t.Helper()
	p, err := fakelib.Build()
	if errors.Is(err, fakelib.ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(cuda.EnvLibCUDA, p.CUDA)
	t.Setenv(cublas.EnvLibCUBLAS, p.CUBLAS)
}

// The whole paired mode, end to end, on the fake CUDA libraries.
func TestPairedOnFakeCUDA(t *testing.T) {
	fakeCUDA(t)
	dir := t.TempDir()
	saved := filepath.Join(dir, "paired.json")
	var out, errOut bytes.Buffer
	if err := run([]string{"-paired-raw", "-backend", "cuda", "-n", "8", "-iters", "4", "-warmup", "1", "-json", "-json-file", saved,
		"-cpuprofile", filepath.Join(dir, "cpu.out"), "-cpuprofile-hz", "500"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var po pairedOutput
	if err := json.Unmarshal(out.Bytes(), &po); err != nil {
		t.Fatalf("-json: %v\n%s", err, out.String())
	}
	if b, err := os.ReadFile(saved); err != nil || !bytes.Equal(b, out.Bytes()) {
		t.Errorf("-json-file differs from -json (%v)", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "cpu.out")); err != nil || fi.Size() == 0 {
		t.Errorf("-cpuprofile: %v", err)
	}
	if po.Meta.Raw.Device == "" || po.Meta.Raw.DriverVersion == 0 || po.Meta.N != 8 || po.Meta.Iterations != 4 || po.Meta.AllocIters != 4 {
		t.Errorf("meta %+v", po.Meta)
	}
	if len(po.Pairs) != len(defaultPairs) {
		t.Fatalf("%d pairs, want %d", len(po.Pairs), len(defaultPairs))
	}
	for i, r := range po.Pairs {
		p := defaultPairs[i]
		if r.Program != p.program || r.Policy != p.policy.String() || r.RawProgram != p.raw {
			t.Errorf("pair %d is %s/%s/%s, want %v", i, r.Program, r.Policy, r.RawProgram, p)
		}
		if r.RawTotalMedianUS <= 0 || r.RocTotalMedianUS <= 0 || r.TotalRatio <= 0 || r.PairRatioMedian <= 0 ||
			r.RawTotalP90US < r.RawTotalMedianUS || r.RocTotalP90US < r.RocTotalMedianUS || r.RocP90OverMedian < 1 {
			t.Errorf("%s/%s: implausible times %+v", r.Program, r.Policy, r)
		}
		if wantOps := map[string]int{"matmul": 3, "elementwise": 3, "mixed": 6}[r.Program]; r.OpsPerIter != wantOps {
			t.Errorf("%s: %d ops per iteration, want %d", r.Program, r.OpsPerIter, wantOps)
		}
		if !r.SameChecksum || r.RawChecksum == 0 || r.RawMaxRelErr > 1e-5 {
			t.Errorf("%s/%s: checksums raw %v rocsync %v, raw error %g", r.Program, r.Policy, r.RawChecksum, r.RocChecksum, r.RawMaxRelErr)
		}
		wantWaits := 0.0
		if r.RawProgram == "mixed/host-wait" {
			wantWaits = 3
		}
		if r.RawHostWaitsPerIter != wantWaits {
			t.Errorf("%s: raw host waits %v", r.RawProgram, r.RawHostWaitsPerIter)
		}
		// The fake runs everything synchronously, so rocsync finds every
		// producer done and never waits; the device waits of
		// DeviceBridge are recorded all the same.
		if r.Policy == "Unified" && (r.RocHostWaitsPerIter != 0 || r.RocDeviceWaitsPerIter != 0) {
			t.Errorf("Unified made waits: %+v", r)
		}
	}

	// The table.
	out.Reset()
	if err := run([]string{"-paired-raw", "-backend", "cuda", "-n", "8", "-iters", "2", "-warmup", "0", "-programs", "elementwise",
		"-policies", "DeviceSide,Unified", "-raw-percall"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Logf("\n%s", s)
	for _, want := range []string{"raw context per call: true", "pair ratio med", "rocsync mallocs/it", "µs/op over raw", "elementwise  DeviceSide", "Unified"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

// raw's inputs and checksum are bench's, so their checksums compare.
func TestRawInputsAreBenchs(t *testing.T) {
	for _, n := range []int{1, 8, 33} {
		a, b := measure.InputMatrix(n, 5), measure.InputMatrix(n, 5)
		if !slices.Equal(a, b) {
			t.Fatalf("n=%d: inputs differ", n)
		}
		if measure.Checksum(a) != measure.Checksum(b) {
			t.Fatalf("n=%d: checksums differ", n)
		}
	}
}

func TestFillPairStats(t *testing.T) {
	rawT := []float64{10, 10, 10, 10, 20}
	rocT := []float64{11, 12, 11, 11, 20}
	rawD := []float64{1, 1, 1, 1, 1}
	rocD := []float64{2, 2, 2, 2, 2}
	var r pairResult
	fillPairStats(&r, rawD, rawT, rocD, rocT)
	if r.RawTotalMedianUS != 10 || r.RocTotalMedianUS != 11 || r.TotalRatio != 1.1 || r.DispatchRatio != 2 {
		t.Errorf("%+v", r)
	}
	if r.PairRatioMedian != 1.1 || r.DiffMedianUS != 1 || r.RawTotalMinUS != 10 || r.RocTotalP90US != 20 || r.RocP90OverMedian != 20.0/11 {
		t.Errorf("%+v", r)
	}
	if r.PerOpUS != 0 {
		t.Errorf("per-op cost without an op count: %v", r.PerOpUS)
	}
	// Per op: the median differences over the ops of one iteration.
	r = pairResult{OpsPerIter: 4}
	fillPairStats(&r, rawD, rawT, rocD, rocT)
	if r.PerOpUS != 0.25 || r.PerOpDispatchUS != 0.25 {
		t.Errorf("per op: total %v, dispatch %v, want 0.25 and 0.25", r.PerOpUS, r.PerOpDispatchUS)
	}
}

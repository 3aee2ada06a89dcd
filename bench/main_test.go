package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rocsync/rocsync"
)

// Small sizes keep the whole file well under 10 s with -race: the
// emulator's gemm is a plain loop.
var small = []string{"-backend", "emulator", "-n", "8", "-iters", "3", "-warmup", "1",
	"-batch", "8", "-in", "8", "-hidden", "8", "-out", "4", "-emu-delay", "0"}

func args(extra ...string) []string { return append(slices.Clone(small), extra...) }

// runJSON runs the command with -json and decodes its results.
func runJSON(t *testing.T, extra ...string) []result {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(args(append(extra, "-json")...), &out, &errOut); err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, errOut.String())
	}
	var o output
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("-json output does not parse: %v\n%s", err, out.String())
	}
	return o.Results
}

func TestEveryProgramUnderEveryPolicy(t *testing.T) {
	rs := runJSON(t)
	progs := []string{"matmul", "elementwise", "mixed", "mlp"}
	if len(rs) != len(progs)*5 {
		t.Fatalf("%d results, want %d", len(rs), len(progs)*5)
	}
	sums := map[string]float64{}
	for _, r := range rs {
		if !slices.Contains(progs, r.Program) {
			t.Errorf("unexpected program %q", r.Program)
		}
		if _, err := rocsync.ParsePolicy(r.Policy); err != nil {
			t.Error(err)
		}
		if r.Backend != "emulator" || r.Iterations != 3 || r.Warmup != 1 || r.Shape == "" {
			t.Errorf("%s/%s: backend %q, %d iterations, %d warm-up, shape %q", r.Program, r.Policy, r.Backend, r.Iterations, r.Warmup, r.Shape)
		}
		if r.DispatchMedianUS <= 0 || r.TotalMedianUS < r.DispatchMedianUS*0.5 || r.DispatchP90US < r.DispatchMedianUS {
			t.Errorf("%s/%s: implausible times %+v", r.Program, r.Policy, r)
		}
		if r.Checksum == 0 {
			t.Errorf("%s/%s: checksum is 0", r.Program, r.Policy)
		}
		if s, ok := sums[r.Program]; ok && s != r.Checksum {
			t.Errorf("%s: checksum %v under %s, %v before", r.Program, r.Checksum, r.Policy, s)
		}
		sums[r.Program] = r.Checksum
		if r.Policy == "WaitAlways" && (r.DispatchRatio != 1 || r.TotalRatio != 1) {
			t.Errorf("%s/WaitAlways: ratios %v, %v", r.Program, r.DispatchRatio, r.TotalRatio)
		}
		switch r.Policy {
		case "Unified", "DeviceBridge":
			if r.HostWaitsPerIter != 0 {
				t.Errorf("%s/%s: %.2f host waits per iteration, want 0", r.Program, r.Policy, r.HostWaitsPerIter)
			}
		case "DeviceSide", "SkipSameQueue":
			if r.HostWaitsPerIter > float64(r.Crossings) {
				t.Errorf("%s/%s: %.2f host waits per iteration, more than its %d crossings", r.Program, r.Policy, r.HostWaitsPerIter, r.Crossings)
			}
		}
	}
}

// -interleave runs every policy at once, one iteration each in turn: the
// same results, checksums and counts as one policy after another.
func TestInterleave(t *testing.T) {
	rs := runJSON(t, "-interleave", "-programs", "elementwise,mixed")
	if len(rs) != 10 {
		t.Fatalf("%d results, want 10", len(rs))
	}
	sums := map[string]float64{}
	for i, r := range rs {
		if want := []string{"WaitAlways", "SkipSameQueue", "DeviceSide", "Unified", "DeviceBridge"}[i%5]; r.Policy != want || !r.Interleaved {
			t.Errorf("result %d: %s, interleaved %v; want %s, interleaved", i, r.Policy, r.Interleaved, want)
		}
		if s, ok := sums[r.Program]; ok && s != r.Checksum {
			t.Errorf("%s: checksum %v under %s, %v before", r.Program, r.Checksum, r.Policy, s)
		}
		sums[r.Program] = r.Checksum
		if r.TotalMedianUS <= 0 || (r.Policy == "WaitAlways" && r.TotalRatio != 1) {
			t.Errorf("%+v", r)
		}
		if r.Program == "mixed" && r.Policy == "Unified" && r.HostWaitsPerIter != 0 {
			t.Errorf("mixed/Unified: %v host waits per iteration", r.HostWaitsPerIter)
		}
	}
	var out bytes.Buffer
	if err := run(args("-interleave", "-programs", "matmul", "-policies", "DeviceSide,Unified"), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "interleaved, one iteration of each in turn") {
		t.Errorf("the table does not say the policies were interleaved:\n%s", out.String())
	}
}

func TestTable(t *testing.T) {
	var out bytes.Buffer
	if err := run(args("-programs", "mixed,mlp", "-policies", "DeviceSide,Unified"), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"host waits", "device waits", "crossings", "per iteration", "median", "p90", "speed-up",
		"3 measured iterations", "1 warm-up", "mlp batch 8, in 8, hidden 8, out 4", "checksum",
		"the emulated device computes on this machine's"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	// Each table: two header lines and one row per program and policy.
	for _, row := range []string{"mixed DeviceSide", "mixed Unified", "mlp DeviceSide", "mlp Unified"} {
		n := 0
		for _, l := range strings.Split(s, "\n") {
			if f := strings.Fields(l); len(f) > 2 && strings.Join(f[:2], " ") == row {
				n++
			}
		}
		if n != 2 {
			t.Errorf("row %q appears %d times, want once in each table:\n%s", row, n, s)
		}
	}
}

func TestPlotWritesPNG(t *testing.T) {
	dir := t.TempDir()
	path, saved := filepath.Join(dir, "bench.png"), filepath.Join(dir, "bench.json")
	var out bytes.Buffer
	if err := run(args("-programs", "elementwise,mixed", "-plot", path, "-json-file", saved), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "host waits") {
		t.Errorf("no table on stdout with -json-file:\n%s", out.String())
	}
	var o output
	if b, err := os.ReadFile(saved); err != nil || json.Unmarshal(b, &o) != nil || len(o.Results) != 10 {
		t.Errorf("-json-file: %v, %d results", err, len(o.Results))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 1000 || b.Dy() < 400 {
		t.Errorf("image is %dx%d", b.Dx(), b.Dy())
	}
	colours := map[[4]uint32]int{}
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}]++
		}
	}
	if len(colours) < 6 {
		t.Errorf("only %d colours: the bars are missing", len(colours))
	}
}

func TestBadFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"-programs", "matmul,nope"},
		{"-policies", "DeviceSide,Sometimes"},
		{"-backend", "tpu"},
		{"-n", "0"},
		{"-iters", "-1"},
		{"-warmup", "-1"},
		{"-repeat", "0"},
		{"-batch", "0"},
		{"-hidden", "-3"},
		{"-emu-delay", "-1ms"},
		{"-emu-delay", "soon"},
		{"-plot", "chart.jpg"},
		{"-cpuprofile-hz", "0"},
		{"-no-such-flag"},
		{"stray"},
	} {
		var out, errOut bytes.Buffer
		err := run(bad, &out, &errOut)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", bad, err)
		}
		if out.Len() != 0 {
			t.Errorf("%q: wrote to stdout: %s", bad, out.String())
		}
		// The flag package's own errors come with the usage; bench's
		// checks of the values name the flag (main adds a pointer to -h).
		if ue.usagePrinted != strings.Contains(errOut.String(), "Usage: bench") {
			t.Errorf("%q: usagePrinted %v, stderr:\n%s", bad, ue.usagePrinted, errOut.String())
		}
	}
	var ue usageError
	if err := run([]string{"-no-such-flag"}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.As(err, &ue) || !ue.usagePrinted {
		t.Errorf("an unknown flag: %v, want the usage printed", err)
	}
}

// The emulator's transposed sgemm reads out of bounds when the batch is
// smaller than the layer widths; the bench refuses instead of crashing.
// A batch smaller than the layer widths makes the transposed gemms read
// operands shorter than k×n: they must stay in bounds.
func TestMLPSmallBatch(t *testing.T) {
	if err := run(args("-programs", "mlp", "-batch", "4"), &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

func TestCountCrossings(t *testing.T) {
	// The MLP step: the crossings are where a kernel first needs a gemm's
	// result or a gemm first needs a kernel's, each covering the ones an
	// earlier wait already ordered.
	s := newMLP(mlpSizes{8, 8, 8, 4}, 1)
	c := countCrossings(s.ops, len(s.specs))
	var names []string
	for _, i := range c.Ops {
		names = append(names, s.ops[i].dom.String()+" "+s.ops[i].name)
	}
	want := []string{"hsa Add", "hip Z2=H·W2", "hsa Add", "hip dW2=Hᵀ·dP", "hsa ReLUGrad", "hip dW1=Xᵀ·dZ1", "hsa AXPY"}
	if !slices.Equal(names, want) {
		t.Errorf("crossings at %q, want %q", names, want)
	}
	if c.Crossings != 7 || c.CrossDomainOps < c.Crossings {
		t.Errorf("%+v", c)
	}

	// (x∘x)·x with fresh arrays, three times: one crossing each.
	var ops []mlpOp
	for i := 0; i < 3; i++ {
		x, sq, out := 0, 1+2*i, 2+2*i
		ops = append(ops, mlpOp{name: "Mul", dom: kernelDomain, reads: []int{x, x}, write: sq},
			mlpOp{name: "gemm", dom: libraryDomain, reads: []int{sq, x}, write: out})
	}
	if c := countCrossings(ops, 7); c.Crossings != 3 || c.CrossDomainOps != 3 {
		t.Errorf("mixed: %+v, want 3 crossings", c)
	}

	// A kernel that writes what a gemm read waits for it (write after
	// read), and a second read by the gemm's stream needs nothing new.
	ops = []mlpOp{
		{dom: libraryDomain, reads: []int{0, 1}, write: 2},
		{dom: libraryDomain, reads: []int{0}, write: 3},
		{dom: kernelDomain, reads: []int{0}, write: 1}, // WAR on 1: crossing, covers the stream
		{dom: kernelDomain, reads: []int{3}, write: 0}, // WAR on 0 and RAW on 3: covered
	}
	if c := countCrossings(ops, 4); c.Crossings != 1 || c.CrossDomainOps != 2 || !slices.Equal(c.Ops, []int{2}) {
		t.Errorf("write after read: %+v", c)
	}
}

// With the device held behind the host (a large emulator delay), every
// crossing finds its producer still running, so DeviceSide's host waits
// match the crossings, and they happen exactly at the ops countCrossings
// names. A producer can still finish first when the host is descheduled
// (busy CI machines), so the count is checked within a margin; where the
// waits happen is checked exactly.
func TestMLPHostWaitsAreTheCrossings(t *testing.T) {
	cfg := config{mlp: mlpSizes{8, 8, 8, 4}, seed: 1}
	want := mlpCrossings(cfg)
	for _, pol := range []rocsync.Policy{rocsync.DeviceSide, rocsync.Unified, rocsync.DeviceBridge} {
		d, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, Policy: pol, LogLevel: rocsync.LogOff,
			Emulator: rocsync.EmulatorOptions{MaxDelay: 2 * time.Millisecond, Seed: 7}})
		if err != nil {
			t.Fatal(err)
		}
		tk := d.DefaultTask()
		st, err := setupMLP(d, tk, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := st.(*mlpState)
		const iters = 2
		waits := 0
		for it := 0; it < iters; it++ {
			s.step++
			s.corr1, s.corr2 = 10, 1000
			for i, op := range s.ops {
				before := tk.Stats()
				if err := op.run(tk, s.arrays); err != nil {
					t.Fatal(err)
				}
				n := int(tk.Stats().Sub(before).HostWaitsTotal())
				waits += n
				if n > 1 || (n == 1 && !slices.Contains(want.Ops, i)) {
					t.Errorf("%v: op %d (%s %s) waited %d times on the host; crossings are %v", pol, i, op.dom, op.name, n, want.Ops)
				}
			}
			if err := tk.Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
		s.free()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		switch pol {
		case rocsync.DeviceSide:
			t.Logf("DeviceSide: %d host waits in %d iterations of %d crossings", waits, iters, want.Crossings)
			if waits > iters*want.Crossings || waits < iters*want.Crossings/2 {
				t.Errorf("DeviceSide: %d host waits in %d iterations, want %d", waits, iters, iters*want.Crossings)
			}
		default:
			if waits != 0 {
				t.Errorf("%v: %d host waits, want 0", pol, waits)
			}
		}
	}
}

// The MLP's step on the device matches a float64 reference on the CPU, for
// a few steps: the gemm transposes, bias broadcasts, ReLU gradient and Adam
// chain are what the comments say. (Adam's update m̂/√v̂ hardly changes when
// every gradient is scaled by one constant, so this cannot check the loss's
// 2/batch factor; the rest it checks.)
func TestMLPMatchesCPUReference(t *testing.T) {
	sz := mlpSizes{batch: 12, in: 10, hidden: 9, out: 3}
	const steps = 3
	d, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tk := d.DefaultTask()
	st, err := setupMLP(d, tk, config{mlp: sz, seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*mlpState)
	defer s.free()
	var w1 *rocsync.Array
	for i := 0; i < steps; i++ {
		if w1, _, err = s.run(tk); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w1.Float32s()
	if err != nil {
		t.Fatal(err)
	}

	// The reference, from the same initial values.
	ref := newMLP(sz, 3)
	init := func(name string) []float64 {
		for _, sp := range ref.specs {
			if sp.name == name {
				out := make([]float64, len(sp.init))
				for i, v := range sp.init {
					out[i] = float64(v)
				}
				return out
			}
		}
		t.Fatalf("no array %q", name)
		return nil
	}
	b, in, h, o := sz.batch, sz.in, sz.hidden, sz.out
	X, Y := init("X"), init("Y")
	params := [][]float64{init("W1"), init("b1"), init("W2"), init("b2")}
	W1, B1, W2, B2 := params[0], params[1], params[2], params[3]
	ms, vs := make([][]float64, 4), make([][]float64, 4)
	for i, p := range params {
		ms[i], vs[i] = make([]float64, len(p)), make([]float64, len(p))
	}
	// c = op(a)·op(b), row-major; a is r×k (or k×r with ta).
	mm := func(a []float64, ar, ac int, ta bool, bm []float64, br, bc int, tb bool) []float64 {
		m, k := ar, ac
		if ta {
			m, k = ac, ar
		}
		n := bc
		if tb {
			n = br
		}
		c := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var sum float64
				for l := 0; l < k; l++ {
					av := a[i*ac+l]
					if ta {
						av = a[l*ac+i]
					}
					bv := bm[l*bc+j]
					if tb {
						bv = bm[j*bc+l]
					}
					sum += av * bv
				}
				c[i*n+j] = sum
			}
		}
		return c
	}
	colSum := func(a []float64, rows, cols int) []float64 {
		out := make([]float64, cols)
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				out[j] += a[i*cols+j]
			}
		}
		return out
	}
	for step := 1; step <= steps; step++ {
		Z1 := mm(X, b, in, false, W1, in, h, false)
		H := make([]float64, len(Z1))
		for i := range Z1 {
			Z1[i] += B1[i%h]
			H[i] = math.Max(Z1[i], 0)
		}
		P := mm(H, b, h, false, W2, h, o, false)
		dP := make([]float64, len(P))
		for i := range P {
			P[i] += B2[i%o]
			dP[i] = (P[i] - Y[i]) * 2 / float64(b)
		}
		dW2, db2 := mm(H, b, h, true, dP, b, o, false), colSum(dP, b, o)
		dH := mm(dP, b, o, false, W2, h, o, true)
		for i := range dH {
			if Z1[i] <= 0 {
				dH[i] = 0
			}
		}
		dW1, db1 := mm(X, b, in, true, dH, b, h, false), colSum(dH, b, h)
		c1 := 1 / (1 - math.Pow(adamBeta1, float64(step)))
		c2 := 1 / (1 - math.Pow(adamBeta2, float64(step)))
		for k, g := range [][]float64{dW1, db1, dW2, db2} {
			p, m, v := params[k], ms[k], vs[k]
			for i := range p {
				m[i] = adamBeta1*m[i] + (1-adamBeta1)*g[i]
				v[i] = adamBeta2*v[i] + (1-adamBeta2)*g[i]*g[i]
				p[i] -= adamLR * (m[i] * c1) / (math.Sqrt(v[i]*c2) + adamEps)
			}
		}
	}
	for i := range W1 {
		if diff := math.Abs(float64(got[i]) - W1[i]); diff > 1e-5+1e-4*math.Abs(W1[i]) {
			t.Fatalf("W1[%d] = %v after %d steps, reference %v", i, got[i], steps, W1[i])
		}
	}
}

// -replay runs every program and policy eagerly and replayed: replays
// compute what the eager runs computed (mlp: what other replays computed,
// its Adam corrections being recorded once) and make no more host waits
// than there are crossings.
func TestReplayFlag(t *testing.T) {
	rs := runJSON(t, "-replay", "-policies", "DeviceSide,Unified")
	if len(rs) != 4*2*2 {
		t.Fatalf("%d results, want 16", len(rs))
	}
	eager := map[string]result{}
	for _, r := range rs {
		key := r.Program + "/" + r.Policy
		if r.Mode == "" {
			eager[key] = r
			continue
		}
		if r.Mode != "replay" {
			t.Fatalf("%s: mode %q", key, r.Mode)
		}
		e, ok := eager[key]
		if !ok {
			t.Fatalf("%s: the replayed run came before the eager one", key)
		}
		if r.Program != "mlp" && r.Checksum != e.Checksum {
			t.Errorf("%s: replay checksum %v, eager %v", key, r.Checksum, e.Checksum)
		}
		// The replay/eager total ratio, per program and policy (mlp's is
		// a replayed training step against an eager one).
		if want := r.TotalMedianUS / e.TotalMedianUS; r.ReplayOverEager != want || e.ReplayOverEager != 0 {
			t.Errorf("%s: replay/eager %v, want %v (eager run's %v)", key, r.ReplayOverEager, want, e.ReplayOverEager)
		}
		// Like the eager runs (whose counts vary with timing: a crossing
		// that finds its producer complete skips the wait), at most one
		// host wait per crossing, and none under Unified.
		if r.HostWaitsPerIter > float64(r.Crossings) || (r.Policy == "Unified" && r.HostWaitsPerIter != 0) {
			t.Errorf("%s: %.2f host waits per replay for %d crossings", key, r.HostWaitsPerIter, r.Crossings)
		}
	}
	var out bytes.Buffer
	if err := run(args("-replay", "-programs", "mixed", "-policies", "DeviceSide"), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "DeviceSide replay") {
		t.Errorf("the table does not show the replayed run:\n%s", out.String())
	}
	// The replay/eager table: one row per replayed run, within 100 columns.
	out.Reset()
	if err := run(args("-replay", "-programs", "mlp", "-policies", "DeviceSide,DeviceBridge"), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	i := strings.Index(s, "Replayed against eager")
	if i < 0 {
		t.Fatalf("no replay/eager table:\n%s", s)
	}
	rows := 0
	for _, l := range strings.Split(s[i:], "\n") {
		if len([]rune(l)) > 100 {
			t.Errorf("line of %d columns: %q", len([]rune(l)), l)
		}
		if f := strings.Fields(l); len(f) == 5 && f[0] == "mlp" {
			rows++
			if f[1] != "DeviceSide" && f[1] != "DeviceBridge" {
				t.Errorf("row %q", l)
			}
		}
	}
	if rows != 2 || !strings.Contains(s, "replay/eager") {
		t.Errorf("%d replay/eager rows:\n%s", rows, s)
	}
	// Without -replay, no such table.
	out.Reset()
	if err := run(args("-programs", "elementwise", "-policies", "DeviceSide"), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "Replayed against eager") {
		t.Errorf("a replay/eager table without -replay:\n%s", out.String())
	}
}

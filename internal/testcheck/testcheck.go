// Package testcheck holds the numeric checks and inputs that the root
// package's tests and the conformance suites (internal/conformance) share.
// It imports no rocsync package, so that both can import it.
package testcheck

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// RandMatrix is an n×n matrix of values in [-0.5, 0.5), the same for the
// same seed.
func RandMatrix(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n*n)
	for i := range out {
		out[i] = r.Float32() - 0.5
	}
	return out
}

// RequireClose fails t unless every element of got is within rel times the
// largest magnitude of want of the element of want.
func RequireClose(t *testing.T, want []float64, got []float32, rel float64) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	scale := 0.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range want {
		if math.Abs(want[i]-float64(got[i])) > rel*scale+1e-30 {
			t.Fatalf("element %d: want %g, got %g (scale %g)", i, want[i], got[i], scale)
		}
	}
}

// RequireULP fails t unless got is within ulps units in the last place of
// want (NaN equals NaN); i names the element.
func RequireULP(t *testing.T, want, got, ulps float64, i int) {
	t.Helper()
	if want == got || (math.IsNaN(want) && math.IsNaN(got)) {
		return
	}
	ulp := math.Abs(math.Nextafter(want, math.Inf(1)) - want)
	if math.Abs(want-got) > ulps*ulp {
		t.Fatalf("element %d: want %v, got %v", i, want, got)
	}
}

// NoErr reports err on t without stopping it (for goroutines other than
// the test's) and says whether err was nil.
func NoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// Seq is the n values f(0), …, f(n-1).
func Seq(n int, f func(i int) float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// B2F is 1 for true and 0 for false.
func B2F(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// HangLimit is how long a test lets a call run before calling it a hang.
const HangLimit = 20 * time.Second

// Within runs fn and fails the test if it does not return in HangLimit.
func Within[T any](t *testing.T, what string, fn func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(HangLimit):
		t.Fatalf("%s hangs", what)
		panic("unreachable")
	}
}

// KeepDevices requires n of the devices just opened, skipping the test
// (after closing them) where there are fewer, and closes them when the
// test ends.
func KeepDevices[D interface{ Close() error }](t *testing.T, devs []D, n int) {
	t.Helper()
	if len(devs) < n {
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
		t.Skipf("needs %d GPUs, %d present (run it on a machine with more, such as nvidia-h200-x2)", n, len(devs))
	}
	t.Cleanup(func() {
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	})
}

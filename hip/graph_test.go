package hip

import (
	"errors"
	"testing"
)

// The hipGraph functions are optional: the fake libamdhip64 (like a HIP
// older than 4.3) exports none of them, and yet Open succeeds; the first
// graph call says ErrGraphsUnavailable, naming what is missing.
func TestGraphSymbolsOptional(t *testing.T) {
	l := fakeLib(t)
	_, err := l.StreamEndCapture(1)
	if !errors.Is(err, ErrGraphsUnavailable) {
		t.Fatalf("StreamEndCapture on a library without hipGraph: %v, want ErrGraphsUnavailable", err)
	}
	for _, f := range []func() error{
		func() error { return l.StreamBeginCapture(1, StreamCaptureModeRelaxed) },
		func() error { _, err := l.GraphInstantiate(1); return err },
		func() error { return l.GraphLaunch(1, 1) },
		func() error { return l.GraphDestroy(1) },
		func() error { return l.GraphExecDestroy(1) },
		func() error { _, err := l.StreamIsCapturing(1); return err },
	} {
		if err := f(); !errors.Is(err, ErrGraphsUnavailable) {
			t.Errorf("got %v, want ErrGraphsUnavailable", err)
		}
	}
	t.Log(err)
}

// Debian's HIP 5.2.3 exports every function GraphSymbols lists, and
// answers a bad handle with a typed error instead of crashing.
func TestGraphSymbolsResolveOnRealHIP(t *testing.T) {
	l := realLib(t)
	for i := range GraphSymbols {
		if _, err := l.graphSym(i); err != nil {
			t.Fatal(err)
		}
	}
	var herr *Error
	if _, err := l.GraphInstantiate(0); !errors.As(err, &herr) {
		t.Fatalf("hipGraphInstantiate(NULL graph): %v, want a *hip.Error", err)
	}
	t.Logf("hipGraphInstantiate(NULL graph): %v", herr)
}

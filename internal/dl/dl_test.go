package dl

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The bindings end their not-found errors with Attempts, so its text is
// the same one NotFoundError's own message ends with.
func TestNotFoundErrorSaysWhereItLooked(t *testing.T) {
	_, err := Open("libnothing", []string{"libnothing-rocsync-test.so.0"}, []string{"/nonexistent-rocsync-dir"})
	var nf *NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of a missing library: %v, want a *NotFoundError", err)
	}
	want := "tried /nonexistent-rocsync-dir/libnothing-rocsync-test.so.0, libnothing-rocsync-test.so.0 (last error: "
	if !strings.HasPrefix(nf.Attempts(), want) || !strings.HasSuffix(nf.Attempts(), ")") {
		t.Errorf("Attempts = %q, want it to start with %q", nf.Attempts(), want)
	}
	if got := err.Error(); got != "libnothing not found; "+nf.Attempts() {
		t.Errorf("Error = %q", got)
	}
	nf.Last = ""
	if got := nf.Attempts(); got != "tried /nonexistent-rocsync-dir/libnothing-rocsync-test.so.0, libnothing-rocsync-test.so.0" {
		t.Errorf("Attempts without a dlopen error = %q", got)
	}
}

func TestCUDAToolkitDirsStartWithUsrLocalCUDA(t *testing.T) {
	dirs := CUDAToolkitDirs()
	if !slices.Equal(dirs[:2], []string{"/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/lib64"}) {
		t.Errorf("CUDAToolkitDirs = %v", dirs)
	}
	versioned := dirs[2:]
	if !slices.IsSortedFunc(versioned, func(a, b string) int { return strings.Compare(b, a) }) {
		t.Errorf("versioned toolkits not newest first: %v", versioned)
	}
}

// LazySymbols resolves on first use, serves every name when all are there,
// and otherwise answers every call with one error naming what is missing.
func TestLazySymbolsResolveOnceAndNameWhatIsMissing(t *testing.T) {
	libc, err := Open("libc", []string{"libc.so.6"}, nil)
	if err != nil {
		t.Skipf("no libc.so.6 to resolve symbols in: %v", err)
	}
	var present LazySymbols
	for i := range 2 {
		a, err := present.Addr(libc.Handle, libc.Path, []string{"malloc", "free"}, i, errUnavailable)
		if err != nil || a == 0 {
			t.Fatalf("Addr(%d) = %#x, %v; want an address", i, a, err)
		}
	}
	var partial LazySymbols
	names := []string{"malloc", "rocsync_no_such_symbol"}
	_, first := partial.Addr(libc.Handle, libc.Path, names, 0, errUnavailable)
	if !errors.Is(first, errUnavailable) {
		t.Fatalf("Addr with a missing symbol: %v, want errUnavailable", first)
	}
	if want := "lacks [rocsync_no_such_symbol]"; !strings.Contains(first.Error(), want) || !strings.Contains(first.Error(), libc.Path) {
		t.Errorf("error %q does not name the library and %q", first, want)
	}
	if _, again := partial.Addr(libc.Handle, libc.Path, names, 0, errUnavailable); again != first {
		t.Errorf("second call's error %v is not the first's %v", again, first)
	}
}

var errUnavailable = errors.New("test: optional symbols unavailable")

package main

import (
	"os"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/internal/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A bad command line is exit status 2 before anything is fetched: an
// unknown release (it was found only after the releases before it were
// fetched, and exited 1) and arguments that would be ignored.
func TestBadCommandLines(t *testing.T) {
	cache := t.TempDir()
	for _, args := range [][]string{
		{"-cache", cache, "-release", "bogus"},
		{"-cache", cache, "-release", "sid,,trixie"},
		{"-cache", cache, "sid"},
	} {
		code, out := maintest.Run(t, args, nil)
		if code != 2 || !strings.Contains(out, "fetchroot:") {
			t.Errorf("fetchroot %q: exit %d, want 2:\n%s", args, code, out)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("a refused command line wrote into the cache: %v", ents)
	}
}

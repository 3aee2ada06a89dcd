package main

import (
	"strings"
	"testing"

	"github.com/rocsync/rocsync/internal/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// Arguments that would be ignored are a usage error (exit status 2).
func TestExtraArgumentsAreRefused(t *testing.T) {
	code, out := maintest.Run(t, []string{"extra"}, nil)
	if code != 2 || !strings.Contains(out, "unexpected arguments") {
		t.Errorf("rawcuda extra: exit %d, want 2:\n%s", code, out)
	}
}

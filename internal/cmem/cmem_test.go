package cmem

import (
	"testing"

	"github.com/ebitengine/purego"
)

func TestOpenLibcResolvesItsSymbols(t *testing.T) {
	h, err := OpenLibc()
	if err != nil || h == 0 {
		t.Fatalf("OpenLibc = %#x, %v", h, err)
	}
	for _, name := range []string{"calloc", "free", "getenv", "setenv"} {
		if _, err := purego.Dlsym(h, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

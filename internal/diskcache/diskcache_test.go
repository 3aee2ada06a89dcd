package diskcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testManifest = Manifest{Name: "manifest", Files: []string{"a", filepath.Join("sub", "b")}}

// counter builds an entry with fixed contents and counts its builds.
type counter struct{ builds int }

func (c *counter) build(dir string) error {
	c.builds++
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("alpha"), 0o644); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sub", "b"), []byte("beta"), 0o755)
}

func noLeftovers(t *testing.T, cache string) {
	t.Helper()
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".build-") || strings.Contains(e.Name(), ".corrupt-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// An entry is private, reused while it verifies, and rebuilt (never handed
// out) when a file changes, goes missing, or the manifest is missing or
// foreign.
func TestGetCachesVerifiesAndRebuilds(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	var c counter
	root, err := Get(cache, "k1", testManifest, c.build)
	if err != nil {
		t.Fatal(err)
	}
	if root != filepath.Join(cache, "k1") || c.builds != 1 {
		t.Fatalf("Get = %s after %d builds", root, c.builds)
	}
	for _, d := range []string{cache, root} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", d, fi.Mode().Perm(), err)
		}
	}
	for _, f := range append([]string{"manifest"}, testManifest.Files...) {
		if fi, err := os.Stat(filepath.Join(root, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", f, fi.Mode().Perm(), err)
		}
	}
	if again, err := Get(cache, "k1", testManifest, c.build); err != nil || again != root || c.builds != 1 {
		t.Errorf("second Get = %s, %v after %d builds; want the cached entry", again, err, c.builds)
	}
	for i, corrupt := range []func(){
		func() { _ = os.WriteFile(filepath.Join(root, "a"), []byte("alphA"), 0o600) },
		func() { _ = os.WriteFile(filepath.Join(root, "sub", "b"), []byte("bet"), 0o600) },
		func() { _ = os.Remove(filepath.Join(root, "a")) },
		func() { _ = os.Remove(filepath.Join(root, "manifest")) },
		func() { _ = os.WriteFile(filepath.Join(root, "manifest"), []byte("not a manifest\n"), 0o600) },
	} {
		corrupt()
		if testManifest.Verify(root) == nil {
			t.Fatalf("corruption %d still verifies", i)
		}
		before := c.builds
		if again, err := Get(cache, "k1", testManifest, c.build); err != nil || again != root || c.builds != before+1 {
			t.Fatalf("corruption %d: Get = %s, %v, builds %d -> %d; want a rebuild", i, again, err, before, c.builds)
		}
		if got, _ := os.ReadFile(filepath.Join(root, "a")); !bytes.Equal(got, []byte("alpha")) || testManifest.Verify(root) != nil {
			t.Errorf("corruption %d: entry not rebuilt whole", i)
		}
	}
	noLeftovers(t, cache)
}

// A foreign directory in an entry's place (no manifest) is replaced.
func TestGetReplacesForeignEntry(t *testing.T) {
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "k", "junk"), 0o755); err != nil {
		t.Fatal(err)
	}
	var c counter
	root, err := Get(cache, "k", testManifest, c.build)
	if err != nil || c.builds != 1 {
		t.Fatalf("Get = %s, %v after %d builds", root, err, c.builds)
	}
	if _, err := os.Stat(filepath.Join(root, "junk")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("foreign content kept: %v", err)
	}
	noLeftovers(t, cache)
}

// A manifest listing other files, or the same files in another order, is
// ErrCorrupt.
func TestVerifyRejectsOtherManifest(t *testing.T) {
	dir := t.TempDir()
	var c counter
	if err := c.build(dir); err != nil {
		t.Fatal(err)
	}
	if err := testManifest.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := testManifest.Verify(dir); err != nil {
		t.Fatalf("fresh manifest: %v", err)
	}
	for _, other := range []Manifest{
		{Name: "manifest", Files: []string{"a"}},
		{Name: "manifest", Files: []string{filepath.Join("sub", "b"), "a"}},
	} {
		if err := other.Verify(dir); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Verify with %v: %v, want ErrCorrupt", other.Files, err)
		}
	}
}

// A failed build's error comes back as it is, and leaves nothing behind; a
// build that omits a manifest file fails too.
func TestGetBuildFailureLeavesNothing(t *testing.T) {
	cache := t.TempDir()
	boom := errors.New("boom")
	if _, err := Get(cache, "k", testManifest, func(string) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Get with a failing build: %v, want boom", err)
	}
	if _, err := Get(cache, "k", testManifest, func(string) error { return nil }); err == nil {
		t.Error("Get with a build that wrote nothing succeeded")
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("failed builds left %d entries", len(ents))
	}
}

// A build that finishes after another Get of the same key has published a
// verified entry uses that entry: it must not move it aside as unverified
// while the other's caller reads it (a racing fetch then failed with
// ErrCorrupt: its entry vanished under its own final check).
func TestGetKeepsAnEntryPublishedDuringItsBuild(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	var first counter
	var published os.FileInfo
	root, err := Get(cache, "k", testManifest, func(dir string) error {
		// Another Get of the key runs to the end while this one builds.
		var other counter
		r, err := Get(cache, "k", testManifest, other.build)
		if err != nil {
			return err
		}
		if published, err = os.Stat(r); err != nil {
			return err
		}
		return first.build(dir)
	})
	if err != nil {
		t.Fatal(err)
	}
	now, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(published, now) {
		t.Error("the entry the other Get published was replaced")
	}
	if err := testManifest.Verify(root); err != nil {
		t.Error(err)
	}
	noLeftovers(t, cache)
}

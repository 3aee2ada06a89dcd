package diskcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// asAnotherUser makes every file look another user's (euid), until the
// test ends.
func asAnotherUser(t *testing.T) {
	real := euid
	euid = func() int { return real() + 1 }
	t.Cleanup(func() { euid = real })
}

// entryKinds are the two manifests, each with a build of its entries.
var entryKinds = []struct {
	name  string
	m     Entry
	build func(dir string) error
}{
	{"files", testManifest, new(counter).build},
	{"tree", testTree, buildTree},
}

// An entry that another user owns, or any file in it, is not used: it
// does not verify, and a cache directory of another user's is refused
// before anything in it is read. (Another owner is simulated; the test
// below makes real ones as root.)
func TestEntriesOfAnotherUserAreNotUsed(t *testing.T) {
	for _, k := range entryKinds {
		t.Run(k.name, func(t *testing.T) {
			cache := t.TempDir()
			root, err := Get(cache, "k", k.m, k.build)
			if err != nil {
				t.Fatal(err)
			}
			asAnotherUser(t)
			if err := k.m.Verify(root); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "owned by another user") {
				t.Errorf("Verify of another user's entry: %v", err)
			}
			if _, err := OwnDir(cache); err == nil || !strings.Contains(err.Error(), cache+" is owned by another user") {
				t.Errorf("OwnDir of another user's directory: %v", err)
			}
			built := false
			if _, err := Get(cache, "k", k.m, func(string) error { built = true; return nil }); err == nil || built {
				t.Errorf("Get in another user's cache directory: %v (built %v)", err, built)
			}
		})
	}
}

// As root: an entry chowned to another user, whole or one file of it, is
// rebuilt by the next Get, never used.
func TestEntriesChownedToAnotherUserAreRebuilt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	const nobody = 65534
	for _, k := range entryKinds {
		for _, what := range []string{"entry", "one file"} {
			t.Run(k.name+"/"+what, func(t *testing.T) {
				cache := t.TempDir()
				root, err := Get(cache, "k", k.m, k.build)
				if err != nil {
					t.Fatal(err)
				}
				target := root
				if what == "one file" {
					target = filepath.Join(root, k.m.(interface{ firstFile() string }).firstFile())
				}
				if err := os.Lchown(target, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				builds := 0
				again, err := Get(cache, "k", k.m, func(dir string) error { builds++; return k.build(dir) })
				if err != nil || again != root || builds != 1 {
					t.Fatalf("Get = %s, %v after %d builds; want a rebuild", again, err, builds)
				}
				if err := k.m.Verify(root); err != nil {
					t.Errorf("rebuilt entry: %v", err)
				}
				noLeftovers(t, cache)
			})
		}
	}
}

func (m Manifest) firstFile() string     { return m.Files[0] }
func (m TreeManifest) firstFile() string { return "usr/lib/libx.so.1.2" }

// An entry, or a file of it, that others may read or write, or a file
// replaced by a link (even to identical contents), does not verify, and
// Get rebuilds it.
func TestEntriesOpenToOthersAreRebuilt(t *testing.T) {
	for _, k := range entryKinds {
		for _, c := range []struct {
			what   string
			change func(root, file string) error
			says   string
		}{
			{"entry 0755", func(root, _ string) error { return os.Chmod(root, 0o755) }, "open to other users"},
			{"file 0644", func(_, file string) error { return os.Chmod(file, 0o644) }, ""},
			{"file a link to a copy", func(root, file string) error {
				data, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				cp := filepath.Join(filepath.Dir(root), "copy")
				if err := os.WriteFile(cp, data, 0o600); err != nil {
					return err
				}
				if err := os.Remove(file); err != nil {
					return err
				}
				return os.Symlink(cp, file)
			}, ""},
		} {
			t.Run(k.name+"/"+c.what, func(t *testing.T) {
				cache := filepath.Join(t.TempDir(), "cache")
				root, err := Get(cache, "k", k.m, k.build)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.change(root, filepath.Join(root, k.m.(interface{ firstFile() string }).firstFile())); err != nil {
					t.Fatal(err)
				}
				if err := k.m.Verify(root); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.says) {
					t.Errorf("Verify: %v, want ErrCorrupt saying %q", err, c.says)
				}
				builds := 0
				if again, err := Get(cache, "k", k.m, func(dir string) error { builds++; return k.build(dir) }); err != nil || again != root || builds != 1 {
					t.Fatalf("Get = %s, %v after %d builds; want a rebuild", again, err, builds)
				}
				if err := k.m.Verify(root); err != nil {
					t.Errorf("rebuilt entry: %v", err)
				}
			})
		}
	}
}

// A cache directory named through a link is refused, saying so.
func TestOwnDirRefusesALink(t *testing.T) {
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if _, err := OwnDir(link); err == nil || !strings.Contains(err.Error(), link+" is a symbolic link") {
		t.Errorf("OwnDir of a link: %v", err)
	}
}

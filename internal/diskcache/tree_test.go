package diskcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// buildTree fills dir with a small tree: files of several modes, a nested
// directory and relative links.
func buildTree(dir string) error {
	for _, f := range []struct {
		path string
		data string
		mode os.FileMode
	}{
		{"usr/lib/libx.so.1.2", "ELF x", 0o644},
		{"usr/lib64/ld.so", "loader", 0o755},
		{"usr/share/doc/x/copyright", "text", 0o444},
		{"etc/conf", "conf", 0o600},
	} {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	if err := os.Symlink("libx.so.1.2", filepath.Join(dir, "usr/lib/libx.so.1")); err != nil {
		return err
	}
	return os.Symlink("../lib/libx.so.1.2", filepath.Join(dir, "usr/lib64/libx.so"))
}

var testTree = TreeManifest{Name: "MANIFEST", Header: "packages:\nx 1.2 abc"}

func writtenTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := buildTree(dir); err != nil {
		t.Fatal(err)
	}
	if err := testTree.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := testTree.Verify(dir); err != nil {
		t.Fatalf("fresh tree: %v", err)
	}
	return dir
}

// Write makes the entry private: directories and executables 0700, other
// files 0600.
func TestTreeManifestWriteMakesEntryPrivate(t *testing.T) {
	dir := writtenTree(t)
	for path, want := range map[string]os.FileMode{
		"usr": 0o700, "usr/lib": 0o700, "usr/share/doc/x": 0o700,
		"usr/lib/libx.so.1.2": 0o600, "usr/lib64/ld.so": 0o700,
		"usr/share/doc/x/copyright": 0o600, "etc/conf": 0o600, "MANIFEST": 0o600,
	} {
		fi, err := os.Stat(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want || fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
}

// Every kind of change to an entry fails Verify with ErrCorrupt.
func TestTreeManifestVerifyDetectsChanges(t *testing.T) {
	for name, change := range map[string]func(dir string) error{
		"content, same size": func(d string) error {
			return os.WriteFile(filepath.Join(d, "usr/lib/libx.so.1.2"), []byte("ELF y"), 0o600)
		},
		"appended": func(d string) error {
			return os.WriteFile(filepath.Join(d, "etc/conf"), []byte("conf2"), 0o600)
		},
		"mode":        func(d string) error { return os.Chmod(filepath.Join(d, "usr/lib64/ld.so"), 0o600) },
		"dir mode":    func(d string) error { return os.Chmod(filepath.Join(d, "usr/share"), 0o755) },
		"extra file":  func(d string) error { return os.WriteFile(filepath.Join(d, "usr/lib/evil.so"), nil, 0o600) },
		"extra dir":   func(d string) error { return os.Mkdir(filepath.Join(d, "zzz"), 0o700) },
		"file gone":   func(d string) error { return os.Remove(filepath.Join(d, "etc/conf")) },
		"last gone":   func(d string) error { return os.RemoveAll(filepath.Join(d, "usr/share")) },
		"link target": func(d string) error { return relink(filepath.Join(d, "usr/lib/libx.so.1"), "/lib/libx.so.1.2") },
		"link to file": func(d string) error {
			p := filepath.Join(d, "usr/lib/libx.so.1")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.WriteFile(p, []byte("ELF x"), 0o600)
		},
		"manifest line edited": func(d string) error {
			return editManifest(d, func(s string) string { return strings.Replace(s, "f -rw-------", "f -rwx------", 1) })
		},
		"file and its manifest line changed together": func(d string) error {
			if err := os.WriteFile(filepath.Join(d, "etc/conf"), []byte("CONF"), 0o600); err != nil {
				return err
			}
			// A listing of the changed tree, spliced into the old manifest
			// without a new checksum.
			fresh := t.TempDir()
			if err := buildTree(fresh); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(fresh, "etc/conf"), []byte("CONF"), 0o600); err != nil {
				return err
			}
			if err := testTree.Write(fresh); err != nil {
				return err
			}
			b, err := os.ReadFile(filepath.Join(fresh, "MANIFEST"))
			if err != nil {
				return err
			}
			body, _, _ := cutLastLine(b)
			return editManifest(d, func(s string) string {
				_, sum, _ := cutLastLine([]byte(s))
				return string(body) + sum + "\n"
			})
		},
		"manifest truncated": func(d string) error {
			return editManifest(d, func(s string) string { return s[:len(s)/2] })
		},
		"manifest missing": func(d string) error { return os.Remove(filepath.Join(d, "MANIFEST")) },
		"foreign header": func(d string) error {
			return TreeManifest{Name: "MANIFEST", Header: "packages:\nx 1.3 def"}.Write(d)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := writtenTree(t)
			if err := change(dir); err != nil {
				t.Fatal(err)
			}
			err := testTree.Verify(dir)
			if err == nil {
				t.Fatal("Verify accepted a changed entry")
			}
			if name != "manifest missing" && !errors.Is(err, ErrCorrupt) {
				t.Errorf("Verify: %v, want ErrCorrupt", err)
			}
		})
	}
}

func relink(path, target string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	return os.Symlink(target, path)
}

func editManifest(dir string, edit func(string) string) error {
	p := filepath.Join(dir, "MANIFEST")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return os.WriteFile(p, []byte(edit(string(b))), 0o600)
}

// Write refuses links that leave the entry and files that are neither
// directories, regular files nor links.
func TestTreeManifestWriteRefusesEscapesAndSpecialFiles(t *testing.T) {
	for name, add := range map[string]func(dir string) error{
		"absolute link": func(d string) error { return os.Symlink("/usr/lib/libc.so.6", filepath.Join(d, "usr/lib/libc.so.6")) },
		"escaping link": func(d string) error { return os.Symlink("../../../etc/passwd", filepath.Join(d, "usr/lib/p")) },
		"parent link":   func(d string) error { return os.Symlink("..", filepath.Join(d, "up")) },
		"fifo":          func(d string) error { return syscall.Mkfifo(filepath.Join(d, "usr/fifo"), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := buildTree(dir); err != nil {
				t.Fatal(err)
			}
			if err := add(dir); err != nil {
				t.Fatal(err)
			}
			if err := testTree.Write(dir); !errors.Is(err, ErrUnsupportedFile) {
				t.Errorf("Write: %v, want ErrUnsupportedFile", err)
			}
		})
	}
}

// Get with a TreeManifest reuses a verified entry and rebuilds a changed
// or foreign one.
func TestGetWithTreeManifest(t *testing.T) {
	cache := t.TempDir()
	builds := 0
	build := func(dir string) error { builds++; return buildTree(dir) }
	root, err := Get(cache, "k", testTree, build)
	if err != nil || builds != 1 {
		t.Fatalf("Get = %s, %v after %d builds", root, err, builds)
	}
	if again, err := Get(cache, "k", testTree, build); err != nil || again != root || builds != 1 {
		t.Fatalf("second Get = %s, %v after %d builds; want the cached entry", again, err, builds)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/evil.so"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if again, err := Get(cache, "k", testTree, build); err != nil || again != root || builds != 2 {
		t.Fatalf("Get after a change = %s, %v after %d builds; want a rebuild", again, err, builds)
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/lib/evil.so")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the added file survived the rebuild: %v", err)
	}
	other := TreeManifest{Name: "MANIFEST", Header: "other"}
	if again, err := Get(cache, "k", other, build); err != nil || again != root || builds != 3 {
		t.Fatalf("Get with another header = %s, %v after %d builds; want a rebuild", again, err, builds)
	}
	if err := other.Verify(root); err != nil {
		t.Errorf("rebuilt entry: %v", err)
	}
	noLeftovers(t, cache)
}

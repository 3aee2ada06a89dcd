package rocmroot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rocsync/rocsync/internal/diskcache"
)

// fakeDeb is a package of the fake archive, built as a real .deb.
type fakeDeb struct {
	Package
	deps  []string
	files map[string]string // path -> content ("#!x" prefix: executable)
	links map[string]string // path -> target
	deb   []byte
}

// fakeArchive is a Source without network: a few tiny packages built with
// dpkg-deb, resolved and "downloaded" from memory.
type fakeArchive struct {
	mu       sync.Mutex
	pkgs     map[string][]*fakeDeb // newest first
	opened   int
	requests [][]string
	fetched  int
	// corrupt, when set, is a package whose download is damaged.
	corrupt string
}

func (a *fakeArchive) open(_ context.Context, suite, _ string) (Source, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.opened++
	return a, nil
}

func (a *fakeArchive) Versions(_ context.Context, names []string) (map[string][]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][]string{}
	for _, n := range names {
		for _, d := range a.pkgs[n] {
			out[n] = append(out[n], d.Version)
		}
	}
	return out, nil
}

func (a *fakeArchive) find(name, version string) (*fakeDeb, error) {
	for _, d := range a.pkgs[name] {
		if version == "" || d.Version == version {
			return d, nil
		}
	}
	return nil, fmt.Errorf("fake archive: no %s %q", name, version)
}

func (a *fakeArchive) Resolve(_ context.Context, requests []string) ([]Package, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = append(a.requests, requests)
	chosen := map[string]*fakeDeb{}
	var queue []*fakeDeb
	for _, r := range requests {
		name, ver, _ := strings.Cut(r, "=")
		d, err := a.find(name, ver)
		if err != nil {
			return nil, err
		}
		chosen[name] = d
		queue = append(queue, d)
	}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, dep := range d.deps {
			if chosen[dep] != nil {
				continue
			}
			dd, err := a.find(dep, "")
			if err != nil {
				return nil, err
			}
			chosen[dep] = dd
			queue = append(queue, dd)
		}
	}
	var out []Package
	for _, d := range chosen {
		out = append(out, d.Package)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (a *fakeArchive) Download(_ context.Context, pkgs []Package, dir string) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fetched++
	var paths []string
	for _, p := range pkgs {
		d, err := a.find(p.Name, p.Version)
		if err != nil {
			return nil, err
		}
		data := append([]byte(nil), d.deb...)
		if p.Name == a.corrupt {
			data[len(data)-1] ^= 1
		}
		path := filepath.Join(dir, debFileName(p))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func (a *fakeArchive) Close() error { return nil }

// buildDeb makes a real .deb of d with dpkg-deb.
func buildDeb(t *testing.T, d *fakeDeb) {
	t.Helper()
	if err := makeDeb(d); err != nil {
		t.Fatal(err)
	}
}

func makeDeb(d *fakeDeb) error {
	dir, err := os.MkdirTemp("", "rocmroot-fakedeb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "DEBIAN"), 0o755); err != nil {
		return err
	}
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: rocsync tests <tests@rocsync.invalid>\nDescription: fake\n", d.Name, d.Version, d.Arch)
	if err := os.WriteFile(filepath.Join(tree, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		return err
	}
	for p, content := range d.files {
		full := filepath.Join(tree, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(content, "#!x") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			return err
		}
	}
	for p, target := range d.links {
		full := filepath.Join(tree, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(target, full); err != nil {
			return err
		}
	}
	out := filepath.Join(dir, "p.deb")
	cmd := exec.Command("dpkg-deb", "--root-owner-group", "-Znone", "--build", tree, out)
	cmd.Env = toolEnv(nil)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb --build: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	d.deb, d.SHA256, d.Size = data, hex.EncodeToString(sum[:]), int64(len(data))
	return nil
}

const fakePins = `release fake fakesuite
want libhsa 2
want libhip 2
pin libc6 2
pin libdrm 1
want libblas 1 rocblas
`

// stdDebs are the fake archive's packages, built once.
var stdDebs = struct {
	once sync.Once
	err  error
	debs []*fakeDeb
}{debs: []*fakeDeb{
	{Package: Package{Name: "libc6", Version: "2", Arch: "amd64"},
		files: map[string]string{"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": "#!x loader", "usr/lib/x86_64-linux-gnu/libc.so.6": "libc 2"},
		links: map[string]string{"usr/lib64/ld-linux-x86-64.so.2": "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}},
	{Package: Package{Name: "libdrm", Version: "1", Arch: "all"}, deps: []string{"libc6"},
		files: map[string]string{"usr/lib/x86_64-linux-gnu/libdrm.so.2": "drm 1"}},
	{Package: Package{Name: "libhsa", Version: "2", Arch: "amd64"}, deps: []string{"libc6", "libdrm"},
		files: map[string]string{"usr/lib/x86_64-linux-gnu/libhsa.so.1.2": "hsa 2"},
		links: map[string]string{"usr/lib/x86_64-linux-gnu/libhsa.so.1": "/usr/lib/x86_64-linux-gnu/libhsa.so.1.2"}},
	{Package: Package{Name: "libhip", Version: "3", Arch: "amd64"}, deps: []string{"libhsa"},
		files: map[string]string{"usr/lib/x86_64-linux-gnu/libhip.so": "hip 3"}},
	{Package: Package{Name: "libhip", Version: "2", Arch: "amd64"}, deps: []string{"libhsa"},
		files: map[string]string{"usr/lib/x86_64-linux-gnu/libhip.so": "hip 2"}},
	{Package: Package{Name: "libblas", Version: "1", Arch: "amd64"}, deps: []string{"libhip"},
		files: map[string]string{"usr/lib/x86_64-linux-gnu/libblas.so": "blas 1"}},
}}

// newFakeArchive serves libc6 (with the loader, as Debian ships it: a
// link in usr/lib64), libdrm, libhsa (with an absolute link), libhip at
// versions 3 and 2, and libblas.
func newFakeArchive(t *testing.T) *fakeArchive {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not found:", err)
	}
	stdDebs.once.Do(func() {
		for _, d := range stdDebs.debs {
			if stdDebs.err = makeDeb(d); stdDebs.err != nil {
				return
			}
		}
	})
	if stdDebs.err != nil {
		t.Fatal(stdDebs.err)
	}
	a := &fakeArchive{pkgs: map[string][]*fakeDeb{}}
	for _, d := range stdDebs.debs {
		c := *d
		a.pkgs[d.Name] = append(a.pkgs[d.Name], &c)
	}
	return a
}

// withPins replaces the pin file for the test.
func withPins(t *testing.T, text string) {
	t.Helper()
	old := pinFile
	pinFile = text
	t.Cleanup(func() { pinFile = old })
}

type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) log(s string) { l.mu.Lock(); l.lines = append(l.lines, s); l.mu.Unlock() }

func (l *logLines) warnings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var w []string
	for _, s := range l.lines {
		if strings.Contains(s, "WARNING") {
			w = append(w, s)
		}
	}
	return w
}

func fakeOptions(a *fakeArchive, cache string, log *logLines) Options {
	return Options{Release: "fake", CacheDir: cache, Source: a.open, Log: log.log}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noLeftovers fails for temporary build or apt folders left in cache.
func noLeftovers(t *testing.T, cache string) {
	t.Helper()
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") || strings.Contains(e.Name(), ".corrupt-") {
			t.Errorf("left behind in the cache: %s", e.Name())
		}
	}
}

// A fetched root is the closure of the wanted packages at their pinned
// versions, unpacked under the key of its package list, private, without
// the downloaded .debs, with absolute links made relative and the loader
// inside it.
func TestFetchBuildsPrivateRoot(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	cache := filepath.Join(t.TempDir(), "roots")
	var log logLines
	r, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Built || r.Release != "fake" || r.Suite != "fakesuite" {
		t.Errorf("root %+v", r)
	}
	var names []string
	for _, p := range r.Packages {
		names = append(names, p.Name+"="+p.Version)
	}
	if got := strings.Join(names, " "); got != "libc6=2 libdrm=1 libhip=2 libhsa=2" {
		t.Errorf("packages %s; want the pinned closure without rocBLAS", got)
	}
	if len(a.requests) != 1 || strings.Join(a.requests[0], " ") != "libhsa=2 libhip=2" {
		t.Errorf("resolved %v", a.requests)
	}
	if r.Key != Key(r.Packages) || r.Entry != filepath.Join(cache, r.Key) || r.Dir != filepath.Join(r.Entry, "root") {
		t.Errorf("key %s entry %s dir %s", r.Key, r.Entry, r.Dir)
	}
	if got := readFile(t, filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/libhip.so")); got != "hip 2" {
		t.Errorf("libhip.so holds %q", got)
	}
	if target, err := os.Readlink(filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/libhsa.so.1")); err != nil || target != "libhsa.so.1.2" {
		t.Errorf("absolute link rewritten to %q (%v), want libhsa.so.1.2", target, err)
	}
	if got := readFile(t, r.Loader()); got != "#!x loader" {
		t.Errorf("loader holds %q", got)
	}
	if target, _ := os.Readlink(filepath.Join(r.Dir, "lib64")); target != "usr/lib64" {
		t.Errorf("lib64 -> %q, want the merged-/usr link usr/lib64", target)
	}
	if _, err := os.Stat(filepath.Join(r.Entry, "debs")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("downloaded packages kept: %v", err)
	}
	if len(log.warnings()) != 0 || len(r.Warnings) != 0 {
		t.Errorf("warnings for a pinned fetch: %q", log.warnings())
	}
	checkPrivate(t, cache)
	noLeftovers(t, cache)
}

// checkPrivate fails unless every folder under dir is 0700 and every file
// 0600, or 0700 where it is executable.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := info.Mode()
		switch {
		case m&fs.ModeSymlink != 0:
		case m.IsDir() && m.Perm() != 0o700:
			t.Errorf("%s: %v, want 0700", path, m)
		case m.IsRegular() && m.Perm() != 0o600 && m.Perm() != 0o700:
			t.Errorf("%s: %v, want 0600 or 0700", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A cached root of exactly the pinned packages is reused without opening
// the archive; Refresh opens it and resolves, but reuses the entry.
func TestFetchReusesCachedRoot(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	cache := t.TempDir()
	var log logLines
	first, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
	if err != nil {
		t.Fatal(err)
	}
	if again.Built || again.Dir != first.Dir || a.opened != 1 || a.fetched != 1 {
		t.Errorf("second Fetch: built %v dir %s, archive opened %d times, %d downloads; want the cache, no archive",
			again.Built, again.Dir, a.opened, a.fetched)
	}
	if again.Release != "fake" || again.Key != first.Key || len(again.Packages) != len(first.Packages) {
		t.Errorf("cached root %+v", again)
	}
	o := fakeOptions(a, cache, &log)
	o.Refresh = true
	fresh, err := Fetch(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Built || fresh.Dir != first.Dir || a.opened != 2 || a.fetched != 1 {
		t.Errorf("Refresh: built %v, archive opened %d times, %d downloads; want a resolve and the cached entry",
			fresh.Built, a.opened, a.fetched)
	}
}

// A root whose files changed, or whose manifest is gone or damaged, is
// rebuilt, never used.
func TestFetchRebuildsCorruptRoot(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	cache := t.TempDir()
	var log logLines
	r, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
	if err != nil {
		t.Fatal(err)
	}
	hip := filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/libhip.so")
	for name, corrupt := range map[string]func() error{
		"file changed":     func() error { return os.WriteFile(hip, []byte("hip X"), 0o600) },
		"file added":       func() error { return os.WriteFile(filepath.Join(r.Dir, "usr/lib/evil.so"), nil, 0o600) },
		"loader removed":   func() error { return os.Remove(filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")) },
		"manifest removed": func() error { return os.Remove(filepath.Join(r.Entry, "MANIFEST")) },
		"manifest damaged": func() error { return os.WriteFile(filepath.Join(r.Entry, "MANIFEST"), []byte("x\n"), 0o600) },
	} {
		if err := corrupt(); err != nil {
			t.Fatal(err)
		}
		before := a.fetched
		again, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !again.Built || again.Dir != r.Dir || a.fetched != before+1 {
			t.Errorf("%s: built %v dir %s after %d downloads; want a rebuild in place", name, again.Built, again.Dir, a.fetched-before)
		}
		if got := readFile(t, hip); got != "hip 2" {
			t.Errorf("%s: libhip.so holds %q after the rebuild", name, got)
		}
		if _, err := os.Lstat(filepath.Join(r.Dir, "usr/lib/evil.so")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: an added file survived: %v", name, err)
		}
	}
	noLeftovers(t, cache)
}

// An entry that was not built from the key's package list is refused: a
// foreign tree under the key (even with a manifest of its own), and a
// genuine root copied under another key.
func TestFetchRefusesForeignEntries(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	var log logLines
	probe, err := Fetch(context.Background(), fakeOptions(a, t.TempDir(), &log))
	if err != nil {
		t.Fatal(err)
	}
	key := probe.Key

	t.Run("foreign tree under the key", func(t *testing.T) {
		cache := t.TempDir()
		foreign := filepath.Join(cache, key)
		if err := os.MkdirAll(filepath.Join(foreign, "root/usr/lib64"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(foreign, "root/usr/lib64/ld-linux-x86-64.so.2"), []byte("evil"), 0o700); err != nil {
			t.Fatal(err)
		}
		other := []Package{{Name: "evil", Version: "1", Arch: "amd64", SHA256: strings.Repeat("0", 64), Size: 1}}
		if err := (diskcache.TreeManifest{Name: manifestName, Header: keyText(other)}).Write(foreign); err != nil {
			t.Fatal(err)
		}
		r, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Built || r.Dir != filepath.Join(foreign, "root") || readFile(t, r.Loader()) != "#!x loader" {
			t.Errorf("foreign entry used: built %v, loader %q", r.Built, readFile(t, r.Loader()))
		}
		noLeftovers(t, cache)
	})

	// A root another user owns (one library of it is enough) could have
	// been changed by them after it verified: it is rebuilt.
	t.Run("a library of the root owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a file away")
		}
		cache := t.TempDir()
		r, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
		if err != nil {
			t.Fatal(err)
		}
		const nobody = 65534
		if err := os.Lchown(r.Loader(), nobody, nobody); err != nil {
			t.Fatal(err)
		}
		again, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(again.Loader())
		if err != nil {
			t.Fatal(err)
		}
		if !again.Built || !diskcache.OwnedByUser(fi) {
			t.Errorf("a root with another user's file was used: built %v", again.Built)
		}
		noLeftovers(t, cache)
	})

	t.Run("genuine root under another key", func(t *testing.T) {
		cache := t.TempDir()
		r, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
		if err != nil {
			t.Fatal(err)
		}
		moved := filepath.Join(cache, strings.Repeat("a", 64))
		if err := os.Rename(r.Entry, moved); err != nil {
			t.Fatal(err)
		}
		opened := a.opened
		again, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
		if err != nil {
			t.Fatal(err)
		}
		if a.opened != opened+1 || !again.Built || again.Key != key {
			t.Errorf("an entry under a key its packages do not hash to was used: %+v", again)
		}
	})
}

// When the archive no longer serves a pinned version, the newest it serves
// is used, and a WARNING line names the package, the pinned and the used
// version; packages of the closure that differ from the pins are named
// too. The root still builds.
func TestFetchFallsBackLoudly(t *testing.T) {
	withPins(t, `release fake fakesuite
want libhsa 2
want libhip 1
pin libc6 1
pin libgone 5
`)
	a := newFakeArchive(t)
	var log logLines
	r, err := Fetch(context.Background(), fakeOptions(a, t.TempDir(), &log))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Version("libhip"); v != "3" {
		t.Errorf("libhip %s, want the newest served, 3", v)
	}
	want := []string{
		"rocmroot: WARNING: fake: the archive no longer serves libhip 1 (pinned); using the newest it serves, 3",
		"rocmroot: WARNING: fake: libc6 pinned 1; using 2",
		"rocmroot: WARNING: fake: libdrm 1 is in the closure but not in the pin file",
		"rocmroot: WARNING: fake: libgone 5 (pinned) is no longer in the closure",
	}
	got := log.warnings()
	if strings.Join(got, "\n") != strings.Join(want, "\n") || strings.Join(r.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := readFile(t, filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu/libhip.so")); got != "hip 3" {
		t.Errorf("libhip.so holds %q", got)
	}
}

// A wanted package the archive does not serve at all is ErrNotServed.
func TestFetchUnservedPackage(t *testing.T) {
	withPins(t, "release fake fakesuite\nwant libhsa 2\nwant libgone 1\n")
	a := newFakeArchive(t)
	cache := t.TempDir()
	var log logLines
	if _, err := Fetch(context.Background(), fakeOptions(a, cache, &log)); !errors.Is(err, ErrNotServed) {
		t.Errorf("Fetch: %v, want ErrNotServed", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("left %d entries", len(ents))
	}
}

// A download that differs from the index, an unpacking failure or an
// unreachable archive fails the fetch and leaves nothing in the cache.
func TestFetchFailuresLeaveNothing(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	var log logLines
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		setup func(o *Options)
		want  error
	}{
		"corrupt download": {func(o *Options) { a.corrupt = "libhsa" }, ErrDownload},
		"unpack fails": {func(o *Options) {
			o.Unpack = func(ctx context.Context, deb, dir string) error {
				if strings.HasPrefix(filepath.Base(deb), "libhip") {
					return boom
				}
				return dpkgUnpack(ctx, deb, dir)
			}
		}, boom},
		"archive unreachable": {func(o *Options) {
			o.Source = func(context.Context, string, string) (Source, error) {
				return nil, fmt.Errorf("%w: no network", ErrArchiveUnreachable)
			}
		}, ErrArchiveUnreachable},
	} {
		t.Run(name, func(t *testing.T) {
			a.corrupt = ""
			cache := t.TempDir()
			o := fakeOptions(a, cache, &log)
			tc.setup(&o)
			if _, err := Fetch(context.Background(), o); !errors.Is(err, tc.want) {
				t.Errorf("Fetch: %v, want %v", err, tc.want)
			}
			if ents, _ := os.ReadDir(cache); len(ents) != 0 {
				t.Errorf("left %d entries", len(ents))
			}
		})
	}
}

// A package link that leaves the root fails the build.
func TestFetchRefusesEscapingLink(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	bad := &fakeDeb{Package: Package{Name: "libhip", Version: "2", Arch: "amd64"}, deps: []string{"libhsa"},
		links: map[string]string{"usr/lib/x86_64-linux-gnu/libhip.so": "../../../../etc/passwd"}}
	buildDeb(t, bad)
	a.pkgs["libhip"][1] = bad
	cache := t.TempDir()
	var log logLines
	if _, err := Fetch(context.Background(), fakeOptions(a, cache, &log)); !errors.Is(err, diskcache.ErrUnsupportedFile) {
		t.Errorf("Fetch: %v, want ErrUnsupportedFile", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("left %d entries", len(ents))
	}
}

// rocBLAS is fetched only when asked for, into a root of its own key.
func TestFetchRocBLASOnlyWhenAsked(t *testing.T) {
	withPins(t, fakePins+"pin libblas-dep 1 rocblas\n")
	a := newFakeArchive(t)
	cache := t.TempDir()
	var log logLines
	base, err := Fetch(context.Background(), fakeOptions(a, cache, &log))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := base.Version("libblas"); ok {
		t.Error("rocBLAS fetched by default")
	}
	o := fakeOptions(a, cache, &log)
	o.Groups = []Group{RocBLAS}
	blas, err := Fetch(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := blas.Version("libblas"); v != "1" || blas.Key == base.Key {
		t.Errorf("with RocBLAS: libblas %q, key %s (base %s)", v, blas.Key, base.Key)
	}
	if w := log.warnings(); len(w) != 1 || !strings.Contains(w[0], "libblas-dep 1 (pinned) is no longer in the closure") {
		t.Errorf("warnings %q", w)
	}
}

// Fetches racing for the same root all get it whole.
func TestFetchConcurrent(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	cache := t.TempDir()
	var log logLines
	var wg sync.WaitGroup
	roots := make([]*Root, 3)
	errs := make([]error, 3)
	for i := range roots {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			roots[i], errs[i] = Fetch(context.Background(), fakeOptions(a, cache, &log))
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		if roots[i].Dir != roots[0].Dir || readFile(t, filepath.Join(roots[i].Dir, "usr/lib/x86_64-linux-gnu/libhip.so")) != "hip 2" {
			t.Errorf("fetch %d: %s", i, roots[i].Dir)
		}
	}
	m := diskcache.TreeManifest{Name: manifestName, Header: keyText(roots[0].Packages)}
	if err := m.Verify(roots[0].Entry); err != nil {
		t.Error(err)
	}
	noLeftovers(t, cache)
}

// The key hashes the package list, not its order; any change of a name,
// version, architecture, size or SHA-256 changes it.
func TestKeyIsContentHashOfPackageList(t *testing.T) {
	pkgs := []Package{
		{Name: "libc6", Version: "2.43-7", Arch: "amd64", SHA256: strings.Repeat("a", 64), Size: 10},
		{Name: "libamdhip64-6", Version: "6.4.3-5", Arch: "amd64", SHA256: strings.Repeat("b", 64), Size: 20},
	}
	k := Key(pkgs)
	if Key([]Package{pkgs[1], pkgs[0]}) != k {
		t.Error("Key depends on the order")
	}
	for _, change := range []func(p *Package){
		func(p *Package) { p.Name = "libc6x" },
		func(p *Package) { p.Version = "2.43-8" },
		func(p *Package) { p.Arch = "all" },
		func(p *Package) { p.SHA256 = strings.Repeat("c", 64) },
		func(p *Package) { p.Size = 11 },
	} {
		q := append([]Package(nil), pkgs...)
		change(&q[0])
		if Key(q) == k {
			t.Errorf("Key unchanged by %+v", q[0])
		}
	}
	if Key(pkgs[:1]) == k {
		t.Error("Key unchanged by a removed package")
	}
	if got, ok := parseKeyText(keyText(pkgs)); !ok || Key(got) != k {
		t.Errorf("parseKeyText(keyText) = %v, %v", got, ok)
	}
}

// Temporary folders that a killed fetch left behind are removed once they
// are a day old; younger ones (another fetch's, in progress) and entries
// stay.
func TestFetchRemovesStaleTemporaryFolders(t *testing.T) {
	withPins(t, fakePins)
	a := newFakeArchive(t)
	cache := t.TempDir()
	old := time.Now().Add(-25 * time.Hour)
	for _, n := range []string{".apt-sid-1", ".build-2", "x.corrupt-.build-3", ".apt-sid-young", ".build-young", strings.Repeat("b", 64)} {
		p := filepath.Join(cache, n)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(n, "young") && n != strings.Repeat("b", 64) {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	var log logLines
	if _, err := Fetch(context.Background(), fakeOptions(a, cache, &log)); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if len(e.Name()) != 64 || e.Name() == strings.Repeat("b", 64) {
			left = append(left, e.Name())
		}
	}
	sort.Strings(left)
	if want := []string{".apt-sid-young", ".build-young", strings.Repeat("b", 64)}; strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("left %v, want %v", left, want)
	}
}

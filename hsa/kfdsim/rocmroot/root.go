package rocmroot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rocsync/rocsync/internal/diskcache"
)

// CacheEnv names the environment variable that chooses the cache folder;
// without it roots live in os.UserCacheDir()/rocsync/rocm-roots.
const CacheEnv = "ROCSYNC_ROCM_ROOTS"

// ErrNoLoader is matched (errors.Is) by the error for a root without a
// dynamic loader of its own (usr/lib64/ld-linux-x86-64.so.2) inside it.
var ErrNoLoader = errors.New("rocmroot: the root has no loader of its own")

// layout names the unpacking rules of an entry; it is part of the key, so
// a change to them gives new entries.
const layout = "rocmroot layout 1"

const (
	manifestName = "MANIFEST"
	treeName     = "root"
	loaderPath   = "usr/lib64/ld-linux-x86-64.so.2"
)

// libraryDirs are the root's library folders, in search order.
var libraryDirs = []string{"usr/lib/x86_64-linux-gnu", "usr/lib"}

// DefaultCacheDir is $ROCSYNC_ROCM_ROOTS, or os.UserCacheDir()/rocsync/rocm-roots.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	return diskcache.UserDir("rocm-roots")
}

// Options choose a root and say how to fetch it.
type Options struct {
	// Release is a release of the pin file: "trixie" or "sid".
	Release string
	// Groups adds optional package sets (RocBLAS).
	Groups []Group
	// CacheDir holds the roots; "" is DefaultCacheDir.
	CacheDir string
	// Refresh consults the archive even when a verified root of exactly
	// the pinned packages is cached (which is otherwise used as it is,
	// without the network).
	Refresh bool
	// Source opens the package archive for a suite, with working files
	// under parent; nil is NewAptSource.
	Source func(ctx context.Context, suite, parent string) (Source, error)
	// Unpack unpacks a .deb into dir; nil runs dpkg-deb -x.
	Unpack func(ctx context.Context, deb, dir string) error
	// Log receives progress lines and the WARNING lines about versions
	// that differ from the pins; nil writes them to standard error.
	Log func(line string)
}

// Root is an unpacked release: its own loader, libc and ROCm libraries.
type Root struct {
	// Release and Suite name what it was fetched as.
	Release, Suite string
	// Dir is the unpacked tree (Dir/usr/lib/x86_64-linux-gnu holds the
	// libraries); Entry the cache entry around it; Key the entry's name,
	// the SHA-256 of the package list.
	Dir, Entry, Key string
	// Packages are the root's packages, sorted by name.
	Packages []Package
	// Built says the root was built by this call, not reused.
	Built bool
	// Warnings are the WARNING lines the fetch logged.
	Warnings []string
}

// Version returns the version of the named package in the root.
func (r *Root) Version(name string) (string, bool) {
	for _, p := range r.Packages {
		if p.Name == name {
			return p.Version, true
		}
	}
	return "", false
}

// keyText is the package list a root's key hashes; it is also the header
// of its manifest.
func keyText(pkgs []Package) string {
	var b strings.Builder
	b.WriteString(layout + "\n")
	for _, p := range sortedPackages(pkgs) {
		fmt.Fprintf(&b, "package %s %s %s %s %d\n", p.Name, p.Version, p.Arch, p.SHA256, p.Size)
	}
	return b.String()
}

// Key is the cache key of a package list: the SHA-256 of its names,
// versions, architectures, sizes and SHA-256s (and the unpacking rules).
func Key(pkgs []Package) string {
	sum := sha256.Sum256([]byte(keyText(pkgs)))
	return hex.EncodeToString(sum[:])
}

// parseKeyText inverts keyText; ok is false for text keyText cannot give.
func parseKeyText(text string) ([]Package, bool) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 2 || lines[0] != layout {
		return nil, false
	}
	var pkgs []Package
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] != "package" {
			return nil, false
		}
		size, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil {
			return nil, false
		}
		pkgs = append(pkgs, Package{Name: f[1], Version: f[2], Arch: f[3], SHA256: f[4], Size: size})
	}
	if keyText(pkgs) != text {
		return nil, false
	}
	return pkgs, true
}

func (o *Options) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if o.Log != nil {
		o.Log(line)
		return
	}
	fmt.Fprintln(os.Stderr, line)
}

// Fetch returns the release's root from the cache, building it from the
// archive when no verified entry exists. A cached root of exactly the
// pinned packages is used without the network (unless Refresh). Otherwise
// the wanted packages are resolved with their whole closure; when the
// archive no longer serves a pinned version, the newest it serves is used
// and a WARNING line names the package, the pinned and the used version.
// The root is cached under Key of the resolved packages, built in a
// private temporary folder beside the entry and renamed into place, and
// verified file by file whenever it is reused (internal/diskcache).
func Fetch(ctx context.Context, o Options) (*Root, error) {
	rel, err := LookupRelease(o.Release)
	if err != nil {
		return nil, err
	}
	cacheDir := o.CacheDir
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return nil, fmt.Errorf("rocmroot: no cache folder: %w", err)
		}
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return nil, err
	}
	removeStale(cacheDir, time.Now().Add(-staleAfter))
	pins := rel.pinned(o.Groups)
	if !o.Refresh {
		if r := findPinned(cacheDir, pins); r != nil {
			r.Release, r.Suite = rel.Name, rel.Suite
			o.logf("rocmroot: %s: using the cached root of the pinned packages: %s", rel.Name, r.Dir)
			return r, nil
		}
	}
	open := o.Source
	if open == nil {
		open = NewAptSource
	}
	start := time.Now()
	src, err := open(ctx, rel.Suite, cacheDir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var warnings []string
	warn := func(format string, args ...any) {
		line := fmt.Sprintf("rocmroot: WARNING: %s: ", rel.Name) + fmt.Sprintf(format, args...)
		warnings = append(warnings, line)
		o.logf("%s", line)
	}
	pkgs, err := resolve(ctx, src, rel, o.Groups, warn)
	if err != nil {
		return nil, err
	}
	o.logf("rocmroot: %s: resolved %d packages from the archive in %.1fs", rel.Name, len(pkgs), time.Since(start).Seconds())
	text := keyText(pkgs)
	key := Key(pkgs)
	built := false
	entry, err := diskcache.Get(cacheDir, key, diskcache.TreeManifest{Name: manifestName, Header: text}, func(dir string) error {
		built = true
		return build(ctx, &o, src, pkgs, dir)
	})
	if err != nil {
		return nil, err
	}
	r := &Root{Release: rel.Name, Suite: rel.Suite, Dir: filepath.Join(entry, treeName), Entry: entry, Key: key,
		Packages: sortedPackages(pkgs), Built: built, Warnings: warnings}
	if err := r.checkLoader(); err != nil {
		return nil, err
	}
	if built {
		o.logf("rocmroot: %s: built %s in %.1fs", rel.Name, r.Dir, time.Since(start).Seconds())
	}
	return r, nil
}

// Cached returns the cached root of the release's pinned packages, without
// the network, or false when there is none (Fetch would build one).
func Cached(o Options) (*Root, bool) {
	rel, err := LookupRelease(o.Release)
	if err != nil {
		return nil, false
	}
	cacheDir := o.CacheDir
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return nil, false
		}
	}
	r := findPinned(cacheDir, rel.pinned(o.Groups))
	if r == nil {
		return nil, false
	}
	r.Release, r.Suite = rel.Name, rel.Suite
	return r, true
}

// staleAfter is the age at which a temporary folder in the cache (an apt
// configuration, or a root being built) is taken for the leftover of a
// process that was killed, and removed.
const staleAfter = 24 * time.Hour

// removeStale removes the temporary folders (".apt-*", ".build-*",
// "*.corrupt-*") in cacheDir last modified before cutoff.
func removeStale(cacheDir string, cutoff time.Time) {
	ents, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, ".apt-") && !strings.HasPrefix(n, ".build-") && !strings.Contains(n, ".corrupt-") {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(cutoff) {
			os.RemoveAll(filepath.Join(cacheDir, n))
		}
	}
}

// resolve asks the archive for the closure of the release's wanted
// packages at their pinned versions, or the newest it serves, and reports
// every difference from the pins.
func resolve(ctx context.Context, src Source, rel Release, groups []Group, warn func(string, ...any)) ([]Package, error) {
	want := rel.wanted(groups)
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = w.Name
	}
	served, err := src.Versions(ctx, names)
	if err != nil {
		return nil, err
	}
	var reqs []string
	for _, w := range want {
		vs := served[w.Name]
		switch {
		case contains(vs, w.Version):
			reqs = append(reqs, w.Name+"="+w.Version)
		case len(vs) > 0:
			warn("the archive no longer serves %s %s (pinned); using the newest it serves, %s", w.Name, w.Version, vs[0])
			reqs = append(reqs, w.Name)
		default:
			return nil, fmt.Errorf("%w: %s (pinned %s) in %s", ErrNotServed, w.Name, w.Version, rel.Suite)
		}
	}
	pkgs, err := src.Resolve(ctx, reqs)
	if err != nil {
		return nil, err
	}
	pinned := map[string]string{}
	for _, p := range rel.pinned(groups) {
		pinned[p.Name] = p.Version
	}
	got := map[string]bool{}
	for _, p := range sortedPackages(pkgs) {
		got[p.Name] = true
		switch v, ok := pinned[p.Name]; {
		case !ok:
			warn("%s %s is in the closure but not in the pin file", p.Name, p.Version)
		case v != p.Version && !isWanted(want, p.Name):
			warn("%s pinned %s; using %s", p.Name, v, p.Version)
		}
	}
	for _, p := range rel.pinned(groups) {
		if !got[p.Name] {
			warn("%s %s (pinned) is no longer in the closure", p.Name, p.Version)
		}
	}
	return pkgs, nil
}

func isWanted(want []Pin, name string) bool {
	for _, w := range want {
		if w.Name == name {
			return true
		}
	}
	return false
}

// findPinned returns a verified cached root whose packages are exactly the
// pins (names and versions), or nil.
func findPinned(cacheDir string, pins []Pin) *Root {
	if _, err := diskcache.OwnDir(cacheDir); err != nil {
		return nil // Get says why
	}
	ents, err := os.ReadDir(cacheDir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if !e.IsDir() || len(e.Name()) != 64 {
			continue
		}
		entry := filepath.Join(cacheDir, e.Name())
		text, ok := manifestHeader(filepath.Join(entry, manifestName))
		if !ok {
			continue
		}
		pkgs, ok := parseKeyText(text)
		if !ok || Key(pkgs) != e.Name() || !samePins(pkgs, pins) {
			continue
		}
		if (diskcache.TreeManifest{Name: manifestName, Header: text}).Verify(entry) != nil {
			continue
		}
		r := &Root{Dir: filepath.Join(entry, treeName), Entry: entry, Key: e.Name(), Packages: sortedPackages(pkgs)}
		if r.checkLoader() != nil {
			continue
		}
		return r
	}
	return nil
}

// manifestHeader reads the header a TreeManifest recorded (its second
// line); the whole manifest is verified afterwards.
func manifestHeader(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return "", false
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if len(lines) < 3 {
		return "", false
	}
	q, ok := strings.CutPrefix(lines[1], "header ")
	if !ok {
		return "", false
	}
	text, err := strconv.Unquote(q)
	return text, err == nil
}

func samePins(pkgs []Package, pins []Pin) bool {
	if len(pkgs) != len(pins) {
		return false
	}
	ps := sortedPackages(pkgs)
	for i := range ps {
		if ps[i].Name != pins[i].Name || ps[i].Version != pins[i].Version {
			return false
		}
	}
	return true
}

// build downloads the packages into dir, checks each against the archive's
// size and SHA-256, and unpacks them into dir/root.
func build(ctx context.Context, o *Options, src Source, pkgs []Package, dir string) error {
	debs := filepath.Join(dir, "debs")
	tree := filepath.Join(dir, treeName)
	for _, d := range []string{debs, tree} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	start := time.Now()
	paths, err := src.Download(ctx, pkgs, debs)
	if err != nil {
		return err
	}
	if len(paths) != len(pkgs) {
		return fmt.Errorf("rocmroot: %d packages downloaded for %d", len(paths), len(pkgs))
	}
	var bytes int64
	for i, p := range pkgs {
		n, sum, err := fileSHA256(paths[i])
		if err != nil {
			return err
		}
		if n != p.Size || sum != p.SHA256 {
			return fmt.Errorf("%w: %s %s: %d bytes, sha256 %s; the index says %d bytes, sha256 %s",
				ErrDownload, p.Name, p.Version, n, sum, p.Size, p.SHA256)
		}
		bytes += n
	}
	o.logf("rocmroot: downloaded %d packages, %.1f MB, in %.1fs", len(pkgs), float64(bytes)/1e6, time.Since(start).Seconds())
	start = time.Now()
	unpack := o.Unpack
	if unpack == nil {
		unpack = dpkgUnpack
	}
	for _, p := range paths {
		if err := unpack(ctx, p, tree); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(debs); err != nil {
		return err
	}
	if err := confineLinks(tree); err != nil {
		return err
	}
	size, _ := treeSize(tree)
	o.logf("rocmroot: unpacked %.1f MB in %.1fs", float64(size)/1e6, time.Since(start).Seconds())
	return nil
}

func fileSHA256(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return n, hex.EncodeToString(h.Sum(nil)), err
}

func dpkgUnpack(ctx context.Context, deb, dir string) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, dir)
	cmd.Env = toolEnv(nil)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rocmroot: dpkg-deb -x %s: %v\n%s", filepath.Base(deb), err, out)
	}
	return nil
}

// confineLinks makes the tree self-contained: an absolute link target is
// rewritten relative to the tree, as if the tree were /; a relative one
// that leaves the tree is diskcache.ErrUnsupportedFile; and the merged /usr
// links (lib, lib64, bin, sbin) are added where usr has the folder.
func confineLinks(tree string) error {
	err := filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(tree, filepath.Dir(path))
		if err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			p := filepath.Clean(filepath.Join(rel, target))
			if p == ".." || strings.HasPrefix(p, "../") {
				return fmt.Errorf("%w: %s -> %s leaves the root", diskcache.ErrUnsupportedFile, filepath.Join(rel, d.Name()), target)
			}
			return nil
		}
		newTarget, err := filepath.Rel(filepath.Join("/", rel), filepath.Clean(target))
		if err != nil {
			return err
		}
		if err := os.Remove(path); err != nil {
			return err
		}
		return os.Symlink(newTarget, path)
	})
	if err != nil {
		return err
	}
	for _, d := range []string{"lib", "lib64", "bin", "sbin"} {
		if _, err := os.Lstat(filepath.Join(tree, d)); err == nil {
			continue
		}
		if fi, err := os.Stat(filepath.Join(tree, "usr", d)); err == nil && fi.IsDir() {
			if err := os.Symlink(filepath.Join("usr", d), filepath.Join(tree, d)); err != nil {
				return err
			}
		}
	}
	return nil
}

func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// checkLoader checks that the root's loader is a file inside the root.
func (r *Root) checkLoader() error {
	real, err := filepath.EvalSymlinks(r.Loader())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoLoader, err)
	}
	dir, err := filepath.EvalSymlinks(r.Dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoLoader, err)
	}
	if !strings.HasPrefix(real, dir+string(filepath.Separator)) {
		return fmt.Errorf("%w: %s resolves to %s", ErrNoLoader, r.Loader(), real)
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a file", ErrNoLoader, real)
	}
	return nil
}

package userkernel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rocsync/rocsync/kernels"
)

// countingTools writes wrappers around clang and ld.lld that log every
// invocation to a file, so a test can prove a build ran no tool at all.
func countingTools(t *testing.T) (clang, lld, log string) {
	t.Helper()
	needClang(t)
	realClang, err := findClang("")
	if err != nil {
		t.Fatal(err)
	}
	realLLD, err := findLLD("", realClang)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log = filepath.Join(dir, "invocations.log")
	wrap := func(name, real string) string {
		path := filepath.Join(dir, name)
		script := fmt.Sprintf("#!/bin/sh\necho %q \"$@\" >> %q\nexec %q \"$@\"\n", name, log, real)
		if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return wrap("clang", realClang), wrap("ld.lld", realLLD), log
}

func invocations(t *testing.T, log string) []string {
	t.Helper()
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

var (
	gfx90aV5 = Device{ISA: "gfx90a", Accepts: acceptOnly(kernels.CodeObjectV5)}
	sm80     = Device{ISA: "sm_80"}
)

// The helper process builds SAXPY with the cache and tools named in its
// environment: a second run of "the same program".
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv("USERKERNEL_HELPER_CACHE")
	if dir == "" {
		t.Skip("helper for other tests")
	}
	b := NewBuilder(Options{CacheDir: dir, Clang: os.Getenv("USERKERNEL_HELPER_CLANG"), LLD: os.Getenv("USERKERNEL_HELPER_LLD")})
	for _, dev := range []Device{gfx90aV5, sm80} {
		if _, err := b.Build(saxpy(t), dev); err != nil {
			t.Fatal(err)
		}
	}
	s := b.Stats()
	fmt.Printf("STATS compiles=%d disk-hits=%d tool-probes=%d\n", s.Compiles, s.DiskHits, s.ToolProbes)
}

func helperCmd(t *testing.T, cache, clang, lld string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "USERKERNEL_HELPER_CACHE="+cache, "USERKERNEL_HELPER_CLANG="+clang, "USERKERNEL_HELPER_LLD="+lld)
	return cmd
}

func TestWarmLoadRunsNoTool(t *testing.T) {
	clang, lld, log := countingTools(t)
	cache := filepath.Join(t.TempDir(), "cache")
	opts := Options{CacheDir: cache, Clang: clang, LLD: lld}

	cold := NewBuilder(opts)
	var coldImages []*Image
	for _, dev := range []Device{gfx90aV5, sm80} {
		img, err := cold.Build(saxpy(t), dev)
		if err != nil {
			t.Fatal(err)
		}
		coldImages = append(coldImages, img)
	}
	ran := invocations(t, log)
	// clang --version, ld.lld --version, clang -c, ld.lld, clang -S.
	if len(ran) != 5 {
		t.Fatalf("cold build ran %d tools, want 5: %q", len(ran), ran)
	}
	if s := cold.Stats(); s.Compiles != 2 || s.DiskWrites != 2 || s.DiskHits != 0 || s.ToolProbes != 2 {
		t.Errorf("cold stats %+v", s)
	}

	// A new Builder (a new process, as far as the cache can tell) in the
	// same directory loads from disk without starting clang or ld.lld.
	warm := NewBuilder(opts)
	for i, dev := range []Device{gfx90aV5, sm80} {
		img, err := warm.Build(saxpy(t), dev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(img.Code, coldImages[i].Code) || img.Target != coldImages[i].Target {
			t.Errorf("%s: the warm image differs from the cold one", dev.ISA)
		}
	}
	if got := invocations(t, log); len(got) != len(ran) {
		t.Errorf("warm load ran tools: %q", got[len(ran):])
	}
	if s := warm.Stats(); s.Compiles != 0 || s.ToolProbes != 0 || s.DiskHits != 2 {
		t.Errorf("warm stats %+v", s)
	}
	// Again in memory.
	if _, err := warm.Build(saxpy(t), gfx90aV5); err != nil || warm.Stats().MemoryHits != 1 {
		t.Errorf("memory hit: %v, %+v", err, warm.Stats())
	}

	// And a separate process.
	out, err := helperCmd(t, cache, clang, lld).CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "STATS compiles=0 disk-hits=2 tool-probes=0") {
		t.Errorf("second process: %s", out)
	}
	if got := invocations(t, log); len(got) != len(ran) {
		t.Errorf("second process ran tools: %q", got[len(ran):])
	}

	// A different option is a different key: it compiles.
	other, _ := OpenCL(saxpySource, "-DUNUSED=1")
	if _, err := warm.Build(other, gfx90aV5); err != nil || warm.Stats().Compiles != 1 {
		t.Errorf("options not in the key: %v, %+v", err, warm.Stats())
	}
}

// entries returns the cache's entry files by manifest kind.
func entries(t *testing.T, cache string) map[string]string {
	t.Helper()
	found := map[string]string{}
	err := filepath.WalkDir(cache, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rest, ok := bytes.CutPrefix(data, []byte(entryMagic))
		if !ok {
			return fmt.Errorf("%s is not an entry", path)
		}
		n := binary.LittleEndian.Uint32(rest)
		var m manifest
		if err := json.Unmarshal(rest[4:4+n], &m); err != nil {
			return err
		}
		found[m.Kind+" "+m.Target] = path
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestCorruptEntryIsRebuilt(t *testing.T) {
	needClang(t)
	corruptions := map[string]func(t *testing.T, path string, other string){
		"flipped payload byte": func(t *testing.T, path, _ string) {
			data, _ := os.ReadFile(path)
			data[len(data)-100] ^= 0x40
			writeRaw(t, path, data)
		},
		"truncated": func(t *testing.T, path, _ string) {
			data, _ := os.ReadFile(path)
			writeRaw(t, path, data[:len(data)/2])
		},
		"bad magic": func(t *testing.T, path, _ string) {
			data, _ := os.ReadFile(path)
			data[0] = 'X'
			writeRaw(t, path, data)
		},
		"foreign entry (another key's file)": func(t *testing.T, path, other string) {
			data, _ := os.ReadFile(other)
			writeRaw(t, path, data)
		},
		"manifest edited to another target": func(t *testing.T, path, _ string) {
			data, _ := os.ReadFile(path)
			writeRaw(t, path, bytes.Replace(data, []byte(`"gfx90a/v5"`), []byte(`"gfx90a/v4"`), 1))
		},
		"valid manifest, payload not a code object": func(t *testing.T, path, _ string) {
			key := filepath.Base(path)
			c := &diskCache{root: filepath.Dir(filepath.Dir(filepath.Dir(path)))}
			if err := c.write(key, "code-object", "gfx90a/v5", []byte("\x7fELF not really")); err != nil {
				t.Fatal(err)
			}
		},
		// rename(2) does not replace a directory with a file: the entry
		// is removed first.
		"a directory in the entry's place": func(t *testing.T, path, _ string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(path, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeRaw(t, filepath.Join(path, "sub", "file"), []byte("x"))
		},
		"readable by others": func(t *testing.T, path, _ string) {
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			cache := t.TempDir()
			first := NewBuilder(Options{CacheDir: cache})
			want, err := first.Build(saxpy(t), gfx90aV5)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := first.Build(saxpy(t), sm80); err != nil {
				t.Fatal(err)
			}
			ents := entries(t, cache)
			path, other := ents["code-object gfx90a/v5"], ents["ptx sm_80"]
			if path == "" || other == "" {
				t.Fatalf("entries %v", ents)
			}
			corrupt(t, path, other)

			b := NewBuilder(Options{CacheDir: cache})
			img, err := b.Build(saxpy(t), gfx90aV5)
			if err != nil {
				t.Fatal(err)
			}
			if s := b.Stats(); s.DiskRepairs != 1 || s.Compiles != 1 || s.DiskHits != 0 || s.DiskWrites != 1 {
				t.Errorf("stats %+v: the corrupt entry was not rebuilt", s)
			}
			if !bytes.Equal(img.Code, want.Code) {
				t.Error("the rebuilt image differs")
			}
			after := NewBuilder(Options{CacheDir: cache})
			if _, err := after.Build(saxpy(t), gfx90aV5); err != nil || after.Stats().DiskHits != 1 {
				t.Errorf("the repaired entry does not load: %v %+v", err, after.Stats())
			}
		})
	}
}

func writeRaw(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCachePermissions(t *testing.T) {
	needClang(t)
	cache := filepath.Join(t.TempDir(), "kernels")
	if err := os.Mkdir(cache, 0o755); err != nil { // the user's: left as it is
		t.Fatal(err)
	}
	b := NewBuilder(Options{CacheDir: cache})
	if _, err := b.Build(saxpy(t), gfx90aV5); err != nil {
		t.Fatal(err)
	}
	files := 0
	err := filepath.WalkDir(cache, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case path == cache:
			if fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: the user's directory changed to mode %v", path, fi.Mode().Perm())
			}
		case d.IsDir() && fi.Mode().Perm() != 0o700:
			t.Errorf("%s: mode %v, want 0700", path, fi.Mode().Perm())
		case !d.IsDir() && fi.Mode().Perm() != 0o600:
			t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
		case !d.IsDir():
			files++
			if strings.Contains(d.Name(), ".tmp") {
				t.Errorf("temporary file left: %s", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != 4 { // the code object, its prebuilt copy, and the clang and ld.lld versions
		t.Errorf("%d files in the cache, want 4", files)
	}

	// A cache path that is a file: the build goes on without the cache
	// and says why.
	notDir := filepath.Join(t.TempDir(), "file")
	writeRaw(t, notDir, nil)
	nb := NewBuilder(Options{CacheDir: notDir})
	if _, err := nb.Build(saxpy(t), gfx90aV5); err != nil {
		t.Fatal(err)
	}
	if s := nb.Stats(); s.CacheErrors == 0 || s.LastCacheErr == "" {
		t.Errorf("unusable cache not reported: %+v", s)
	}
}

func TestConcurrentBuildsOfOneKey(t *testing.T) {
	needClang(t)
	cache := t.TempDir()
	// Goroutines of one Builder: one compile.
	b := NewBuilder(Options{CacheDir: cache})
	var wg sync.WaitGroup
	images := make([]*Image, 8)
	for i := range images {
		wg.Go(func() {
			img, err := b.Build(saxpy(t), gfx90aV5)
			if err != nil {
				t.Error(err)
			}
			images[i] = img
		})
	}
	wg.Wait()
	if s := b.Stats(); s.Compiles != 1 {
		t.Errorf("%d compiles for one key, want 1", s.Compiles)
	}
	for _, img := range images[1:] {
		if img != images[0] {
			t.Error("goroutines got different images")
		}
	}

	// Two processes on an empty cache: both build, both entries are
	// whole, and a third reads one.
	cache2 := t.TempDir()
	clang, _ := findClang("")
	lld, _ := findLLD("", clang)
	p1, p2 := helperCmd(t, cache2, clang, lld), helperCmd(t, cache2, clang, lld)
	var out1, out2 bytes.Buffer
	p1.Stdout, p1.Stderr, p2.Stdout, p2.Stderr = &out1, &out1, &out2, &out2
	if err := p1.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(); err != nil {
		t.Fatal(err)
	}
	if err1, err2 := p1.Wait(), p2.Wait(); err1 != nil || err2 != nil {
		t.Fatalf("helpers: %v %v\n%s\n%s", err1, err2, out1.String(), out2.String())
	}
	third := NewBuilder(Options{CacheDir: cache2})
	for _, dev := range []Device{gfx90aV5, sm80} {
		if _, err := third.Build(saxpy(t), dev); err != nil {
			t.Fatal(err)
		}
	}
	if s := third.Stats(); s.DiskHits != 2 || s.Compiles != 0 || s.DiskRepairs != 0 {
		t.Errorf("after two concurrent processes: %+v", s)
	}
}

// A cache directory owned by another user is not read: its entries could
// be anyone's code. (Needs root, to give the directory away.)
func TestForeignCacheDirectoryIsNotRead(t *testing.T) {
	needClang(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown the cache directory")
	}
	cache := t.TempDir()
	if _, err := NewBuilder(Options{CacheDir: cache}).Build(saxpy(t), gfx90aV5); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	if err := os.Chown(cache, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	defer os.Chown(cache, 0, 0)
	b := NewBuilder(Options{CacheDir: cache})
	if _, err := b.Build(saxpy(t), gfx90aV5); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.DiskHits != 0 || s.Compiles != 1 || s.CacheErrors == 0 || !strings.Contains(s.LastCacheErr, "another user") {
		t.Errorf("stats %+v: a foreign directory was trusted", s)
	}
}

// A cache directory named through a symbolic link is refused, and the
// error says that it is a link (it said "is not a directory").
func TestCacheDirThatIsALinkIsRefusedSayingSo(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	err := ensureDir(link, false)
	if !errors.Is(err, ErrCache) || !strings.Contains(err.Error(), link+" is a symbolic link; name the directory it points to") {
		t.Errorf("ensureDir of a link: %v", err)
	}
}

// Without a compiler, a cache directory that cannot be used is a cache
// error, counted as one, and the build's error says both: no compiler,
// and a cache it could not read (it was counted nowhere, so a device
// could not report it).
func TestNoCompilerAndAnUnusableCache(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	writeRaw(t, notADir, nil)
	b := NewBuilder(Options{CacheDir: notADir, Clang: filepath.Join(t.TempDir(), "no-clang")})
	_, err := b.Build(saxpy(t), gfx90aV5)
	if !errors.Is(err, ErrNoCompiler) || !errors.Is(err, ErrCache) || !strings.Contains(err.Error(), "the kernel cache cannot be read") {
		t.Errorf("Build: %v", err)
	}
	if s := b.Stats(); s.CacheErrors != 1 || !strings.Contains(s.LastCacheErr, notADir) {
		t.Errorf("stats %+v", s)
	}
}

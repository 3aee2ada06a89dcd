package userkernel

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A machine without a compiler loads an OpenCL kernel from a cache a
// compiler filled (here or on another machine), for the target it was
// built for, without running any tool; a missing entry, another target's,
// and a corrupt, foreign or too-open one are typed errors and are never
// loaded.
func TestPrebuiltEntryWithoutCompiler(t *testing.T) {
	needClang(t)
	noTools := Options{Clang: "/nonexistent/clang", LLD: "/nonexistent/ld.lld"}
	fill := func(t *testing.T) (cache string, want map[string][]byte) {
		cache = t.TempDir()
		b := NewBuilder(Options{CacheDir: cache})
		want = map[string][]byte{}
		for name, dev := range map[string]Device{"ptx sm_80": sm80, "code-object gfx90a/v5": gfx90aV5} {
			img, err := b.Build(saxpy(t), dev)
			if err != nil {
				t.Fatal(err)
			}
			want[name] = img.Code
		}
		return cache, want
	}

	t.Run("loads", func(t *testing.T) {
		cache, want := fill(t)
		opts := noTools
		opts.CacheDir = cache
		b := NewBuilder(opts)
		for name, dev := range map[string]Device{"ptx sm_80": sm80, "code-object gfx90a/v5": gfx90aV5} {
			img, err := b.Build(saxpy(t), dev)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !bytes.Equal(img.Code, want[name]) {
				t.Errorf("%s: the prebuilt image differs from the compiled one", name)
			}
			if _, err := img.Kernel("saxpy"); err != nil {
				t.Error(err)
			}
		}
		if _, err := b.Build(saxpy(t), sm80); err != nil {
			t.Fatal(err)
		}
		if s := b.Stats(); s.PrebuiltHits != 2 || s.MemoryHits != 1 || s.Compiles != 0 || s.ToolProbes != 0 {
			t.Errorf("stats %+v", s)
		}
	})

	t.Run("missing", func(t *testing.T) {
		cache, _ := fill(t)
		opts := noTools
		opts.CacheDir = cache
		_, err := NewBuilder(opts).Build(saxpy(t), Device{ISA: "sm_90"}) // filled for sm_80 only
		if !errors.Is(err, ErrNoCompiler) || errors.Is(err, ErrCacheEntry) {
			t.Fatalf("got %v, want ErrNoCompiler without ErrCacheEntry", err)
		}
		src, err := OpenCL(saxpySource + "\n// another source\n")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewBuilder(opts).Build(src, sm80); !errors.Is(err, ErrNoCompiler) {
			t.Fatalf("another source: got %v", err)
		}
		opts.NoDiskCache = true
		if _, err := NewBuilder(opts).Build(saxpy(t), sm80); !errors.Is(err, ErrNoCompiler) {
			t.Fatalf("no disk cache: got %v", err)
		}
	})

	corruptions := map[string]func(t *testing.T, path, other string){
		"flipped payload byte": func(t *testing.T, path, _ string) {
			data, _ := os.ReadFile(path)
			data[len(data)-10] ^= 0x40
			writeRaw(t, path, data)
		},
		"truncated": func(t *testing.T, path, _ string) {
			data, _ := os.ReadFile(path)
			writeRaw(t, path, data[:len(data)/2])
		},
		"foreign entry (another key's file)": func(t *testing.T, path, other string) {
			data, _ := os.ReadFile(other)
			writeRaw(t, path, data)
		},
		"valid manifest, payload not PTX": func(t *testing.T, path, _ string) {
			c := &diskCache{root: filepath.Dir(filepath.Dir(filepath.Dir(path)))}
			if err := c.write(filepath.Base(path), "prebuilt ptx", "sm_80", []byte("not ptx at all")); err != nil {
				t.Fatal(err)
			}
		},
		"readable by others": func(t *testing.T, path, _ string) {
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			cache, _ := fill(t)
			ents := entries(t, cache)
			path, other := ents["prebuilt ptx sm_80"], ents["prebuilt code-object gfx90a/v5"]
			if path == "" || other == "" {
				t.Fatalf("entries %v", ents)
			}
			corrupt(t, path, other)
			opts := noTools
			opts.CacheDir = cache
			b := NewBuilder(opts)
			img, err := b.Build(saxpy(t), sm80)
			if img != nil || !errors.Is(err, ErrNoCompiler) || !errors.Is(err, ErrCacheEntry) {
				t.Fatalf("got %v, %v; want no image and ErrNoCompiler with ErrCacheEntry", img, err)
			}
			if s := b.Stats(); s.PrebuiltHits != 0 {
				t.Errorf("stats %+v", s)
			}
			// With a compiler the entry is rebuilt, and loads again without.
			if _, err := NewBuilder(Options{CacheDir: cache}).Build(saxpy(t), sm80); err != nil {
				t.Fatal(err)
			}
			if _, err := NewBuilder(opts).Build(saxpy(t), sm80); err != nil {
				t.Fatalf("after the rebuild: %v", err)
			}
		})
	}
}

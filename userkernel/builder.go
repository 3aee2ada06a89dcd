package userkernel

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Options configure a Builder. The zero value is ready to use.
type Options struct {
	// CacheDir is the on-disk cache's directory. Empty means
	// $ROCSYNC_KERNEL_CACHE, else os.UserCacheDir()/rocsync/kernels. It
	// is made (mode 0700) if missing; an existing one must be a directory
	// of this user's, named itself rather than through a symbolic link,
	// and keeps its mode: the entries go in a private subdirectory of it
	// (v1, mode 0700). A cache that cannot be used is counted in Stats
	// (CacheErrors) and builds go on without it; a device logs it once
	// (at LogWarn).
	CacheDir string
	// NoDiskCache compiles without reading or writing the on-disk cache.
	NoDiskCache bool
	// Clang and LLD name the compiler and linker. Empty means
	// $ROCSYNC_CLANG (else clang-22, clang in PATH) and $ROCSYNC_LLD (else
	// the ld.lld beside clang's executable, else ld.lld-22, ld.lld in PATH).
	Clang, LLD string
}

// Stats count what a Builder did.
type Stats struct {
	Compiles     uint64 // OpenCL builds that ran clang
	ToolProbes   uint64 // clang/ld.lld --version runs (once per tool binary, then cached on disk)
	DiskHits     uint64 // builds loaded from the on-disk cache
	PrebuiltHits uint64 // builds loaded, with no compiler on the machine, from a compiler-independent entry (see Build)
	MemoryHits   uint64 // builds found in memory
	Declared     uint64 // declared images built for an emulated device without a compiler (see WithDeclarations)
	DiskRepairs  uint64 // corrupt or foreign entries found and rebuilt
	DiskWrites   uint64 // entries written
	CacheErrors  uint64 // cache reads or writes that failed (the build went on without the cache)
	LastCacheErr string // the last such failure, for diagnosis
}

// Builder builds Sources into Images for devices: it picks prebuilt code,
// or compiles OpenCL through the on-disk cache. It is safe for concurrent
// use; builds of the same key run once (singleflight) and are kept in
// memory.
type Builder struct {
	opts  Options
	cache *diskCache // nil without the disk cache

	mu       sync.Mutex
	images   map[string]*Image  // by build key
	inflight map[string]*flight // builds under way, by key
	tools    map[string]string  // tool path + identity -> version text
	stats    Stats
}

type flight struct {
	done chan struct{}
	img  *Image
	err  error
}

// NewBuilder returns a Builder. It finds no tools yet: the first OpenCL
// build does, so a Builder that only picks prebuilt code needs no clang.
func NewBuilder(opts Options) *Builder {
	b := &Builder{opts: opts, images: map[string]*Image{}, inflight: map[string]*flight{}, tools: map[string]string{}}
	if !opts.NoDiskCache {
		dir := opts.CacheDir
		if dir == "" {
			dir = os.Getenv("ROCSYNC_KERNEL_CACHE")
		}
		if dir == "" {
			if base, err := os.UserCacheDir(); err == nil {
				dir = filepath.Join(base, "rocsync", "kernels")
			}
		}
		if dir != "" {
			b.cache = &diskCache{root: dir}
		}
	}
	return b
}

// CacheDir returns the on-disk cache's directory, or "" without one.
func (b *Builder) CacheDir() string {
	if b.cache == nil {
		return ""
	}
	return b.cache.root
}

// Stats returns the counts so far.
func (b *Builder) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

func (b *Builder) count(f func(*Stats)) {
	b.mu.Lock()
	f(&b.stats)
	b.mu.Unlock()
}

func (b *Builder) cacheFailed(err error) {
	b.count(func(s *Stats) { s.CacheErrors++; s.LastCacheErr = err.Error() })
}

// Build returns the image of src for dev: for prebuilt sources the code
// object or PTX module that suits the device; for OpenCL, the source
// compiled for the device's processor (and the code-object version its
// runtime loads, chosen as for rocsync's own kernels) or architecture.
func (b *Builder) Build(src *Source, dev Device) (*Image, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source", ErrSource)
	}
	if src.kind != sourceOpenCL {
		return src.pickPrebuilt(dev)
	}
	fam, err := dev.family()
	if err != nil {
		return nil, err
	}
	var t Target
	sm := 0
	if fam == AMD {
		gfx, _, _ := amdFeatures(dev.ISA)
		v, err := pickCodeObjectVersion(dev)
		if err != nil {
			return nil, err
		}
		t = Target{Family: AMD, Arch: gfx, CodeObject: v}
	} else {
		sm, _ = smVersion(dev.ISA)
		t = Target{Family: NVIDIA, Arch: dev.ISA}
	}
	img, err := b.compile(src, t, sm)
	if err != nil && dev.Emulated && fam == AMD && errors.Is(err, ErrNoCompiler) {
		return b.declare(src, t, err)
	}
	return img, err
}

// declare builds src's declared image for an emulated device where no
// compiler (nor a cached build) was found: noCompiler says why.
func (b *Builder) declare(src *Source, t Target, noCompiler error) (*Image, error) {
	return b.once("declared:"+prebuiltKey(src, t)+":"+hex.EncodeToString(src.id[:]), func() (*Image, error) {
		img, err := declaredImage(src, t)
		if err != nil {
			return nil, fmt.Errorf("%w; and reading the kernels' signatures from their declarations instead failed: %w", noCompiler, err)
		}
		b.count(func(s *Stats) { s.Declared++ })
		return img, nil
	})
}

// compile builds an OpenCL source for one target, once per key. Without
// a compiler it loads the compiler-independent entry (prebuiltKey) a
// compiler on this or another machine left in the cache, if any.
func (b *Builder) compile(src *Source, t Target, sm int) (*Image, error) {
	clang, lld, clangVersion, lldVersion, err := b.findTools(t)
	if err != nil {
		if errors.Is(err, ErrNoCompiler) {
			return b.loadPrebuilt(src, t, err)
		}
		return nil, err
	}
	key := buildKey(src, t, clangVersion, lldVersion)
	return b.once(key, func() (*Image, error) { return b.loadOrCompile(key, src, t, sm, clang, lld) })
}

// findTools finds the compiler (and, for AMD, the linker) and their versions.
func (b *Builder) findTools(t Target) (clang, lld, clangVersion, lldVersion string, err error) {
	if clang, err = findClang(b.opts.Clang); err != nil {
		return
	}
	if t.Family == AMD {
		if lld, err = findLLD(b.opts.LLD, clang); err != nil {
			return
		}
	}
	if clangVersion, err = b.toolVersion(clang); err != nil {
		return
	}
	if lld != "" {
		lldVersion, err = b.toolVersion(lld)
	}
	return
}

// once runs build for key once (concurrent callers share the flight) and
// keeps a successful image in memory.
func (b *Builder) once(key string, build func() (*Image, error)) (*Image, error) {
	b.mu.Lock()
	if img, ok := b.images[key]; ok {
		b.stats.MemoryHits++
		b.mu.Unlock()
		return img, nil
	}
	if f, ok := b.inflight[key]; ok {
		b.mu.Unlock()
		<-f.done
		return f.img, f.err
	}
	f := &flight{done: make(chan struct{})}
	b.inflight[key] = f
	b.mu.Unlock()

	f.img, f.err = build()

	b.mu.Lock()
	delete(b.inflight, key)
	if f.err == nil {
		b.images[key] = f.img
	}
	b.mu.Unlock()
	close(f.done)
	return f.img, f.err
}

func (t Target) cacheKind() string {
	if t.Family == NVIDIA {
		return "ptx"
	}
	return "code-object"
}

// loadOrCompile loads the key's entry from disk, or compiles and stores it.
func (b *Builder) loadOrCompile(key string, src *Source, t Target, sm int, clang, lld string) (*Image, error) {
	if b.cache != nil {
		code, err := b.cache.read(key, t.cacheKind(), t.String())
		if err == nil {
			img, perr := checkBuilt(code, t)
			if perr == nil {
				b.count(func(s *Stats) { s.DiskHits++ })
				b.keepPrebuilt(src, t, code, false)
				return img, nil
			}
			err = perr
		}
		switch {
		case errors.Is(err, ErrCache):
			b.cacheFailed(err)
		case !errors.Is(err, errEntryMissing):
			// Corrupt, truncated, foreign or unparsable: rebuild and
			// overwrite, never load.
			b.count(func(s *Stats) { s.DiskRepairs++ })
		}
	}
	code, err := compileOpenCL(clang, lld, src, t, sm)
	b.count(func(s *Stats) { s.Compiles++ })
	if err != nil {
		return nil, err
	}
	img, err := checkBuilt(code, t)
	if err != nil {
		return nil, &CompileError{Target: t, Tool: clang, Err: fmt.Errorf("the compiler's output does not parse: %w", err)}
	}
	if b.cache != nil {
		if err := b.cache.write(key, t.cacheKind(), t.String(), code); err != nil {
			b.cacheFailed(err)
		} else {
			b.count(func(s *Stats) { s.DiskWrites++ })
		}
		b.keepPrebuilt(src, t, code, true)
	}
	return img, nil
}

// A machine without a compiler (a GPU host with the driver only) can
// still run OpenCL kernels from a cache filled elsewhere: each build is
// also stored under prebuiltKey, a hash of everything that decides the
// output except the tools' versions, which that machine cannot learn. It
// is read only when no compiler is found, verified like every entry
// (key, kind, target, size, SHA-256, parsed as the target's code), and a
// missing, corrupt or foreign one is a typed error (ErrNoCompiler, and
// ErrCacheEntry when an entry was there), never loaded. The newest build
// of a source for a target wins: the entry is rewritten by every compile.

// ErrCacheEntry is matched (errors.Is), together with ErrNoCompiler, when
// a machine without a compiler finds a prebuilt entry for a kernel that
// does not verify: it is not loaded, and only a compiler can rebuild it.
var ErrCacheEntry = errors.New("userkernel: prebuilt cache entry unusable")

// prebuiltKey hashes a build's inputs but the tools' versions.
func prebuiltKey(src *Source, t Target) string {
	return buildKey(src, t, "rocsync userkernel prebuilt 1: any clang", "any ld.lld")
}

// keepPrebuilt stores code under the source's prebuiltKey: always after a
// compile, after a disk hit only if no valid entry is there (a cache
// filled before prebuilt entries existed, or a corrupt one).
func (b *Builder) keepPrebuilt(src *Source, t Target, code []byte, compiled bool) {
	key := prebuiltKey(src, t)
	if !compiled {
		if old, err := b.cache.read(key, "prebuilt "+t.cacheKind(), t.String()); err == nil && bytes.Equal(old, code) {
			return
		}
	}
	if err := b.cache.write(key, "prebuilt "+t.cacheKind(), t.String(), code); err != nil {
		b.cacheFailed(err)
	}
}

// loadPrebuilt loads src's prebuilt entry for t, for a machine where no
// compiler was found (noCompiler says why).
func (b *Builder) loadPrebuilt(src *Source, t Target, noCompiler error) (*Image, error) {
	if b.cache == nil {
		return nil, noCompiler
	}
	key := prebuiltKey(src, t)
	return b.once("prebuilt:"+key, func() (*Image, error) {
		code, err := b.cache.read(key, "prebuilt "+t.cacheKind(), t.String())
		if errors.Is(err, ErrCache) {
			b.cacheFailed(err)
			return nil, fmt.Errorf("%w; and the kernel cache cannot be read: %w", noCompiler, err)
		}
		if errors.Is(err, errEntryMissing) {
			return nil, fmt.Errorf("%w; and the kernel cache %s holds no build of this source for %s (fill it on a machine with clang: see the package documentation)",
				noCompiler, b.cache.root, t)
		}
		var img *Image
		if err == nil {
			img, err = checkBuilt(code, t)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w: %s: %w", ErrNoCompiler, ErrCacheEntry, t, err)
		}
		b.count(func(s *Stats) { s.PrebuiltHits++ })
		return img, nil
	})
}

// buildKey hashes everything that decides a build's output.
func buildKey(src *Source, t Target, clangVersion, lldVersion string) string {
	h := sha256.New()
	h.Write([]byte("rocsync userkernel build 1\x00"))
	writeField(h, []byte(workItemPrelude))
	writeField(h, []byte(src.openCL))
	writeField(h, []byte(strings.Join(baseFlags, "\x00")))
	for _, o := range src.options {
		writeField(h, []byte(o))
	}
	var flags []string
	if t.Family == AMD {
		flags = amdFlags(t)
	} else {
		sm, _ := smVersion(t.Arch)
		flags = nvptxFlags(t, sm)
	}
	writeField(h, []byte(strings.Join(flags, "\x00")))
	writeField(h, []byte(clangVersion))
	writeField(h, []byte(lldVersion))
	writeField(h, []byte(t.Family.String()+"\x00"+t.String()))
	return hex.EncodeToString(h.Sum(nil))
}

// toolVersion returns a tool's --version text. It runs the tool once per
// binary: the text is kept in memory and on disk, keyed by the binary's
// real path and identity (size, modification time, inode), so a warm
// process starts no tool at all and an upgraded tool is asked again.
func (b *Builder) toolVersion(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoCompiler, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoCompiler, err)
	}
	id := real + "\x00" + fileIdentity(fi)
	b.mu.Lock()
	v, ok := b.tools[id]
	b.mu.Unlock()
	if ok {
		return v, nil
	}
	sum := sha256.Sum256([]byte("rocsync userkernel tool 1\x00" + id))
	key := hex.EncodeToString(sum[:])
	if b.cache != nil {
		text, err := b.cache.read(key, "tool-version", real)
		switch {
		case err == nil:
			v = string(text)
		case errors.Is(err, ErrCache):
			b.cacheFailed(err)
		case !errors.Is(err, errEntryMissing):
			b.count(func(s *Stats) { s.DiskRepairs++ })
		}
	}
	if v == "" {
		cmd := exec.Command(path, "--version")
		cmd.Env = toolEnv()
		out, err := cmd.Output()
		b.count(func(s *Stats) { s.ToolProbes++ })
		if err != nil {
			return "", fmt.Errorf("%w: %s --version: %w", ErrNoCompiler, path, err)
		}
		v = string(out)
		if strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("%w: %s --version printed nothing", ErrNoCompiler, path)
		}
		if b.cache != nil {
			if err := b.cache.write(key, "tool-version", real, out); err != nil {
				b.cacheFailed(err)
			}
		}
	}
	b.mu.Lock()
	b.tools[id] = v
	b.mu.Unlock()
	return v, nil
}

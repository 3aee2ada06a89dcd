package userkernel

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rocsync/rocsync/internal/diskcache"
)

// ErrCache is matched (errors.Is) by errors about the on-disk cache
// directory: one that is not a directory, or one owned by another user.
// The Builder then compiles without the cache and reports the error in
// Stats.
var ErrCache = errors.New("userkernel: kernel cache directory unusable")

// The on-disk cache holds one file per entry, <root>/v1/<key[:2]>/<key>:
//
//	entryMagic, a little-endian uint32 manifest length, the manifest (JSON),
//	the payload
//
// The manifest names the entry's key, kind and target and the payload's
// size and SHA-256; a reader checks all of them, so a truncated, flipped or
// misplaced file is rebuilt instead of loaded. Entries are written to a
// temporary file in the same directory and renamed into place, so a reader
// (in any process) sees a whole entry or none; two processes compiling the
// same key both write a whole, valid entry and the last rename wins.
const (
	entryMagic     = "ROCSYNC-USERKERNEL-1\n"
	cacheLayout    = "v1"
	maxManifestLen = 4096
	dirMode        = 0o700
	fileMode       = 0o600
)

type manifest struct {
	Key    string `json:"key"`
	Kind   string `json:"kind"`   // "code-object", "ptx", "prebuilt code-object", "prebuilt ptx" or "tool-version"
	Target string `json:"target"` // e.g. "gfx90a/v5", "sm_80", or the tool's path
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

type diskCache struct {
	root string
}

// entryPath returns the file of a key (hex SHA-256).
func (c *diskCache) entryPath(key string) string {
	return filepath.Join(c.root, cacheLayout, key[:2], key)
}

// ensureDir is diskcache.OwnDir (made 0700 if missing; a directory, not
// a link, owned by this user). A directory of rocsync's own (below the
// root) that is wider is tightened; the root is the user's (it may be an
// existing directory they share), so its mode is left alone: the entries
// live below it, in rocsync's private subdirectories.
func ensureDir(dir string, own bool) error {
	fi, err := diskcache.OwnDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCache, err)
	}
	if own && fi.Mode().Perm() != dirMode {
		if err := os.Chmod(dir, dirMode); err != nil {
			return fmt.Errorf("%w: %w", ErrCache, err)
		}
	}
	return nil
}

// ensureDirs checks the root, the layout directory and the key's
// directory.
func (c *diskCache) ensureDirs(key string) error {
	for i, d := range []string{c.root, filepath.Join(c.root, cacheLayout), filepath.Join(c.root, cacheLayout, key[:2])} {
		if err := ensureDir(d, i > 0); err != nil {
			return err
		}
	}
	return nil
}

// errEntryMissing means no entry exists; any other read error means the
// entry exists but is not to be trusted.
var errEntryMissing = errors.New("no cache entry")

// read returns the payload of a verified entry.
func (c *diskCache) read(key, kind, target string) ([]byte, error) {
	// Code is loaded only from directories no one else controls.
	if err := c.ensureDirs(key); err != nil {
		return nil, err
	}
	path := c.entryPath(key)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errEntryMissing
	}
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || !diskcache.OwnedByUser(fi) || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: not a private regular file of this user (mode %v)", path, fi.Mode())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rest, ok := bytes.CutPrefix(data, []byte(entryMagic))
	if !ok || len(rest) < 4 {
		return nil, fmt.Errorf("%s: not a cache entry", path)
	}
	n := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if n > maxManifestLen || uint64(n) > uint64(len(rest)) {
		return nil, fmt.Errorf("%s: manifest length %d is wrong", path, n)
	}
	var m manifest
	if err := json.Unmarshal(rest[:n], &m); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", path, err)
	}
	payload := rest[n:]
	sum := sha256.Sum256(payload)
	switch {
	case m.Key != key:
		return nil, fmt.Errorf("%s: entry is for key %s", path, m.Key)
	case m.Kind != kind || m.Target != target:
		return nil, fmt.Errorf("%s: entry is a %s for %s, want a %s for %s", path, m.Kind, m.Target, kind, target)
	case m.Size != len(payload):
		return nil, fmt.Errorf("%s: payload is %d bytes, manifest says %d", path, len(payload), m.Size)
	case m.SHA256 != hex.EncodeToString(sum[:]):
		return nil, fmt.Errorf("%s: payload hash does not match the manifest", path)
	}
	return payload, nil
}

// write stores an entry atomically: a temporary file (mode 0600) in the
// entry's directory, synced, then renamed over the entry.
func (c *diskCache) write(key, kind, target string, payload []byte) error {
	if err := c.ensureDirs(key); err != nil {
		return err
	}
	sum := sha256.Sum256(payload)
	m, err := json.Marshal(manifest{Key: key, Kind: kind, Target: target, Size: len(payload), SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Grow(len(entryMagic) + 4 + len(m) + len(payload))
	buf.WriteString(entryMagic)
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(m)))
	buf.Write(n[:])
	buf.Write(m)
	buf.Write(payload)

	path := c.entryPath(key)
	tmp, err := os.CreateTemp(filepath.Dir(path), key[:16]+".tmp-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(fileMode); err != nil {
		return err
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// rename(2) replaces a file or a link but not a directory (EISDIR or
	// EEXIST): a directory in the entry's place, which read refused, is
	// removed first. It lies in the key's directory, which ensureDirs
	// found to be this user's own and private.
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("%s: a directory stands where the entry goes and could not be removed: %w", path, err)
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	return nil
}

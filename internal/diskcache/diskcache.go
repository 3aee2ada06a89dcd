// Package diskcache keeps build outputs in a content-addressed directory
// cache, by the project's rules for files on disk: an entry is the
// directory <cacheDir>/<key>, where the caller's key hashes everything the
// build depends on; it is built under a temporary name and renamed into
// place, so a reader sees a whole entry or none; it is private to the user
// (directories 0700, files 0600); and a manifest of the SHA-256 of each of
// its files is verified on every use, so a corrupt or foreign entry is
// rebuilt, never loaded.
package diskcache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const (
	dirMode  = 0o700
	fileMode = 0o600
)

// ErrCorrupt is matched (errors.Is) by Verify's error when an entry's
// files do not match its manifest.
var ErrCorrupt = errors.New("diskcache: corrupt cache entry")

// Manifest describes the files of an entry.
type Manifest struct {
	// Name is the manifest's file name inside an entry.
	Name string
	// Files are the entry's files, relative to its root, in the order the
	// manifest lists them.
	Files []string
}

// Write makes the entry in dir and its files private (0700, 0600) and
// writes their manifest: one line "<sha256 hex> <file>" per file.
func (m Manifest) Write(dir string) error {
	if err := os.Chmod(dir, dirMode); err != nil {
		return err
	}
	var b strings.Builder
	for _, f := range m.Files {
		path := filepath.Join(dir, f)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.Chmod(path, fileMode); err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s %s\n", hex.EncodeToString(sum[:]), f)
	}
	return os.WriteFile(filepath.Join(dir, m.Name), []byte(b.String()), fileMode)
}

// Verify checks every file of the entry in dir against its manifest: the
// entry and its files must be this user's own and private, and match. A
// missing manifest is the error reading it; any mismatch is ErrCorrupt.
func (m Manifest) Verify(dir string) error {
	if err := privateEntry(dir); err != nil {
		return err
	}
	for _, f := range append([]string{m.Name}, m.Files...) {
		if err := privateFile(filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	text, err := os.ReadFile(filepath.Join(dir, m.Name))
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	if len(lines) != len(m.Files) {
		return ErrCorrupt
	}
	for i, f := range m.Files {
		want, name, ok := strings.Cut(lines[i], " ")
		if !ok || name != f {
			return ErrCorrupt
		}
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return ErrCorrupt
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != want {
			return ErrCorrupt
		}
	}
	return nil
}

// privateEntry checks that dir, an entry, is a directory (not a link)
// that only this user controls: owned by them, with no permission for
// anyone else. A missing entry is the error of Lstat.
func privateEntry(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory (%v)", ErrCorrupt, dir, fi.Mode())
	}
	return private(dir, fi)
}

// privateFile checks that path is a regular file (not a link) that only
// this user controls. A missing file is ErrCorrupt.
func privateFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (%v)", ErrCorrupt, path, fi.Mode())
	}
	return private(path, fi)
}

func private(path string, fi fs.FileInfo) error {
	if !OwnedByUser(fi) {
		return fmt.Errorf("%w: %s is owned by another user", ErrCorrupt, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s is open to other users (%v)", ErrCorrupt, path, fi.Mode())
	}
	return nil
}

// OwnDir creates dir (mode 0700) if it is missing, and checks that it is
// a directory, not a link, owned by this user: a cache's entries are used
// only from a directory no one else controls, and a link can be pointed
// elsewhere by whoever owns the folder it is in. It returns the
// directory's FileInfo. Its mode is the user's choice: another user can at
// most remove entries (they could not write one that verifies, since an
// entry must be this user's).
func OwnDir(dir string) (fs.FileInfo, error) {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("diskcache: %s is a symbolic link; name the directory it points to", dir)
	case !fi.IsDir():
		return nil, fmt.Errorf("diskcache: %s is not a directory", dir)
	case !OwnedByUser(fi):
		return nil, fmt.Errorf("diskcache: %s is owned by another user", dir)
	}
	return fi, nil
}

// UserDir is os.UserCacheDir()/rocsync/<name>.
func UserDir(name string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "rocsync", name), nil
}

// Entry is what Get needs of an entry's manifest: Write makes a freshly
// built entry private and records its contents; Verify checks an entry
// against that record and fails for a corrupt, truncated or foreign one.
// Manifest and TreeManifest are Entries.
type Entry interface {
	Write(dir string) error
	Verify(dir string) error
}

// Get returns cacheDir/key, in a cacheDir of this user's own (OwnDir). An
// entry there that verifies against m is reused; otherwise build fills a fresh private temporary directory with
// the entry's files, Get writes the manifest and renames the directory
// into place (an unverified entry found there is moved aside and removed).
// build's error is returned as it is, and a failed build leaves nothing in
// cacheDir.
func Get(cacheDir, key string, m Entry, build func(dir string) error) (string, error) {
	if _, err := OwnDir(cacheDir); err != nil {
		return "", err
	}
	root := filepath.Join(cacheDir, key)
	if m.Verify(root) == nil {
		return root, nil
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := os.Chmod(tmp, dirMode); err != nil {
		return "", err
	}
	if err := build(tmp); err != nil {
		return "", err
	}
	if err := m.Write(tmp); err != nil {
		return "", err
	}
	if _, err := os.Lstat(root); err == nil {
		// Another Get of the key may have published its identical build
		// while this one built: use it, rather than move aside an entry
		// its caller may be reading.
		if m.Verify(root) == nil {
			return root, nil
		}
		// Present but not verified: corrupt, truncated or foreign.
		old := root + ".corrupt-" + filepath.Base(tmp)
		if err := os.Rename(root, old); err != nil {
			return "", fmt.Errorf("diskcache: moving aside an unverified entry: %w", err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, root); err != nil {
		// Another process may have renamed its identical build first; its
		// entry must verify.
		if m.Verify(root) == nil {
			return root, nil
		}
		return "", err
	}
	if err := m.Verify(root); err != nil {
		return "", err
	}
	return root, nil
}

package diskcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrUnsupportedFile is matched (errors.Is) by TreeManifest.Write's error
// for an entry that holds something other than directories, regular files
// and symbolic links that stay inside the entry.
var ErrUnsupportedFile = errors.New("diskcache: unsupported file in an entry")

const treeMagic = "rocsync-diskcache-tree 1"

// TreeManifest is the manifest of an entry whose files are known only once
// it is built, such as an unpacked package tree. It lists every directory,
// regular file and symbolic link under the entry (the manifest itself
// aside) in lexical order: a directory with its mode, a file with its mode,
// size and SHA-256, a link with its target. Header is the caller's
// description of what the entry was built from; an entry whose manifest
// carries another header is foreign. The manifest's last line is the
// SHA-256 of the lines before it, so a damaged manifest is detected before
// any file is read.
type TreeManifest struct {
	// Name is the manifest's file name at the entry's top.
	Name string
	// Header is recorded in the manifest by Write and must be equal for
	// Verify to succeed.
	Header string
}

// Write makes the entry in dir private (directories 0700, files 0600, or
// 0700 where any execute bit was set; setuid, setgid and sticky bits go)
// and writes the manifest. A symbolic link whose target is absolute or
// leaves the entry (lexically), or any other kind of file, is
// ErrUnsupportedFile.
func (m TreeManifest) Write(dir string) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == m.Name {
			return nil
		}
		switch t := d.Type(); {
		case t.IsDir():
			return os.Chmod(path, dirMode)
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := os.FileMode(fileMode)
			if info.Mode()&0o111 != 0 {
				mode = dirMode
			}
			return os.Chmod(path, mode)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if !linkInside(rel, target) {
				return fmt.Errorf("%w: %s -> %s leaves the entry", ErrUnsupportedFile, rel, target)
			}
			return nil
		default:
			return fmt.Errorf("%w: %s (%v)", ErrUnsupportedFile, rel, t)
		}
	})
	if err != nil {
		return err
	}
	var body bytes.Buffer
	fmt.Fprintf(&body, "%s\nheader %s\n", treeMagic, strconv.Quote(m.Header))
	if err := m.list(dir, func(line string) error { body.WriteString(line); return nil }); err != nil {
		return err
	}
	sum := sha256.Sum256(body.Bytes())
	fmt.Fprintf(&body, "sum %s\n", hex.EncodeToString(sum[:]))
	return os.WriteFile(filepath.Join(dir, m.Name), body.Bytes(), fileMode)
}

// linkInside reports whether a link at rel (relative to the entry) with
// the given target resolves, lexically, to a path inside the entry.
func linkInside(rel, target string) bool {
	if filepath.IsAbs(target) {
		return false
	}
	p := filepath.Clean(filepath.Join(filepath.Dir(rel), target))
	return p != ".." && !strings.HasPrefix(p, "../")
}

// Verify checks the entry in dir against its manifest: that the entry and
// everything in it are this user's own, the manifest's own checksum, the header, and then every directory, file and link, their
// modes and contents, with nothing missing and nothing extra. A missing
// manifest is the error reading it; any mismatch is ErrCorrupt. Verify
// reads every file, and stops at the first difference.
func (m TreeManifest) Verify(dir string) error {
	if err := privateEntry(dir); err != nil {
		return err
	}
	if err := privateFile(filepath.Join(dir, m.Name)); err != nil {
		return err
	}
	text, err := os.ReadFile(filepath.Join(dir, m.Name))
	if err != nil {
		return err
	}
	body, sumLine, ok := cutLastLine(text)
	if !ok {
		return fmt.Errorf("%w: manifest has no checksum", ErrCorrupt)
	}
	sum := sha256.Sum256(body)
	if sumLine != "sum "+hex.EncodeToString(sum[:]) {
		return fmt.Errorf("%w: manifest checksum differs", ErrCorrupt)
	}
	head := treeMagic + "\nheader " + strconv.Quote(m.Header) + "\n"
	if !bytes.HasPrefix(body, []byte(head)) {
		return fmt.Errorf("%w: manifest of another entry (header differs)", ErrCorrupt)
	}
	rest := body[len(head):]
	errStop := errors.New("stop")
	var diff string
	err = m.list(dir, func(line string) error {
		if !bytes.HasPrefix(rest, []byte(line)) {
			diff = line
			return errStop
		}
		rest = rest[len(line):]
		return nil
	})
	switch {
	case errors.Is(err, errStop):
		return fmt.Errorf("%w: %s", ErrCorrupt, strings.TrimSpace(diff))
	case err != nil:
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	case len(rest) != 0:
		line, _, _ := strings.Cut(string(rest), "\n")
		return fmt.Errorf("%w: missing %s", ErrCorrupt, line)
	}
	return nil
}

// cutLastLine splits text ending in "\n" into the lines before its last
// line and that line (without "\n").
func cutLastLine(text []byte) (body []byte, last string, ok bool) {
	if len(text) == 0 || text[len(text)-1] != '\n' {
		return nil, "", false
	}
	i := bytes.LastIndexByte(text[:len(text)-1], '\n')
	if i < 0 {
		return nil, "", false
	}
	return text[:i+1], string(text[i+1 : len(text)-1]), true
}

// list calls line with the manifest line of each entry under dir, in
// lexical order.
func (m TreeManifest) list(dir string, line func(string) error) error {
	buf := make([]byte, 1<<20)
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == "." || rel == m.Name {
			return nil
		}
		q := strconv.Quote(filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		// The manifest records modes, not owners: a build's files are the
		// user's, and one another user owns is refused (Write's error, or
		// Verify's ErrCorrupt).
		if !OwnedByUser(info) {
			return fmt.Errorf("%s is owned by another user", q)
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			return line(fmt.Sprintf("d %s %s\n", mode, q))
		case mode.IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			h := sha256.New()
			n, err := io.CopyBuffer(h, f, buf)
			f.Close()
			if err != nil {
				return err
			}
			return line(fmt.Sprintf("f %s %d %s %s\n", mode, n, hex.EncodeToString(h.Sum(nil)), q))
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return line(fmt.Sprintf("l %s %s\n", q, strconv.Quote(target)))
		default:
			return line(fmt.Sprintf("? %v %s\n", mode.Type(), q))
		}
	})
}

//go:build unix

package diskcache

import (
	"io/fs"
	"os"
	"syscall"
)

// euid is os.Geteuid; the tests make files look another user's through it.
var euid = os.Geteuid

// OwnedByUser reports whether the current user owns the file: a cache uses
// only files and directories no one else controls.
func OwnedByUser(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == euid()
}

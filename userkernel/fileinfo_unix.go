//go:build unix

package userkernel

import (
	"io/fs"
	"strconv"
	"syscall"
)

// fileIdentity names a file's current contents cheaply: replacing or
// rewriting the file (a compiler upgrade) changes its inode, size or
// modification time.
func fileIdentity(fi fs.FileInfo) string {
	id := strconv.FormatInt(fi.Size(), 10) + ":" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id += ":" + strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(st.Ino, 10)
	}
	return id
}

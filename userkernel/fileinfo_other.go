//go:build !unix

package userkernel

import (
	"io/fs"
	"strconv"
)

func fileIdentity(fi fs.FileInfo) string {
	return strconv.FormatInt(fi.Size(), 10) + ":" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
}

package rocmroot

import (
	"context"
	"errors"
	"sort"
)

// ErrArchiveUnreachable is matched (errors.Is) by the error of a source
// that cannot reach the package archive (no apt, no network, no usable
// mirror in the system's apt configuration).
var ErrArchiveUnreachable = errors.New("rocmroot: the package archive is unreachable")

// ErrNotServed is matched (errors.Is) by the error for a wanted package
// the archive does not serve at any version.
var ErrNotServed = errors.New("rocmroot: package not served by the archive")

// ErrDownload is matched (errors.Is) by the error for a downloaded package
// whose size or SHA-256 differs from the archive's index.
var ErrDownload = errors.New("rocmroot: downloaded package differs from the archive's index")

// Package is one binary package of a resolved closure, as the archive's
// index describes it.
type Package struct {
	Name, Version, Arch string
	// SHA256 and Size are the .deb's, from the archive's (signed) index.
	SHA256 string
	Size   int64
}

// Source is a package archive: the network one is apt's (NewAptSource);
// tests use a fake.
type Source interface {
	// Versions returns, for each name, the versions the archive serves,
	// newest first; a name it does not serve has none.
	Versions(ctx context.Context, names []string) (map[string][]string, error)
	// Resolve returns the whole closure of the requests ("name" for the
	// newest version, "name=version") as if nothing were installed, libc6
	// included.
	Resolve(ctx context.Context, requests []string) ([]Package, error)
	// Download writes the .deb of each package into dir and returns their
	// paths, in the order of pkgs.
	Download(ctx context.Context, pkgs []Package, dir string) ([]string, error)
	// Close releases the source's working files.
	Close() error
}

func sortedPackages(ps []Package) []Package {
	out := append([]Package(nil), ps...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Command fetchroot fetches Debian's ROCm userspace releases into private
// roots (package rocmroot), or reuses the cached ones, and prints each
// root's folder. CI calls it before the ROCm suite; it is cheap when the
// roots are cached.
//
//	go run ./hsa/kfdsim/rocmroot/cmd/fetchroot -release trixie,sid [-rocblas] [-refresh]
//	go run ./hsa/kfdsim/rocmroot/cmd/fetchroot -release sid -print-pins
//
// Output: one line per release, "<release> <root folder>", on standard
// output; progress and WARNING lines on standard error. -print-pins
// prints the pin file lines of what the archive serves now instead. Exit
// status: 0 done, 1 failed, 2 a bad command line (checked before anything
// is fetched), 3 Debian's archive could not be reached.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
)

func main() {
	release := flag.String("release", "trixie,sid", "comma-separated releases of the pin file, or \"all\"")
	rocblas := flag.Bool("rocblas", false, "also fetch rocBLAS (166 MB for trixie, 280 MB for sid)")
	refresh := flag.Bool("refresh", false, "consult the archive even when a root of the pinned packages is cached")
	printPins := flag.Bool("print-pins", false, "print the pin file lines of the closure the archive serves now")
	cacheDir := flag.String("cache", "", "cache folder (default $"+rocmroot.CacheEnv+" or the user cache folder)")
	flag.Parse()
	if flag.NArg() > 0 {
		usage(fmt.Errorf("unexpected arguments %q (releases go in -release)", flag.Args()))
	}

	names := strings.Split(*release, ",")
	if *release == "all" {
		rs, err := rocmroot.Releases()
		if err != nil {
			fail(err)
		}
		names = names[:0]
		for n := range rs {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	// Every name is checked before anything is fetched: a typo after a
	// release that takes minutes to fetch is a usage error at once.
	for _, name := range names {
		if _, err := rocmroot.LookupRelease(name); err != nil {
			usage(err)
		}
	}
	ctx := context.Background()
	for _, name := range names {
		if *printPins {
			text, err := pinLines(ctx, name, *cacheDir)
			if err != nil {
				fail(err)
			}
			fmt.Print(text, "\n")
			continue
		}
		o := rocmroot.Options{Release: name, CacheDir: *cacheDir, Refresh: *refresh}
		if *rocblas {
			o.Groups = []rocmroot.Group{rocmroot.RocBLAS}
		}
		start := time.Now()
		r, err := rocmroot.Fetch(ctx, o)
		if err != nil {
			fail(err)
		}
		how := "cached"
		if r.Built {
			how = "built"
		}
		fmt.Fprintf(os.Stderr, "fetchroot: %s: %d packages, %s in %.1fs, %d warnings\n", name, len(r.Packages), how, time.Since(start).Seconds(), len(r.Warnings))
		fmt.Printf("%s %s\n", name, r.Dir)
	}
}

// pinLines resolves the release's wanted packages at the newest versions
// the archive serves, without and with each optional group.
func pinLines(ctx context.Context, name, cacheDir string) (string, error) {
	rel, err := rocmroot.LookupRelease(name)
	if err != nil {
		return "", err
	}
	if cacheDir == "" {
		if cacheDir, err = rocmroot.DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	src, err := rocmroot.NewAptSource(ctx, rel.Suite, cacheDir)
	if err != nil {
		return "", err
	}
	defer src.Close()
	var base, all []string
	for _, w := range rel.Want {
		all = append(all, w.Name)
		if w.Group == rocmroot.Base {
			base = append(base, w.Name)
		}
	}
	basePkgs, err := src.Resolve(ctx, base)
	if err != nil {
		return "", err
	}
	allPkgs, err := src.Resolve(ctx, all)
	if err != nil {
		return "", err
	}
	inBase := map[string]bool{}
	for _, p := range basePkgs {
		inBase[p.Name] = true
	}
	var extra []rocmroot.Package
	for _, p := range allPkgs {
		if !inBase[p.Name] {
			extra = append(extra, p)
		}
	}
	return rocmroot.FormatPins(rel.Name, rel.Suite, rel.Want, basePkgs, map[rocmroot.Group][]rocmroot.Package{rocmroot.RocBLAS: extra}), nil
}

// usage reports a bad command line: exit status 2, as the flag package's.
func usage(err error) {
	fmt.Fprintln(os.Stderr, "fetchroot:", err)
	os.Exit(2)
}

// fail reports a failure: exit status 3 when Debian's archive cannot be
// reached, else 1.
func fail(err error) {
	fmt.Fprintln(os.Stderr, "fetchroot:", err)
	if errors.Is(err, rocmroot.ErrArchiveUnreachable) {
		os.Exit(3)
	}
	os.Exit(1)
}

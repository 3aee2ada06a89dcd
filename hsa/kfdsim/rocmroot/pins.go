package rocmroot

import (
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// pinFile is the one file that pins each release's packages.
//
//go:embed pins.txt
var pinFile string

// ErrUnknownRelease is matched (errors.Is) by the error for a release the
// pin file does not describe.
var ErrUnknownRelease = errors.New("rocmroot: unknown release")

// ErrPinFile is matched (errors.Is) by the error for a malformed pin file.
var ErrPinFile = errors.New("rocmroot: malformed pin file")

// Group names the optional package sets of a release.
type Group string

const (
	// Base is the runtime: ROCr, the thunk, HIP, comgr and their closure.
	Base Group = ""
	// RocBLAS adds rocBLAS (166 MB to 280 MB of download), fetched only
	// when asked for.
	RocBLAS Group = "rocblas"
)

// Pin is a package of a release's closure at the version it is pinned to.
type Pin struct {
	Name, Version string
	Group         Group
}

// Release is one release's entry in the pin file.
type Release struct {
	// Name is the release (trixie, sid), Suite the archive suite it is
	// fetched from.
	Name, Suite string
	// Want are the packages asked for; their closure is resolved by apt.
	Want []Pin
	// Pins are the whole closure at the versions it was pinned at
	// (Want's versions among them).
	Pins []Pin
}

// wanted returns the wanted packages of the groups.
func (r Release) wanted(groups []Group) []Pin { return inGroups(r.Want, groups) }

// pinned returns the pins of the groups, sorted by name.
func (r Release) pinned(groups []Group) []Pin {
	p := inGroups(r.Pins, groups)
	sort.Slice(p, func(i, j int) bool { return p[i].Name < p[j].Name })
	return p
}

func inGroups(ps []Pin, groups []Group) []Pin {
	var out []Pin
	for _, p := range ps {
		if p.Group == Base || hasGroup(groups, p.Group) {
			out = append(out, p)
		}
	}
	return out
}

func hasGroup(groups []Group, g Group) bool {
	for _, x := range groups {
		if x == g {
			return true
		}
	}
	return false
}

// Releases returns the releases of the pin file, by name.
func Releases() (map[string]Release, error) { return parsePins(pinFile) }

// LookupRelease returns the pin file's entry for name.
func LookupRelease(name string) (Release, error) {
	rs, err := Releases()
	if err != nil {
		return Release{}, err
	}
	r, ok := rs[name]
	if !ok {
		names := make([]string, 0, len(rs))
		for n := range rs {
			names = append(names, n)
		}
		sort.Strings(names)
		return Release{}, fmt.Errorf("%w %q (the pin file has %s)", ErrUnknownRelease, name, strings.Join(names, ", "))
	}
	return r, nil
}

// parsePins parses the pin file's lines:
//
//	release <name> <suite>
//	want <package> <version> [group]
//	pin <package> <version> [group]
//
// '#' starts a comment. A want is pinned too.
func parsePins(text string) (map[string]Release, error) {
	rs := map[string]Release{}
	var cur *Release
	flush := func() {
		if cur != nil {
			rs[cur.Name] = *cur
		}
	}
	for i, line := range strings.Split(text, "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(why string) error {
			return fmt.Errorf("%w: line %d: %s: %q", ErrPinFile, i+1, why, strings.TrimSpace(line))
		}
		switch f[0] {
		case "release":
			if len(f) != 3 {
				return nil, bad("want: release <name> <suite>")
			}
			flush()
			if _, dup := rs[f[1]]; dup {
				return nil, bad("release listed twice")
			}
			cur = &Release{Name: f[1], Suite: f[2]}
		case "want", "pin":
			if cur == nil {
				return nil, bad("before any release line")
			}
			if len(f) != 3 && len(f) != 4 {
				return nil, bad("want: " + f[0] + " <package> <version> [group]")
			}
			p := Pin{Name: f[1], Version: f[2]}
			if len(f) == 4 {
				p.Group = Group(f[3])
				if p.Group != RocBLAS {
					return nil, bad("unknown group")
				}
			}
			for _, q := range cur.Pins {
				if q.Name == p.Name {
					return nil, bad("package pinned twice")
				}
			}
			cur.Pins = append(cur.Pins, p)
			if f[0] == "want" {
				cur.Want = append(cur.Want, p)
			}
		default:
			return nil, bad("unknown keyword")
		}
	}
	flush()
	for _, r := range rs {
		if len(r.Want) == 0 {
			return nil, fmt.Errorf("%w: release %s wants no package", ErrPinFile, r.Name)
		}
	}
	return rs, nil
}

// FormatPins writes a release's pin file section for the resolved
// closures: base is the closure without optional groups, extra the
// packages each group adds.
func FormatPins(name, suite string, want []Pin, base []Package, extra map[Group][]Package) string {
	var b strings.Builder
	fmt.Fprintf(&b, "release %s %s\n", name, suite)
	isWant := map[string]bool{}
	for _, w := range want {
		isWant[w.Name] = true
	}
	line := func(p Package, g Group) {
		kw := "pin"
		if isWant[p.Name] {
			kw = "want"
		}
		if g == Base {
			fmt.Fprintf(&b, "%s %s %s\n", kw, p.Name, p.Version)
		} else {
			fmt.Fprintf(&b, "%s %s %s %s\n", kw, p.Name, p.Version, g)
		}
	}
	for _, p := range sortedPackages(base) {
		line(p, Base)
	}
	groups := make([]string, 0, len(extra))
	for g := range extra {
		groups = append(groups, string(g))
	}
	sort.Strings(groups)
	for _, g := range groups {
		for _, p := range sortedPackages(extra[Group(g)]) {
			line(p, Group(g))
		}
	}
	return b.String()
}

package rocmroot

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// MirrorEnv names the environment variable that overrides the archive URI
// taken from the system's apt configuration.
const MirrorEnv = "ROCSYNC_DEBIAN_MIRROR"

// Mirror is the Debian archive the system's apt configuration uses.
type Mirror struct {
	// URI is the archive's base URI (the one the system's sources name).
	URI string
	// SignedBy is the entry's Signed-By value (a keyring path or an
	// inline key block), "" when it has none.
	SignedBy string
}

// sourceEntry is one entry of an apt sources file.
type sourceEntry struct {
	Types, URIs, Suites, Components []string
	SignedBy                        string
	Enabled                         bool
}

// debianSuites are the suite names of Debian's own archive, for systems
// whose codename is not among an entry's suites.
var debianSuites = map[string]bool{
	"oldstable": true, "stable": true, "testing": true, "unstable": true,
	"buster": true, "bullseye": true, "bookworm": true, "trixie": true, "forky": true, "duke": true, "sid": true,
}

// SystemMirror returns the archive of the system's apt sources: the entry
// of type deb, component main, whose suite is the system's codename (from
// /etc/os-release), or else a Debian suite name. MirrorEnv overrides the
// URI. No host name is built in: a machine without such an entry gets
// ErrArchiveUnreachable.
func SystemMirror(ctx context.Context) (Mirror, error) {
	paths, err := aptConfigPaths(ctx, nil)
	if err != nil {
		return Mirror{}, err
	}
	var entries []sourceEntry
	if b, err := os.ReadFile(paths["SourceList"]); err == nil {
		entries = append(entries, parseOneLineSources(string(b))...)
	}
	if dir := paths["SourceParts"]; dir != "" {
		names, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				continue
			}
			switch {
			case strings.HasSuffix(n, ".list"):
				entries = append(entries, parseOneLineSources(string(b))...)
			case strings.HasSuffix(n, ".sources"):
				entries = append(entries, parseDeb822Sources(string(b))...)
			}
		}
	}
	m, ok := pickMirror(entries, osCodename())
	if uri := os.Getenv(MirrorEnv); uri != "" {
		return Mirror{URI: uri, SignedBy: m.SignedBy}, nil
	}
	if !ok {
		return Mirror{}, fmt.Errorf("%w: no Debian archive (type deb, component main) among the system's apt sources; set %s", ErrArchiveUnreachable, MirrorEnv)
	}
	return m, nil
}

func osCodename() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VERSION_CODENAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// pickMirror chooses the entry for the system's codename, else the first
// with a Debian suite name.
func pickMirror(entries []sourceEntry, codename string) (Mirror, bool) {
	usable := func(e sourceEntry) bool {
		return e.Enabled && contains(e.Types, "deb") && contains(e.Components, "main") && len(e.URIs) > 0
	}
	for _, pass := range []func(string) bool{
		func(s string) bool { return codename != "" && s == codename },
		func(s string) bool { return debianSuites[s] },
	} {
		for _, e := range entries {
			if !usable(e) {
				continue
			}
			for _, s := range e.Suites {
				if pass(s) {
					return Mirror{URI: e.URIs[0], SignedBy: e.SignedBy}, true
				}
			}
		}
	}
	return Mirror{}, false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// parseOneLineSources parses "deb [opts] uri suite comp..." lines.
func parseOneLineSources(text string) []sourceEntry {
	var out []sourceEntry
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		e := sourceEntry{Types: []string{f[0]}, Enabled: true}
		rest := f[1:]
		if strings.HasPrefix(rest[0], "[") {
			opts := strings.TrimPrefix(rest[0], "[")
			rest = rest[1:]
			for !strings.HasSuffix(opts, "]") && len(rest) > 0 {
				opts += " " + rest[0]
				rest = rest[1:]
			}
			for _, o := range strings.Fields(strings.TrimSuffix(opts, "]")) {
				if v, ok := strings.CutPrefix(o, "signed-by="); ok {
					e.SignedBy = v
				}
			}
		}
		if len(rest) < 2 {
			continue
		}
		e.URIs = []string{rest[0]}
		e.Suites = []string{rest[1]}
		e.Components = rest[2:]
		out = append(out, e)
	}
	return out
}

// parseDeb822Sources parses deb822 stanzas (Types, URIs, Suites,
// Components, Signed-By, Enabled; continuation lines start with white
// space, comments with '#').
func parseDeb822Sources(text string) []sourceEntry {
	var out []sourceEntry
	fields := map[string]string{}
	var last string
	flush := func() {
		if len(fields) == 0 {
			return
		}
		e := sourceEntry{
			Types: strings.Fields(fields["types"]), URIs: strings.Fields(fields["uris"]),
			Suites: strings.Fields(fields["suites"]), Components: strings.Fields(fields["components"]),
			SignedBy: strings.TrimSpace(fields["signed-by"]),
			Enabled:  !strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no"),
		}
		out = append(out, e)
		fields = map[string]string{}
		last = ""
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += "\n" + line
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}

// aptConfigPaths asks apt-config for the source and keyring locations.
func aptConfigPaths(ctx context.Context, env []string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "apt-config", "shell",
		"SourceList", "Dir::Etc::SourceList/f", "SourceParts", "Dir::Etc::SourceParts/d",
		"Trusted", "Dir::Etc::Trusted/f", "TrustedParts", "Dir::Etc::TrustedParts/d")
	cmd.Env = toolEnv(env)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: apt-config: %v", ErrArchiveUnreachable, err)
	}
	paths := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		paths[k] = strings.Trim(v, "'")
	}
	return paths, nil
}

// systemProxyConfig returns the proxy settings of the system's apt
// configuration, as config lines.
func systemProxyConfig(ctx context.Context) string {
	cmd := exec.CommandContext(ctx, "apt-config", "dump")
	cmd.Env = toolEnv(nil)
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if k, _, ok := strings.Cut(l, " "); ok && strings.HasPrefix(k, "Acquire::") && strings.Contains(k, "Proxy") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// toolEnv is the environment for host tools (apt, dpkg-deb): the caller's
// proxy settings and nothing of a root's loader configuration (LD_*), which
// breaks host binaries.
func toolEnv(extra []string) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "ftp_proxy", "no_proxy", "all_proxy", "home", "tmpdir":
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// aptSource is a Source backed by apt-get and apt-cache with a throwaway
// configuration: its own sources list naming one suite, its own lists and
// cache folders, and an empty dpkg status file, so that apt resolves the
// whole closure and the system's apt state is never read or written.
type aptSource struct {
	suite string
	work  string
	env   []string
}

// NewAptSource makes a throwaway apt configuration for suite in a private
// temporary folder under parent (removed by Close) and fetches the suite's
// package lists from the system's mirror (SystemMirror). A failed fetch is
// ErrArchiveUnreachable.
func NewAptSource(ctx context.Context, suite, parent string) (Source, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("%w: ROCm roots are fetched for amd64 only, not %s", ErrArchiveUnreachable, runtime.GOARCH)
	}
	for _, tool := range []string{"apt-get", "apt-cache", "apt-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s not found", ErrArchiveUnreachable, tool)
		}
	}
	mirror, err := SystemMirror(ctx)
	if err != nil {
		return nil, err
	}
	sys, err := aptConfigPaths(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(parent, ".apt-"+suite+"-")
	if err != nil {
		return nil, err
	}
	s := &aptSource{suite: suite, work: work}
	if err := s.configure(ctx, mirror, sys); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.update(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *aptSource) configure(ctx context.Context, m Mirror, sys map[string]string) error {
	if err := os.Chmod(s.work, 0o700); err != nil {
		return err
	}
	w := s.work
	for _, d := range []string{"state/lists/partial", "cache/archives/partial", "etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d", "log"} {
		if err := os.MkdirAll(filepath.Join(w, d), 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(w, "state/status"), nil, 0o600); err != nil {
		return err
	}
	src := fmt.Sprintf("Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n", m.URI, s.suite)
	if m.SignedBy != "" {
		src += "Signed-By: " + m.SignedBy + "\n"
	}
	if err := os.WriteFile(filepath.Join(w, "etc/sources.list.d/rocmroot.sources"), []byte(src), 0o600); err != nil {
		return err
	}
	q := func(p string) string { return strconv.Quote(p) }
	var c strings.Builder
	for _, kv := range [][2]string{
		{"Dir::State", filepath.Join(w, "state")},
		{"Dir::State::Lists", filepath.Join(w, "state/lists")},
		{"Dir::State::status", filepath.Join(w, "state/status")},
		{"Dir::State::extended_states", filepath.Join(w, "state/extended_states")},
		{"Dir::Cache", filepath.Join(w, "cache")},
		{"Dir::Cache::archives", filepath.Join(w, "cache/archives")},
		{"Dir::Etc", filepath.Join(w, "etc")},
		{"Dir::Etc::main", filepath.Join(w, "etc/apt.conf")},
		{"Dir::Etc::Parts", filepath.Join(w, "etc/apt.conf.d")},
		{"Dir::Etc::SourceList", filepath.Join(w, "etc/sources.list")},
		{"Dir::Etc::SourceParts", filepath.Join(w, "etc/sources.list.d")},
		{"Dir::Etc::Preferences", filepath.Join(w, "etc/preferences")},
		{"Dir::Etc::PreferencesParts", filepath.Join(w, "etc/preferences.d")},
		{"Dir::Etc::Trusted", sys["Trusted"]},
		{"Dir::Etc::TrustedParts", sys["TrustedParts"]},
		{"Dir::Log", filepath.Join(w, "log")},
		{"APT::Architecture", "amd64"},
		{"APT::Install-Recommends", "false"},
		{"APT::Install-Suggests", "false"},
		// sid's Release file carries a Valid-Until this machine's clock
		// may have passed.
		{"Acquire::Check-Valid-Until", "false"},
		{"Acquire::Languages", "none"},
	} {
		if strings.ContainsAny(kv[1], "\"\n") {
			return fmt.Errorf("rocmroot: unusable path for apt: %q", kv[1])
		}
		fmt.Fprintf(&c, "%s %s;\n", kv[0], q(kv[1]))
	}
	c.WriteString("APT::Architectures { \"amd64\"; };\n")
	if os.Geteuid() == 0 {
		// apt drops root to _apt for downloads, which cannot enter the
		// private (0700) folders.
		c.WriteString("APT::Sandbox::User \"root\";\n")
	}
	c.WriteString(systemProxyConfig(ctx))
	conf := filepath.Join(w, "apt.conf")
	if err := os.WriteFile(conf, []byte(c.String()), 0o600); err != nil {
		return err
	}
	s.env = []string{"APT_CONFIG=" + conf}
	return nil
}

// run runs an apt tool with the throwaway configuration.
func (s *aptSource) run(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = toolEnv(s.env)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return out, nil
}

func (s *aptSource) update(ctx context.Context) error {
	_, err := s.run(ctx, s.work, "apt-get", "update", "-q")
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrArchiveUnreachable, s.suite, err)
	}
	lists, _ := filepath.Glob(filepath.Join(s.work, "state/lists/*_Packages*"))
	if len(lists) == 0 {
		return fmt.Errorf("%w: apt-get update fetched no package list for %s", ErrArchiveUnreachable, s.suite)
	}
	return nil
}

func (s *aptSource) Versions(ctx context.Context, names []string) (map[string][]string, error) {
	out, err := s.run(ctx, s.work, "apt-cache", append([]string{"madison"}, names...)...)
	if err != nil {
		return nil, err
	}
	return parseMadison(string(out)), nil
}

// parseMadison parses "name | version | uri suite/component arch Packages".
func parseMadison(text string) map[string][]string {
	v := map[string][]string{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Split(l, "|")
		if len(f) < 3 || !strings.HasSuffix(strings.TrimSpace(f[2]), "Packages") {
			continue
		}
		name, ver := strings.TrimSpace(f[0]), strings.TrimSpace(f[1])
		if !contains(v[name], ver) {
			v[name] = append(v[name], ver)
		}
	}
	return v
}

var instLine = regexp.MustCompile(`^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) .*\[(\S+)\]\)`)

func (s *aptSource) Resolve(ctx context.Context, requests []string) ([]Package, error) {
	args := append([]string{"install", "-s", "-q", "--no-install-recommends"}, requests...)
	out, err := s.run(ctx, s.work, "apt-get", args...)
	if err != nil {
		return nil, err
	}
	var specs []string
	var pkgs []Package
	for _, l := range strings.Split(string(out), "\n") {
		m := instLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		pkgs = append(pkgs, Package{Name: m[1], Version: m[2], Arch: m[3]})
		specs = append(specs, m[1]+"="+m[2])
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("rocmroot: apt resolved no package for %v:\n%s", requests, out)
	}
	show, err := s.run(ctx, s.work, "apt-cache", append([]string{"show", "--no-all-versions"}, specs...)...)
	if err != nil {
		return nil, err
	}
	idx := parseStanzas(string(show))
	for i, p := range pkgs {
		st, ok := idx[p.Name+"="+p.Version]
		if !ok || st["SHA256"] == "" {
			return nil, fmt.Errorf("rocmroot: the archive's index has no SHA256 for %s %s", p.Name, p.Version)
		}
		pkgs[i].SHA256 = st["SHA256"]
		pkgs[i].Size, _ = strconv.ParseInt(st["Size"], 10, 64)
	}
	return pkgs, nil
}

// parseStanzas indexes apt-cache show's stanzas by "Package=Version".
func parseStanzas(text string) map[string]map[string]string {
	idx := map[string]map[string]string{}
	cur := map[string]string{}
	flush := func() {
		if cur["Package"] != "" {
			idx[cur["Package"]+"="+cur["Version"]] = cur
		}
		cur = map[string]string{}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			continue
		}
		if k, v, ok := strings.Cut(l, ":"); ok {
			cur[k] = strings.TrimSpace(v)
		}
	}
	flush()
	return idx
}

// debFileName is the name apt-get download gives a package's file.
func debFileName(p Package) string {
	return p.Name + "_" + strings.ReplaceAll(p.Version, ":", "%3a") + "_" + p.Arch + ".deb"
}

func (s *aptSource) Download(ctx context.Context, pkgs []Package, dir string) ([]string, error) {
	args := []string{"download", "-q"}
	for _, p := range pkgs {
		args = append(args, p.Name+"="+p.Version)
	}
	if _, err := s.run(ctx, dir, "apt-get", args...); err != nil {
		return nil, err
	}
	paths := make([]string, len(pkgs))
	for i, p := range pkgs {
		paths[i] = filepath.Join(dir, debFileName(p))
		if _, err := os.Stat(paths[i]); err != nil {
			return nil, fmt.Errorf("rocmroot: apt-get download left no %s: %w", debFileName(p), err)
		}
	}
	return paths, nil
}

func (s *aptSource) Close() error {
	if s.work == "" {
		return nil
	}
	err := os.RemoveAll(s.work)
	s.work = ""
	return err
}

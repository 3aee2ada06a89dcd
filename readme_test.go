package rocsync

import (
	"go/format"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// The README's usage example is gofmt-clean Go.
func TestReadmeUsageIsGofmtClean(t *testing.T) {
	src := readmeBlock(t, "## Usage", "```go\n")
	formatted, err := format.Source([]byte(src))
	require.NoError(t, err, "the example parses")
	require.Equal(t, string(formatted), src, "gofmt would change the README's example")
}

// The README stays a page a newcomer reads: about 150 lines, and no long
// paragraphs (table rows excepted).
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	require.LessOrEqual(t, len(lines), 160, "README.md has %d lines; detail belongs in docs/", len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "|") {
			continue
		}
		require.LessOrEqual(t, len([]rune(l)), 160, "README.md:%d is %d characters long", i+1, len([]rune(l)))
	}
}

// Every relative link of the README and docs/ names a file that exists, and
// every #anchor a heading of that file.
func TestDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	var bad []string
	for _, file := range docFiles(t) {
		text := stripCode(readText(t, file))
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			if path == "" {
				path = file
			} else {
				path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
			}
			if _, err := os.Stat(path); err != nil {
				bad = append(bad, file+": "+target+" (no such file)")
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !headingAnchors(t, path)[anchor] {
				bad = append(bad, file+": "+target+" (no such heading)")
			}
		}
	}
	require.Empty(t, bad, "broken links")
}

// The Options and EmulatorOptions fields the docs name exist.
func TestDocsOptionFieldsExist(t *testing.T) {
	types := map[string]reflect.Type{
		"Options":         reflect.TypeOf(Options{}),
		"EmulatorOptions": reflect.TypeOf(EmulatorOptions{}),
	}
	// Unqualified or rocsync.-qualified: emu.Options is another type.
	field := regexp.MustCompile(`(?:^|[^.\w]|rocsync\.)(Options|EmulatorOptions)\.([A-Z][A-Za-z0-9]*)`)
	var bad []string
	for _, file := range docFiles(t) {
		for _, m := range field.FindAllStringSubmatch(readText(t, file), -1) {
			if _, ok := types[m[1]].FieldByName(m[2]); !ok {
				bad = append(bad, file+": "+m[1]+"."+m[2])
			}
		}
	}
	require.Empty(t, dedup(bad), "fields the docs name that the types lack")
}

// The tests, benchmarks and examples the docs name exist (a name may be a
// prefix, as in TestReplayEqualsEager*), and so do the ROCSYNC_ environment
// variables.
func TestDocsNamesExist(t *testing.T) {
	var src strings.Builder
	require.NoError(t, filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src.Write(b)
			src.WriteByte('\n')
		}
		return nil
	}))
	code := src.String()
	funcs := map[string]bool{}
	for _, m := range regexp.MustCompile(`func ((?:Test|Benchmark|Example)[A-Za-z0-9_]*)\(`).FindAllStringSubmatch(code, -1) {
		funcs[m[1]] = true
	}
	name := regexp.MustCompile(`\b(?:Test|Benchmark|Example)[A-Z_][A-Za-z0-9_]*`)
	env := regexp.MustCompile(`\bROCSYNC_[A-Z0-9_]*[A-Z0-9]`)
	var bad []string
	for _, file := range docFiles(t) {
		text := readText(t, file)
		for _, n := range name.FindAllString(text, -1) {
			if !funcs[n] && !hasPrefixKey(funcs, n) {
				bad = append(bad, file+": "+n)
			}
		}
		for _, v := range env.FindAllString(text, -1) {
			if !strings.Contains(code, `"`+v+`"`) && !strings.Contains(code, `"`+v+`=`) {
				bad = append(bad, file+": $"+v)
			}
		}
	}
	require.Empty(t, dedup(bad), "names the docs use that the code lacks")
}

// The commands the docs show name programs that exist, and the bench
// command's flags that it defines.
func TestDocsCommandsExist(t *testing.T) {
	flags := map[string]bool{"h": true}
	benchSrc, err := filepath.Glob("bench/*.go")
	require.NoError(t, err)
	def := regexp.MustCompile(`fs\.[A-Za-z0-9]+\((?:&[^,]+, )?"([a-z0-9-]+)"`)
	for _, f := range benchSrc {
		for _, m := range def.FindAllStringSubmatch(readText(t, f), -1) {
			flags[m[1]] = true
		}
	}
	require.Contains(t, flags, "backend", "the bench's flags are found")
	goRun := regexp.MustCompile(`go run (\./[A-Za-z0-9_./-]*)`)
	bench := regexp.MustCompile(`(?:^|\s)(?:go run \./bench|bench|\.gpubin/bench[0-9]*)((?:\s+[^\s#|;&]+)*)`)
	var bad []string
	for _, file := range docFiles(t) {
		for _, block := range shellBlocks(readText(t, file)) {
			for _, line := range strings.Split(block, "\n") {
				for _, m := range goRun.FindAllStringSubmatch(line, -1) {
					if !isMainPackage(t, m[1]) {
						bad = append(bad, file+": go run "+m[1]+" (no main package)")
					}
				}
				for _, m := range bench.FindAllStringSubmatch(line, -1) {
					for _, arg := range strings.Fields(m[1]) {
						if !strings.HasPrefix(arg, "-") || len(arg) < 2 {
							continue
						}
						f, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
						if !flags[f] {
							bad = append(bad, file+": bench "+arg)
						}
					}
				}
			}
		}
	}
	require.Empty(t, dedup(bad), "commands the docs show that do not exist")
}

// readmeBlock returns the first code block opened by fence after heading.
func readmeBlock(t *testing.T, heading, fence string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "no %q section", heading)
	s = s[i:]
	j := strings.Index(s, fence)
	require.GreaterOrEqual(t, j, 0, "no %q block under %q", fence, heading)
	s = s[j+len(fence):]
	k := strings.Index(s, "```\n")
	require.GreaterOrEqual(t, k, 0)
	return s[:k]
}

// docFiles lists README.md and the Markdown files under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	return append([]string{"README.md"}, files...)
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// stripCode removes fenced code blocks, where brackets are not links.
func stripCode(s string) string {
	var out strings.Builder
	in := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			out.WriteString(l)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// shellBlocks returns the bodies of the ```sh blocks of a Markdown text.
func shellBlocks(s string) []string {
	var blocks []string
	for _, part := range strings.Split(s, "```sh\n")[1:] {
		body, _, _ := strings.Cut(part, "```")
		blocks = append(blocks, body)
	}
	return blocks
}

// headingAnchors returns the GitHub anchors of a Markdown file's headings.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	for _, l := range strings.Split(stripCode(readText(t, path)), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

var mainPackage = regexp.MustCompile(`(?m)^package main$`)

// isMainPackage reports whether dir holds a Go main package.
func isMainPackage(t *testing.T, dir string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") && mainPackage.MatchString(readText(t, f)) {
			return true
		}
	}
	return false
}

func hasPrefixKey(m map[string]bool, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func dedup(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

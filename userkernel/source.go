package userkernel

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rocsync/rocsync/kernels"
)

// ErrSource is matched (errors.Is) by errors about a Source itself: an
// unreadable code object or PTX module, two objects for one target, a
// compile option that is not allowed, an #include or another read of a file.
var ErrSource = errors.New("userkernel: bad kernel source")

type sourceKind uint8

const (
	sourceCodeObjects sourceKind = iota + 1
	sourcePTX
	sourceOpenCL
)

// Source is where a user's kernels come from. It is immutable and safe to
// share between goroutines and devices. Make one with CodeObjects, PTX or
// OpenCL.
type Source struct {
	kind sourceKind
	// id is a content hash of everything in the Source; a Registry keys
	// loaded images by it, so two Sources with the same content share one.
	id [32]byte

	objects []*Image // prebuilt AMD code objects, one per target
	modules []*Image // prebuilt PTX modules, one per architecture

	openCL  string
	options []string
	// declared, when set, gives the kernels' signatures for a declared
	// image (WithDeclarations) instead of openCL's own declarations.
	declared string
}

// ID returns the content hash that identifies the Source.
func (s *Source) ID() [32]byte { return s.id }

// CodeObjects makes a Source from prebuilt AMD code objects (ELF shared
// objects, e.g. from clang or hipcc --genco), one per gfx target and
// code-object version. Each object's target and version are read from the
// object itself (its metadata note and ELF header), so nothing can be
// mislabelled; two objects for the same target, features and version are
// an error. The bytes are copied.
func CodeObjects(objects ...[]byte) (*Source, error) {
	if len(objects) == 0 {
		return nil, fmt.Errorf("%w: no code objects", ErrSource)
	}
	s := &Source{kind: sourceCodeObjects}
	h := sha256.New()
	h.Write([]byte("rocsync userkernel code objects\x00"))
	seen := map[string]int{}
	for i, obj := range objects {
		img, err := amdImage(slices.Clone(obj), 0)
		if err != nil {
			return nil, fmt.Errorf("%w: code object %d: %w", ErrSource, i, err)
		}
		id := img.amdTarget + "/" + img.Target.CodeObject.String()
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("%w: code objects %d and %d are both for %s", ErrSource, j, i, id)
		}
		seen[id] = i
		writeField(h, img.Code)
		s.objects = append(s.objects, img)
	}
	h.Sum(s.id[:0])
	return s, nil
}

// PTX makes a Source from PTX modules (text, NUL-terminated or not), one
// per architecture, each naming its architecture in its .target line. A
// device gets the newest module not newer than itself: the CUDA driver
// compiles PTX for later GPUs. The bytes are copied.
func PTX(modules ...[]byte) (*Source, error) {
	if len(modules) == 0 {
		return nil, fmt.Errorf("%w: no PTX modules", ErrSource)
	}
	s := &Source{kind: sourcePTX}
	h := sha256.New()
	h.Write([]byte("rocsync userkernel ptx\x00"))
	seen := map[string]int{}
	for i, m := range modules {
		img, err := ptxImage(m)
		if err != nil {
			return nil, fmt.Errorf("%w: PTX module %d: %w", ErrSource, i, err)
		}
		if j, dup := seen[img.Target.Arch]; dup {
			return nil, fmt.Errorf("%w: PTX modules %d and %d are both for %s", ErrSource, j, i, img.Target.Arch)
		}
		seen[img.Target.Arch] = i
		writeField(h, img.Code)
		s.modules = append(s.modules, img)
	}
	h.Sum(s.id[:0])
	return s, nil
}

// allowedOptionPrefixes are the compile options OpenCL accepts: macros,
// OpenCL language options, optimisation and warning levels, and
// floating-point contraction. Everything else is refused, because the
// Builder decides the target, the output and the include paths itself, and
// because an option that reads a file (-include, -I, @file) would make the
// output depend on something the cache key does not cover.
var allowedOptionPrefixes = []string{"-D", "-U", "-cl-", "-O", "-W", "-ffp-contract="}

// OpenCL makes a Source from OpenCL C source text, compiled per device by a
// Builder with the options given (allowed: -D…, -U…, -cl-…, -O…, -W…,
// -ffp-contract=…; the default optimisation is -O3). The kernels are
// compiled without device libraries (-nogpulib): they may use compiler
// builtins and the work-item functions (get_global_id and the like, which
// the Builder provides for both AMD and NVIDIA), but not the OpenCL math
// library. Reading another file is refused (#include, #include_next,
// #import, #embed, __has_include, __has_embed, in any form the
// preprocessor reads: digraphs, comments, any blank): the cache key covers
// the source text only.
func OpenCL(source string, options ...string) (*Source, error) {
	if strings.TrimSpace(source) == "" {
		return nil, fmt.Errorf("%w: empty OpenCL source", ErrSource)
	}
	for _, opt := range options {
		ok := false
		for _, p := range allowedOptionPrefixes {
			if strings.HasPrefix(opt, p) && len(opt) > len(p) || opt == "-w" {
				ok = true
				break
			}
		}
		// -Wp, -Wa and -Wl hand options to the preprocessor, assembler
		// and linker (-Wp,-include,file would read a file).
		for _, pass := range []string{"-Wp,", "-Wa,", "-Wl,", "-Xclang", "-Xlinker", "-Xpreprocessor"} {
			if strings.HasPrefix(opt, pass) {
				ok = false
			}
		}
		if !ok || strings.ContainsAny(opt, "\x00\n") {
			return nil, fmt.Errorf("%w: compile option %q is not allowed (allowed: %s…, -w)",
				ErrSource, opt, strings.Join(allowedOptionPrefixes, "…, "))
		}
	}
	if line, found := findInclude(source); found {
		return nil, fmt.Errorf("%w: line %d: #include, #embed and __has_include are not supported (the cache key covers the source text only)", ErrSource, line)
	}
	s := &Source{kind: sourceOpenCL, openCL: source, options: slices.Clone(options)}
	h := sha256.New()
	h.Write([]byte("rocsync userkernel opencl\x00"))
	writeField(h, []byte(source))
	for _, o := range options {
		writeField(h, []byte(o))
	}
	h.Sum(s.id[:0])
	return s, nil
}

// findInclude reports the first line of source that reads another file
// while it compiles: a directive #include, #include_next, #import or
// #embed, or a __has_include / __has_include_next / __has_embed probe
// (which makes the build depend on what exists on disk). It reads the
// source as the preprocessor does (C11 5.1.1.2 translation phases 1-3,
// clang's lexer): a backslash-newline joins lines, a line ends at "\n",
// "\r\n" or a lone "\r", comments count as one space, any of space, tab,
// form feed and vertical tab may precede the directive's "#" or its
// digraph "%:", and nothing inside string or character literals counts.
func findInclude(source string) (line int, found bool) {
	sc := ppScanner{src: source, line: 1}
	atLineStart := true
	for {
		c, ok := sc.next()
		if !ok {
			return 0, false
		}
		switch {
		case c == '\n':
			atLineStart = true
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
		case c == '/' && sc.peek() == '*':
			sc.next()
			sc.skipBlockComment()
		case c == '/' && sc.peek() == '/':
			sc.skipLineComment()
		case c == '"' || c == '\'':
			sc.skipLiteral(c)
			atLineStart = false
		case atLineStart && (c == '#' || c == '%' && sc.peek() == ':'):
			start := sc.line
			if c == '%' {
				sc.next()
			}
			sc.skipSpaceAndComments()
			switch sc.identifier() {
			case "include", "include_next", "import", "embed":
				return start, true
			}
			atLineStart = false
		case isIdentStart(c):
			switch id := string(c) + sc.identifier(); id {
			case "__has_include", "__has_include_next", "__has_embed":
				return sc.line, true
			}
			atLineStart = false
		default:
			atLineStart = false
		}
	}
}

// ppScanner reads source characters after translation phases 1-2: line
// splices removed, every line end read as '\n', line counting the
// original lines.
type ppScanner struct {
	src  string
	i    int
	line int
}

// raw returns the character at i with line ends as '\n', and its width.
func (s *ppScanner) raw(i int) (byte, int) {
	if i >= len(s.src) {
		return 0, 0
	}
	switch c := s.src[i]; {
	case c == '\r' && i+1 < len(s.src) && s.src[i+1] == '\n':
		return '\n', 2
	case c == '\r':
		return '\n', 1
	default:
		return c, 1
	}
}

// splice skips backslash-newlines at the scanner's position.
func (s *ppScanner) splice() {
	for s.i < len(s.src) && s.src[s.i] == '\\' {
		c, w := s.raw(s.i + 1)
		if w == 0 || c != '\n' {
			return
		}
		s.i += 1 + w
		s.line++
	}
}

func (s *ppScanner) next() (byte, bool) {
	s.splice()
	c, w := s.raw(s.i)
	if w == 0 {
		return 0, false
	}
	s.i += w
	if c == '\n' {
		s.line++
	}
	return c, true
}

func (s *ppScanner) peek() byte {
	s.splice()
	c, _ := s.raw(s.i)
	return c
}

func (s *ppScanner) skipBlockComment() {
	for {
		c, ok := s.next()
		if !ok || c == '*' && s.peek() == '/' {
			s.next()
			return
		}
	}
}

// skipLineComment stops before the line end, which ends the directive.
func (s *ppScanner) skipLineComment() {
	for c := s.peek(); c != '\n' && c != 0; c = s.peek() {
		s.next()
	}
}

// skipLiteral skips a string or character literal opened by quote; an
// unterminated one ends at its line's end.
func (s *ppScanner) skipLiteral(quote byte) {
	for {
		c := s.peek()
		if c == '\n' || c == 0 {
			return
		}
		s.next()
		switch c {
		case '\\':
			if n := s.peek(); n != '\n' && n != 0 {
				s.next()
			}
		case quote:
			return
		}
	}
}

// skipSpaceAndComments skips the blanks and comments between a
// directive's '#' and its name, within the line.
func (s *ppScanner) skipSpaceAndComments() {
	for {
		switch c := s.peek(); {
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
			s.next()
		case c == '/':
			save, line := s.i, s.line
			s.next()
			switch s.peek() {
			case '*':
				s.next()
				s.skipBlockComment()
			default:
				s.i, s.line = save, line
				return
			}
		default:
			return
		}
	}
}

// identifier reads the identifier characters at the scanner's position.
func (s *ppScanner) identifier() string {
	var b strings.Builder
	for c := s.peek(); isIdentStart(c) || c >= '0' && c <= '9'; c = s.peek() {
		b.WriteByte(c)
		s.next()
	}
	return b.String()
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// writeField hashes a length-prefixed field, so that field boundaries are
// part of the hash ("ab","c" and "a","bc" differ).
func writeField(h interface{ Write([]byte) (int, error) }, b []byte) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// pickPrebuilt chooses the image of a CodeObjects or PTX source for a
// device.
func (s *Source) pickPrebuilt(dev Device) (*Image, error) {
	fam, err := dev.family()
	if err != nil {
		return nil, err
	}
	switch {
	case s.kind == sourceCodeObjects && fam == AMD:
		gfx, devFeatures, _ := amdFeatures(dev.ISA)
		var best *Image
		var have []string
		for _, img := range s.objects {
			have = append(have, img.amdTarget+"/"+img.Target.CodeObject.String())
			if img.Target.Arch != gfx || !featuresCompatible(img.features, devFeatures) || !dev.accepts(img.Target.CodeObject) {
				continue
			}
			if best == nil || img.Target.CodeObject > best.Target.CodeObject ||
				(img.Target.CodeObject == best.Target.CodeObject && len(img.features) > len(best.features)) {
				best = img // the newest version; of equals, the one built for the device's exact mode
			}
		}
		if best == nil {
			return nil, fmt.Errorf("%w: no code object loads on %s (the runtime's versions considered); have %s",
				ErrTarget, dev.ISA, strings.Join(have, ", "))
		}
		return best, nil
	case s.kind == sourcePTX && fam == NVIDIA:
		devSM, _ := smVersion(dev.ISA)
		var best *Image
		var have []string
		for _, img := range s.modules {
			have = append(have, img.Target.Arch)
			sm, _ := smVersion(img.Target.Arch)
			if sm <= devSM && (best == nil || sm > best.sm) {
				best = img
			}
		}
		if best == nil {
			return nil, fmt.Errorf("%w: no PTX for %s or older; have %s", ErrTarget, dev.ISA, strings.Join(have, ", "))
		}
		return best, nil
	}
	what := map[sourceKind]string{sourceCodeObjects: "AMD code objects", sourcePTX: "PTX"}[s.kind]
	return nil, fmt.Errorf("%w: the source holds %s; the device %s runs %s code", ErrTarget, what, dev.ISA, fam)
}

// pickCodeObjectVersion chooses the version to compile OpenCL for an AMD
// device with: the rule rocsync's own kernels follow.
func pickCodeObjectVersion(dev Device) (kernels.CodeObjectVersion, error) {
	v, err := kernels.PickCodeObjectVersion(dev.ISA, dev.accepts)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrTarget, err)
	}
	return v, nil
}

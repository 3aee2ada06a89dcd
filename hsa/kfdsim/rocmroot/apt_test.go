package rocmroot

import (
	"reflect"
	"testing"
)

const oneLine = `# comment
deb https://packages.example/apt cloud-sdk-bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main contrib
deb-src http://mirror.example/debian bookworm main
`

const deb822 = `Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 abc
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: https://deb.nodesource.example/node_20.x
Suites: nodistro
Components: main
Enabled: no
`

func TestParseSources(t *testing.T) {
	got := parseOneLineSources(oneLine)
	want := []sourceEntry{
		{Types: []string{"deb"}, URIs: []string{"https://packages.example/apt"}, Suites: []string{"cloud-sdk-bookworm"}, Components: []string{"main"}, Enabled: true},
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"main", "contrib"}, SignedBy: "/usr/share/keyrings/k.gpg", Enabled: true},
		{Types: []string{"deb-src"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"main"}, Enabled: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("one-line sources:\n got %+v\nwant %+v", got, want)
	}
	got = parseDeb822Sources(deb822)
	if len(got) != 3 {
		t.Fatalf("deb822: %d entries: %+v", len(got), got)
	}
	if !reflect.DeepEqual(got[0].Suites, []string{"bookworm", "bookworm-updates"}) || got[0].URIs[0] != "http://mirror.example/debian" ||
		got[0].SignedBy != "/usr/share/keyrings/debian-archive-keyring.gpg" || !got[0].Enabled {
		t.Errorf("deb822 entry 0: %+v", got[0])
	}
	if got[1].SignedBy != "-----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n -----END PGP PUBLIC KEY BLOCK-----" {
		t.Errorf("inline key: %q", got[1].SignedBy)
	}
	if got[2].Enabled {
		t.Error("Enabled: no was read as enabled")
	}
}

// The mirror is the entry of the system's codename, not a security,
// third-party or disabled one.
func TestPickMirror(t *testing.T) {
	entries := append(parseDeb822Sources(deb822), parseOneLineSources(oneLine)...)
	m, ok := pickMirror(entries, "bookworm")
	if !ok || m != (Mirror{URI: "http://mirror.example/debian", SignedBy: "/usr/share/keyrings/debian-archive-keyring.gpg"}) {
		t.Errorf("pickMirror = %+v, %v", m, ok)
	}
	m, ok = pickMirror(parseOneLineSources(oneLine), "")
	if !ok || m.URI != "http://mirror.example/debian" || m.SignedBy != "/usr/share/keyrings/k.gpg" {
		t.Errorf("pickMirror without codename = %+v, %v", m, ok)
	}
	if m, ok := pickMirror(parseDeb822Sources(deb822)[1:], "bookworm"); ok {
		t.Errorf("pickMirror chose %+v among security and disabled entries", m)
	}
}

func TestParseAptOutputs(t *testing.T) {
	mad := parseMadison("     libc6 |     2.43-7 | http://m/debian sid/main amd64 Packages\n" +
		"     libc6 |     2.42-1 | http://m/debian sid/main amd64 Packages\n" +
		"libamdhip64-6 |    6.4.3-5 | http://m/debian sid/main amd64 Packages\n" +
		"     glibc |     2.43-7 | http://m/debian sid/main Sources\n")
	if !reflect.DeepEqual(mad, map[string][]string{"libc6": {"2.43-7", "2.42-1"}, "libamdhip64-6": {"6.4.3-5"}}) {
		t.Errorf("madison: %v", mad)
	}
	for line, want := range map[string][]string{
		"Inst libc6 (2.43-7 Debian:unstable [amd64])":                  {"libc6", "2.43-7", "amd64"},
		"Inst libgcc-s1 (16.2.0-4 Debian:unstable [amd64]) []":         {"libgcc-s1", "16.2.0-4", "amd64"},
		"Inst libllvm21 (1:21.1.8-14 Debian:unstable [amd64])":         {"libllvm21", "1:21.1.8-14", "amd64"},
		"Inst libdrm-common [2.4.1] (2.4.134-3 Debian:unstable [all])": {"libdrm-common", "2.4.134-3", "all"},
	} {
		m := instLine.FindStringSubmatch(line)
		if m == nil || !reflect.DeepEqual(m[1:], want) {
			t.Errorf("%q: %v, want %v", line, m, want)
		}
	}
	idx := parseStanzas("Package: libc6\nVersion: 2.43-7\nDescription: x\n more\nSHA256: ab12\nSize: 42\n\nPackage: zlib1g\nVersion: 1:1.3\nSHA256: cd34\n")
	if idx["libc6=2.43-7"]["SHA256"] != "ab12" || idx["libc6=2.43-7"]["Size"] != "42" || idx["zlib1g=1:1.3"]["SHA256"] != "cd34" {
		t.Errorf("stanzas: %v", idx)
	}
	if got := debFileName(Package{Name: "libllvm21", Version: "1:21.1.8-14", Arch: "amd64"}); got != "libllvm21_1%3a21.1.8-14_amd64.deb" {
		t.Errorf("debFileName: %s", got)
	}
}

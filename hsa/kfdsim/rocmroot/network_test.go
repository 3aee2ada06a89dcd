package rocmroot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// hasWarning reports whether the root's fetch warned about pkg (its pinned
// version was not the one used).
func hasWarning(r *Root, pkg string) bool {
	for _, w := range r.Warnings {
		if strings.Contains(w, " "+pkg+" ") {
			return true
		}
	}
	return false
}

// TestFetchedRootsRunROCm fetches trixie's and sid's roots from Debian's
// archive (or reuses them from DefaultCacheDir) and runs a CGO_ENABLED=0
// purego program inside each that loads the release's ROCr and HIP and
// calls hsa_init, hipRuntimeGetVersion and hipGetDeviceCount. Every
// library must come from the root. With no /dev/kfd, ROCr (6.1.2 and
// 6.4.3) answers hsa_init with HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)
// and HIP counts no device (hipErrorNoDevice, 100). It skips when the
// archive cannot be reached and no root of the pinned packages is cached.
func TestFetchedRootsRunROCm(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches from Debian's archive (-short)")
	}
	prog := probeBinary(t)
	_, kfdErr := os.Stat("/dev/kfd")
	noKFD := errors.Is(kfdErr, os.ErrNotExist)
	for _, tc := range []struct {
		release string
		libs    []string
		hip     string
		// pinned are package version prefixes the release stands for.
		pinned map[string]string
	}{
		{"sid", []string{"libhsa-runtime64.so.1", "libamdhip64.so.6"}, "libamdhip64-6",
			map[string]string{"libhsa-runtime64-1": "6.4.3", "libamdhip64-6": "6.4.3"}},
		{"trixie", []string{"libhsakmt.so.1", "libhsa-runtime64.so.1", "libamdhip64.so.5"}, "libamdhip64-5",
			map[string]string{"libhsa-runtime64-1": "6.1.2", "libhsakmt1": "6.2.4", "libamdhip64-5": "5.7.1"}},
	} {
		t.Run(tc.release, func(t *testing.T) {
			ctx := context.Background()
			r, err := Fetch(ctx, Options{Release: tc.release, Log: func(s string) { t.Log(s) }})
			if errors.Is(err, ErrArchiveUnreachable) {
				t.Skipf("Debian's archive is unreachable and no root of %s's pins is cached: %v", tc.release, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			for pkg, prefix := range tc.pinned {
				v, ok := r.Version(pkg)
				if !ok {
					t.Errorf("%s is not in the root", pkg)
				} else if !strings.HasPrefix(v, prefix) && !hasWarning(r, pkg) {
					t.Errorf("%s %s, pinned %s..., and no WARNING said so", pkg, v, prefix)
				}
			}
			args := []string{"-hsa", "-hip"}
			for _, l := range tc.libs {
				args = append(args, "-lib", l)
			}
			out, err := r.Command(ctx, RunOptions{}, prog, args...).CombinedOutput()
			t.Logf("%s root %s:\n%s", tc.release, r.Dir, out)
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			kv := parseProbe(string(out))
			for _, l := range tc.libs {
				if kv["dlopen "+l] != "ok" {
					t.Errorf("dlopen %s: %s", l, kv["dlopen "+l])
				}
				if p := kv["mapped "+l]; !strings.HasPrefix(p, filepath.Join(r.Dir, "usr/lib/x86_64-linux-gnu")+"/") {
					t.Errorf("%s mapped from %q, not from the root", l, p)
				}
			}
			// HIP_VERSION = major*10^7 + minor*10^5 + patch (hip_version.h).
			var v, e int
			if _, err := fmt.Sscanf(kv["hipRuntimeGetVersion"], "%d version=%d", &e, &v); err != nil || e != 0 {
				t.Fatalf("hipRuntimeGetVersion=%q", kv["hipRuntimeGetVersion"])
			}
			pkgVer, _ := r.Version(tc.hip)
			if got := fmt.Sprintf("%d.%d.", v/10000000, v/100000%100); !strings.HasPrefix(pkgVer, got) {
				t.Errorf("HIP reports version %d (%s), the root's %s is %s", v, got, tc.hip, pkgVer)
			}
			if noKFD {
				// ROCr without /dev/kfd: HSA_STATUS_ERROR_OUT_OF_RESOURCES.
				if kv["hsa_init"] != "0x1008" {
					t.Errorf("hsa_init=%s without /dev/kfd, want 0x1008", kv["hsa_init"])
				}
				if kv["hipGetDeviceCount"] != strconv.Itoa(100)+" count=0" {
					t.Errorf("hipGetDeviceCount=%s without /dev/kfd, want hipErrorNoDevice (100) and 0", kv["hipGetDeviceCount"])
				}
			}
		})
	}
}

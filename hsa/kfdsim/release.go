package kfdsim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
)

// EnvRelease names the ROCm release that simulated-driver children run
// (see SelectedRelease): "5.2.3" (the default), "trixie" or "sid".
const EnvRelease = "ROCSYNC_KFDSIM_ROCM"

// Release is a ROCm user space that children run over the simulated
// driver.
type Release struct {
	// Name is the release: "5.2.3" (Debian bookworm's system libraries),
	// "trixie" (ROCr 6.1.2 over the thunk 6.2.4, HIP 5.7.1) or "sid"
	// (ROCr and HIP 6.4.3, the thunk inside ROCr).
	Name string
	// Root is the release's private root (rocmroot), nil for the host's
	// libraries. A child runs inside it through the root's loader, with the
	// simulated driver as --preload.
	Root *rocmroot.Root
	// KFD is the release the simulated driver's topology and KFD version
	// are for (KFDSIM_ROCM): ROCr 6.1.2's KFD 1.14 for trixie, 6.4.3's
	// 1.16 for sid; "" is the driver's default (5.2).
	KFD string
	// HIPMajor is the soname major of the release's libamdhip64.
	HIPMajor int
}

// The releases by name: the KFD release is the ROCr's (the thunk issues
// the ioctls ROCr's release was built against), the HIP major the
// soname of the release's libamdhip64 package.
var releases = map[string]Release{
	"5.2.3":  {Name: "5.2.3", HIPMajor: 5},
	"trixie": {Name: "trixie", KFD: "6.1", HIPMajor: 5},
	"sid":    {Name: "sid", KFD: "6.4", HIPMajor: 6},
}

// ErrUnknownRelease is matched by errors.Is for a release name that is
// none of 5.2.3, trixie and sid.
var ErrUnknownRelease = errors.New("kfdsim: unknown ROCm release")

// LookupRelease returns the release of that name, fetching its root
// (rocmroot.Fetch: the cached root of the pinned packages, without the
// network, when there is one). "" is 5.2.3.
func LookupRelease(ctx context.Context, name string) (Release, error) {
	if name == "" {
		name = "5.2.3"
	}
	r, ok := releases[name]
	if !ok {
		return Release{}, fmt.Errorf("%w %q (want 5.2.3, trixie or sid)", ErrUnknownRelease, name)
	}
	if name == "5.2.3" {
		return r, nil
	}
	root, err := rocmroot.Fetch(ctx, rocmroot.Options{Release: name})
	if err != nil {
		return Release{}, fmt.Errorf("kfdsim: release %s: %w", name, err)
	}
	r.Root = root
	return r, nil
}

// SelectedRelease is the release named by $ROCSYNC_KFDSIM_ROCM (5.2.3
// when unset). A release whose root cannot be fetched skips t, or fails it
// with ROCSYNC_KFDSIM_REQUIRED=1; an unknown name fails t.
func SelectedRelease(t testing.TB) Release {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := LookupRelease(ctx, os.Getenv(EnvRelease))
	switch {
	case errors.Is(err, ErrUnknownRelease):
		t.Fatalf("%s: %v", EnvRelease, err)
	case err != nil && os.Getenv(EnvRequired) != "1":
		t.Skipf("%v (set %s=1 to make this a failure)", err, EnvRequired)
	case err != nil:
		t.Fatal(err)
	}
	return r
}

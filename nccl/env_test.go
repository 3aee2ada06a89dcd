package nccl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rocsync/rocsync/internal/cmem"
)

// restoreNVLS puts NCCL_NVLS_ENABLE back to "0" in both environments when
// the test ends, whatever it did: the fake refuses anything else, and so
// would every later test.
func restoreNVLS(t *testing.T) {
	t.Cleanup(func() {
		os.Setenv(EnvNVLS, "0")
		if err := cSetenv(EnvNVLS, "0"); err != nil {
			t.Error(err)
		}
	})
}

// os.Setenv and os.Unsetenv reach the C environment, with cgo and without:
// purego's fake runtime/cgo (CGO_ENABLED=0) installs libc's setenv and
// unsetenv as the runtime's hooks, as runtime/cgo does. CI runs this
// package both ways. DisableNVLS does not rely on it (see below).
func TestOsSetenvReachesC(t *testing.T) {
	if err := loadLibcEnv(); err != nil {
		t.Fatal(err)
	}
	const probe = "ROCSYNC_NCCL_SETENV_PROBE"
	t.Setenv(probe, "x1")
	if v, ok := cGetenv(probe); !ok || v != "x1" {
		t.Fatalf("os.Setenv: C sees %q (%v)", v, ok)
	}
	os.Unsetenv(probe)
	if v, ok := cGetenv(probe); ok {
		t.Fatalf("os.Unsetenv: C still sees %q", v)
	}
}

// DisableNVLS sets the variable where C code reads it, from unset, from
// empty, and when only the C environment lacks it (as if os.Setenv did
// not reach libc).
func TestDisableNVLSSetsCEnvironment(t *testing.T) {
	if err := loadLibcEnv(); err != nil {
		t.Fatal(err)
	}
	restoreNVLS(t)
	os.Unsetenv(EnvNVLS)
	if v, ok := cGetenv(EnvNVLS); ok {
		t.Fatalf("os.Unsetenv did not reach C: %q", v)
	}
	if err := DisableNVLS(); err != nil {
		t.Fatal(err)
	}
	if v, ok := cGetenv(EnvNVLS); !ok || v != "0" || os.Getenv(EnvNVLS) != "0" {
		t.Fatalf("after DisableNVLS: C %q (%v), Go %q", v, ok, os.Getenv(EnvNVLS))
	}

	os.Setenv(EnvNVLS, "")
	if err := DisableNVLS(); err != nil {
		t.Fatal(err)
	}
	if v, _ := cGetenv(EnvNVLS); v != "0" {
		t.Fatalf("from empty: C %q", v)
	}

	// Go says 0, C says nothing: only libc's setenv fixes that.
	if err := cSetenv(EnvNVLS, ""); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(EnvNVLS) != "0" {
		t.Fatal("Go's copy changed")
	}
	if err := DisableNVLS(); err != nil {
		t.Fatal(err)
	}
	if v, _ := cGetenv(EnvNVLS); v != "0" {
		t.Fatalf("C environment not repaired: %q", v)
	}
}

func TestOpenRefusesNVLS(t *testing.T) {
	restoreNVLS(t)
	// The path does not exist: the refusal comes before any loading.
	t.Setenv(EnvLibNCCL, "/nonexistent/libnccl.so.2")
	t.Setenv(EnvLibRCCL, "/nonexistent/librccl.so.1")
	for _, v := range []string{"1", "2", "true", " 0"} {
		os.Setenv(EnvNVLS, v)
		for _, open := range []func() (*Lib, error){OpenNCCL, OpenRCCL} {
			_, err := open()
			var ne *NVLSError
			if !errors.Is(err, ErrNVLSEnabled) || !errors.As(err, &ne) || ne.Value != v || ne.Where != "Go environment" ||
				errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "unset NCCL_NVLS_ENABLE or set it to 0") {
				t.Fatalf("NCCL_NVLS_ENABLE=%q: %v", v, err)
			}
		}
		if v, _ := cGetenv(EnvNVLS); v != os.Getenv(EnvNVLS) {
			t.Fatalf("the refusal changed the C environment to %q", v)
		}
	}
	// Set in C only (by C code in the process): refused too.
	os.Setenv(EnvNVLS, "0")
	if err := cSetenv(EnvNVLS, "1"); err != nil {
		t.Fatal(err)
	}
	var ne *NVLSError
	if _, err := OpenNCCL(); !errors.As(err, &ne) || ne.Where != "C environment" {
		t.Fatalf("C environment only: %v", err)
	}
}

// The fake library saw NCCL_NVLS_ENABLE=0 when it was loaded and at every
// communicator init; and its own check fires when the C environment says
// otherwise, so a path around the guard fails every test.
func TestFakeSeesNVLSOff(t *testing.T) {
	l := fakeLib(t)
	if got := fakeString(t, l, "fakenccl_nvls_at_load"); got != "0" {
		t.Fatalf("at load the fake saw NCCL_NVLS_ENABLE=%s", got)
	}
	comms, err := l.CommInitAll([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	destroyAll(t, l, comms)
	if got := fakeString(t, l, "fakenccl_nvls_at_init"); got != "0" {
		t.Fatalf("at init the fake saw %s", got)
	}

	restoreNVLS(t)
	if err := cSetenv(EnvNVLS, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CommInitAll([]int{0}); !errors.Is(err, &Error{Func: "ncclCommInitAll", Result: InvalidUsage}) {
		t.Fatalf("the fake's multicast check did not fire: %v", err)
	}
	if got := fakeString(t, l, "fakenccl_nvls_at_init"); got != "1" {
		t.Fatalf("the fake recorded %s", got)
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"A=1", EnvNVLS + "=", "B=x=y", EnvNVLS + "=0"}
	got, err := ChildEnv(base)
	want := []string{"A=1", "B=x=y", EnvNVLS + "=0"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ChildEnv = %q, %v", got, err)
	}
	if got, _ := ChildEnv(nil); !slices.Equal(got, []string{EnvNVLS + "=0"}) {
		t.Fatalf("from nothing: %q", got)
	}
	if _, err := ChildEnv([]string{"A=1", EnvNVLS + "=1"}); !errors.Is(err, ErrNVLSEnabled) {
		t.Fatalf("=1 accepted: %v", err)
	}
	if base[1] != EnvNVLS+"=" {
		t.Fatal("ChildEnv changed its argument")
	}
}

// The variables a child of TestInitRankTwoProcesses reads.
const (
	envChild     = "ROCSYNC_NCCL_TEST_CHILD_ID"
	envChildRank = "ROCSYNC_NCCL_TEST_CHILD_RANK"
)

type childReport struct {
	NVLSAtLoad, NVLSAtInit string
	Rank, Count, Device    int
	Sum                    []float64
	Gather                 []int32
	Bcast                  []uint8
	Err                    string
}

const (
	xpCount    = 1000
	xpRanks    = 2
	xpTimeout  = 15000
	xpBcastLen = 300
)

// xpRank is what rank r of the two-process test does; both processes run
// it, the child from childMain.
func xpRank(l *Lib, id UniqueID, rank int, rep *childReport) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := l.CommInitRank(xpRanks, id, rank)
	if err != nil {
		return err
	}
	defer l.CommDestroy(c)
	rep.Rank, _ = l.CommUserRank(c)
	rep.Count, _ = l.CommCount(c)
	rep.Device, _ = l.CommCuDevice(c)
	send, recv := cslice[float64](xpCount), cslice[float64](xpCount)
	for i := range send {
		send[i] = float64((rank+1)*i) + 0.25
	}
	if err := l.AllReduce(addr(send), addr(recv), xpCount, Float64, Sum, c, 0); err != nil {
		return err
	}
	rep.Sum = slices.Clone(recv)
	gs, gr := cslice[int32](3), cslice[int32](3*xpRanks)
	for i := range gs {
		gs[i] = int32(100*rank + i)
	}
	if err := l.AllGather(addr(gs), addr(gr), 3, Int32, c, 0); err != nil {
		return err
	}
	rep.Gather = slices.Clone(gr)
	bb := cslice[uint8](xpBcastLen)
	if rank == 1 {
		for i := range bb {
			bb[i] = uint8(i * 7)
		}
	}
	if err := l.Broadcast(addr(bb), addr(bb), xpBcastLen, Uint8, 1, c, 0); err != nil {
		return err
	}
	rep.Bcast = slices.Clone(bb)
	return l.AsyncError(c)
}

// childMain is the second process of TestInitRankTwoProcesses: rank 1,
// reporting on stdout as JSON.
func childMain() int {
	var rep childReport
	err := func() error {
		id, err := ParseUniqueID(os.Getenv(envChild))
		if err != nil {
			return err
		}
		rank, err := strconv.Atoi(os.Getenv(envChildRank))
		if err != nil {
			return err
		}
		l, err := OpenNCCL()
		if err != nil {
			return err
		}
		at, err := fakeSym(l, "fakenccl_nvls_at_load")
		if err != nil {
			return err
		}
		rep.NVLSAtLoad = cmem.GoString(uintptr(at))
		timeout, err := fakeSym(l, "fakenccl_timeout_ms")
		if err != nil {
			return err
		}
		*(*int32)(timeout) = xpTimeout
		err = xpRank(l, id, rank, &rep)
		at, _ = fakeSym(l, "fakenccl_nvls_at_init")
		rep.NVLSAtInit = cmem.GoString(uintptr(at))
		return err
	}()
	if err != nil {
		rep.Err = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(&rep); err != nil {
		return 2
	}
	return 0
}

// Two processes, one rank each, meet through the unique id in text form.
// The child's environment is built without NCCL_NVLS_ENABLE and passed
// through ChildEnv, which must add it: the child's fake reports what it
// saw.
func TestInitRankTwoProcesses(t *testing.T) {
	l := fakeLib(t)
	setFakeTimeout(t, l, xpTimeout)
	t.Setenv("TMPDIR", t.TempDir())
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvNVLS+"=") {
			base = append(base, kv)
		}
	}
	env, err := ChildEnv(append(base, EnvLibNCCL+"="+fake.path, envChild+"="+id.String(), envChildRank+"=1"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, EnvNVLS+"=0") {
		t.Fatal("ChildEnv left NCCL_NVLS_ENABLE out")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mine childReport
	myErr := xpRank(l, id, 0, &mine)
	if myErr != nil {
		cmd.Process.Kill() // it would wait for rank 0 until its timeout
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	if myErr != nil {
		t.Fatalf("rank 0: %v", myErr)
	}
	var theirs childReport
	if err := json.Unmarshal(stdout.Bytes(), &theirs); err != nil {
		t.Fatalf("child output %q: %v", stdout.String(), err)
	}
	if theirs.Err != "" {
		t.Fatalf("rank 1: %s", theirs.Err)
	}
	if theirs.NVLSAtLoad != "0" || theirs.NVLSAtInit != "0" {
		t.Fatalf("the child's NCCL saw NCCL_NVLS_ENABLE=%s at load, %s at init", theirs.NVLSAtLoad, theirs.NVLSAtInit)
	}
	for r, rep := range []childReport{mine, theirs} {
		if rep.Rank != r || rep.Count != xpRanks {
			t.Fatalf("rank %d: reported rank %d of %d", r, rep.Rank, rep.Count)
		}
		for i, v := range rep.Sum {
			if want := float64(i) + 0.25 + float64(2*i) + 0.25; v != want {
				t.Fatalf("rank %d: sum[%d] = %g, want %g", r, i, v, want)
			}
		}
		if fmt.Sprint(rep.Gather) != "[0 1 2 100 101 102]" {
			t.Fatalf("rank %d: gather %v", r, rep.Gather)
		}
		for i, v := range rep.Bcast {
			if v != uint8(i*7) {
				t.Fatalf("rank %d: broadcast[%d] = %d", r, i, v)
			}
		}
		if len(rep.Sum) != xpCount || len(rep.Bcast) != xpBcastLen {
			t.Fatalf("rank %d: lengths %d, %d", r, len(rep.Sum), len(rep.Bcast))
		}
	}
}

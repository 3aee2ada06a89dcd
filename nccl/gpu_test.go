package nccl

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"

	"github.com/rocsync/rocsync/cuda"
)

// gpuSetup opens the real CUDA driver and NCCL, with a primary context and
// a stream on each GPU; it skips unless ROCSYNC_GPU=1 and
// ROCSYNC_BACKEND=cuda.
type gpuRig struct {
	nccl    *Lib
	ctxs    []*cuda.Ctx
	streams []cuda.Stream
}

func gpuSetup(t *testing.T) *gpuRig {
	if os.Getenv("ROCSYNC_GPU") != "1" || os.Getenv("ROCSYNC_BACKEND") != "cuda" {
		t.Skip("set ROCSYNC_GPU=1 ROCSYNC_BACKEND=cuda to run NCCL on NVIDIA GPUs")
	}
	cu, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := cu.Init(); err != nil {
		t.Fatal(err)
	}
	n, err := cu.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	l, err := OpenNCCL()
	if err != nil {
		t.Fatal(err)
	}
	v, err := l.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s from %s, %d GPUs, %s=%s", l.Flavor(), v, l.Path(), n, EnvNVLS, os.Getenv(EnvNVLS))
	rig := &gpuRig{nccl: l}
	for d := range n {
		dev, err := cu.DeviceGet(d)
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := cu.PrimaryCtxRetain(dev)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ctx.StreamCreate(cuda.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		rig.ctxs, rig.streams = append(rig.ctxs, ctx), append(rig.streams, s)
	}
	return rig
}

// upload copies host floats to new device memory on ctx.
func upload(t *testing.T, ctx *cuda.Ctx, host []float32) cuda.DevicePtr {
	t.Helper()
	p, err := ctx.MemAlloc(uint64(4 * len(host)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemcpyHtoD(p, unsafe.Pointer(&host[0]), uint64(4*len(host))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.MemFree(p) })
	return p
}

func download(t *testing.T, ctx *cuda.Ctx, p cuda.DevicePtr, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := ctx.MemcpyDtoH(unsafe.Pointer(&out[0]), p, uint64(4*n)); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCollectives runs all-reduce, all-gather and broadcast over comms
// (rank r on rig device r) from one thread in groups, and checks them.
func checkCollectives(t *testing.T, rig *gpuRig, comms []Comm) {
	l, n := rig.nccl, len(comms)
	const count = 1 << 20
	send, recv, gath := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
	for r := range n {
		host := make([]float32, count)
		for i := range host {
			host[i] = float32(r+1) * float32(i%1000)
		}
		send[r] = upload(t, rig.ctxs[r], host)
		recv[r] = upload(t, rig.ctxs[r], make([]float32, count))
		gath[r] = upload(t, rig.ctxs[r], make([]float32, n*count))
	}
	run := func(f func(r int) error) {
		t.Helper()
		if err := l.GroupStart(); err != nil {
			t.Fatal(err)
		}
		for r := range n {
			if err := f(r); err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if err := l.GroupEnd(); err != nil {
			t.Fatal(err)
		}
		for r := range n {
			if err := rig.ctxs[r].StreamSynchronize(rig.streams[r]); err != nil {
				t.Fatal(err)
			}
			if err := l.AsyncError(comms[r]); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(func(r int) error {
		return l.AllReduce(uintptr(send[r]), uintptr(recv[r]), count, Float32, Sum, comms[r], uintptr(rig.streams[r]))
	})
	tri := float32(n * (n + 1) / 2)
	for r := range n {
		got := download(t, rig.ctxs[r], recv[r], count)
		for i, v := range got {
			if want := tri * float32(i%1000); v != want {
				t.Fatalf("all-reduce: rank %d element %d = %g, want %g", r, i, v, want)
			}
		}
	}
	run(func(r int) error {
		return l.AllGather(uintptr(send[r]), uintptr(gath[r]), count, Float32, comms[r], uintptr(rig.streams[r]))
	})
	for r := range n {
		got := download(t, rig.ctxs[r], gath[r], n*count)
		for i, v := range got {
			if want := float32(i/count+1) * float32(i%count%1000); v != want {
				t.Fatalf("all-gather: rank %d element %d = %g, want %g", r, i, v, want)
			}
		}
	}
	root := n - 1
	run(func(r int) error {
		return l.Broadcast(uintptr(send[r]), uintptr(recv[r]), count, Float32, root, comms[r], uintptr(rig.streams[r]))
	})
	for r := range n {
		got := download(t, rig.ctxs[r], recv[r], count)
		for i, v := range got {
			if want := float32(root+1) * float32(i%1000); v != want {
				t.Fatalf("broadcast: rank %d element %d = %g, want %g", r, i, v, want)
			}
		}
	}
}

func TestGPUInitAll(t *testing.T) {
	rig := gpuSetup(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	devices := make([]int, len(rig.ctxs))
	for i := range devices {
		devices[i] = i
	}
	comms, err := rig.nccl.CommInitAll(devices)
	if err != nil {
		t.Fatal(err)
	}
	defer destroyAll(t, rig.nccl, comms)
	for r, c := range comms {
		dev, err1 := rig.nccl.CommCuDevice(c)
		rank, err2 := rig.nccl.CommUserRank(c)
		cnt, err3 := rig.nccl.CommCount(c)
		if err := errors.Join(err1, err2, err3); err != nil || dev != r || rank != r || cnt != len(comms) {
			t.Fatalf("comm %d: device %d rank %d count %d, %v", r, dev, rank, cnt, err)
		}
	}
	checkCollectives(t, rig, comms)
	var bad UniqueID
	if _, err := rig.nccl.CommInitRank(2, bad, 5); !errors.Is(err, &Error{Result: InvalidArgument}) {
		t.Fatalf("rank 5 of 2: %v", err)
	}
}

// ncclCommInitRank from one thread: every rank in one group, each made on
// the device whose context is current when its call is made.
func TestGPUInitRankGroup(t *testing.T) {
	rig := gpuSetup(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l := rig.nccl
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	text, _ := id.MarshalText()
	back, err := ParseUniqueID(string(text))
	if err != nil || back != id {
		t.Fatal("id text round trip")
	}
	n := len(rig.ctxs)
	comms := make([]Comm, n)
	if err := l.GroupStart(); err != nil {
		t.Fatal(err)
	}
	for r := range n {
		if err := rig.ctxs[r].MakeCurrent(); err != nil {
			t.Fatal(err)
		}
		if comms[r], err = l.CommInitRank(n, back, r); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := l.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	defer destroyAll(t, l, comms)
	for r, c := range comms {
		dev, _ := l.CommCuDevice(c)
		rank, _ := l.CommUserRank(c)
		if dev != r || rank != r {
			t.Fatalf("comm %d: device %d rank %d", r, dev, rank)
		}
	}
	checkCollectives(t, rig, comms)
}

// The variable that makes a child of TestGPUInitRankTwoProcesses use its
// GPU instead of the fake.
const envChildGPU = "ROCSYNC_NCCL_TEST_CHILD_GPU"

// gpuXPRank is rank `rank` of a communicator over processes, on GPU
// `rank`: all-reduce (sum) of 1 Mi floats, checked on the host. It
// returns the number of wrong elements.
func gpuXPRank(l *Lib, id UniqueID, nranks, rank int) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cu, err := cuda.Open()
	if err != nil {
		return 0, err
	}
	if err := cu.Init(); err != nil {
		return 0, err
	}
	dev, err := cu.DeviceGet(rank)
	if err != nil {
		return 0, err
	}
	ctx, err := cu.PrimaryCtxRetain(dev)
	if err != nil {
		return 0, err
	}
	if err := ctx.MakeCurrent(); err != nil {
		return 0, err
	}
	s, err := ctx.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return 0, err
	}
	c, err := l.CommInitRank(nranks, id, rank)
	if err != nil {
		return 0, err
	}
	defer l.CommDestroy(c)
	if d, err := l.CommCuDevice(c); err != nil || d != rank {
		return 0, errors.Join(err, errors.New("communicator on the wrong device"))
	}
	const count = 1 << 20
	host := make([]float32, count)
	for i := range host {
		host[i] = float32(rank+1) * float32(i%1000)
	}
	p, err := ctx.MemAlloc(4 * count)
	if err != nil {
		return 0, err
	}
	defer ctx.MemFree(p)
	if err := ctx.MemcpyHtoD(p, unsafe.Pointer(&host[0]), 4*count); err != nil {
		return 0, err
	}
	if err := l.AllReduce(uintptr(p), uintptr(p), count, Float32, Sum, c, uintptr(s)); err != nil {
		return 0, err
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		return 0, err
	}
	if err := l.AsyncError(c); err != nil {
		return 0, err
	}
	if err := ctx.MemcpyDtoH(unsafe.Pointer(&host[0]), p, 4*count); err != nil {
		return 0, err
	}
	tri := float32(nranks * (nranks + 1) / 2)
	wrong := 0
	for i, v := range host {
		if v != tri*float32(i%1000) {
			wrong++
		}
	}
	return wrong, nil
}

// Two processes with one GPU each meet through the unique id in text
// form (the "2 processes with one GPU each" run). The child's
// environment goes through ChildEnv.
func TestGPUInitRankTwoProcesses(t *testing.T) {
	rig := gpuSetup(t)
	if len(rig.ctxs) < 2 {
		t.Skip("needs 2 GPUs")
	}
	l := rig.nccl
	id, err := l.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	env, err := ChildEnv(append(os.Environ(), envChild+"="+id.String(), envChildRank+"=1", envChildGPU+"=1"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wrong, myErr := gpuXPRank(l, id, 2, 0)
	if myErr != nil {
		cmd.Process.Kill() // it would wait for rank 0 for ever
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if myErr != nil || wrong != 0 {
		t.Fatalf("rank 0: %d wrong, %v", wrong, myErr)
	}
	var theirs childReport
	if err := json.Unmarshal(stdout.Bytes(), &theirs); err != nil || theirs.Err != "" || theirs.Count != 0 {
		t.Fatalf("rank 1: %q, %v", stdout.String(), err)
	}
}

// childGPUMain is rank 1 of TestGPUInitRankTwoProcesses; Count is the
// number of wrong elements.
func childGPUMain() int {
	var rep childReport
	err := func() error {
		id, err := ParseUniqueID(os.Getenv(envChild))
		if err != nil {
			return err
		}
		l, err := OpenNCCL()
		if err != nil {
			return err
		}
		rep.Count, err = gpuXPRank(l, id, 2, 1)
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

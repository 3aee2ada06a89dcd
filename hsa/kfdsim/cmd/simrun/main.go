// Command simrun runs any program over the simulated AMD kernel driver
// (package kfdsim) with a chosen ROCm release and simulated GPUs, building
// the driver and fetching the release's libraries as needed:
//
//	go run ./hsa/kfdsim/cmd/simrun -rocm 6.4.3 -gpus gfx90a -- PROGRAM ARGS...
//
// -rocm is 5.2.3 (Debian bookworm's ROCm, the host's libraries: install
// libhsa-runtime64-1 and libamdhip64-5), 6.1.2 (trixie: ROCr 6.1.2, HIP
// 5.7.1) or 6.4.3 (sid: ROCr and HIP 6.4.3); the last two run inside a
// private root unpacked from Debian's archive (package rocmroot: about 40 s
// and 60 MB the first time, cached after that), PROGRAM through the root's
// loader, so that it and every library it loads come from the root.
// -gpus is the GPU spec (the package comment of kfdsim: for example
// "gfx90a,gfx1030", "gfx942/cpx", "gfx90a@0000:83:00.0"). -sdma copies with
// the simulated SDMA engines instead of ROCr's blit kernels. -debug traces
// every ioctl, queue packet and fault to standard error (KFDSIM_DEBUG=1).
// -simblas gives the program simblas as rocBLAS (ROCM_PATH): a rocBLAS
// whose gemm is a kernel the simulated GPU runs.
//
// The simulated GPU runs ROCr's and HIP's own kernels (blits, fills, stream
// memory operations) by name; any other kernel faults its queue, as an
// unknown instruction stream would, unless the program is Go and registers
// an executor (kfdsim.RegisterExecutor). simrun exits with PROGRAM's exit
// status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/rocsync/rocsync/hsa/kfdsim"
	"github.com/rocsync/rocsync/rocblas/simblas"
)

func main() {
	rocm := flag.String("rocm", "5.2.3", "ROCm release: 5.2.3 (bookworm), 6.1.2 (trixie) or 6.4.3 (sid)")
	gpus := flag.String("gpus", "gfx90a", "simulated GPUs (the GPU spec of package kfdsim)")
	sdma := flag.Bool("sdma", false, "copy with the simulated SDMA engines (HSA_ENABLE_SDMA=1)")
	debug := flag.Bool("debug", false, "trace every ioctl, queue packet and fault to standard error")
	blas := flag.Bool("simblas", false, "give the program simblas as rocBLAS (ROCM_PATH; needs clang and lld)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: simrun [-rocm 5.2.3|6.1.2|6.4.3] [-gpus SPEC] [-sdma] [-debug] [-simblas] -- PROGRAM [ARGS...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	name, err := kfdsim.ReleaseName(*rocm)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	rel, err := kfdsim.LookupRelease(ctx, name)
	if err != nil {
		fail(err)
	}
	o := kfdsim.ProgramOptions{GPUs: *gpus, SDMA: *sdma}
	if *debug {
		o.Env = append(o.Env, "KFDSIM_DEBUG=1")
	}
	if *blas {
		root, err := simblas.BuildFor("", rel.HIPMajor)
		if err != nil {
			fail(err)
		}
		o.Env = append(o.Env, "ROCM_PATH="+root)
	}
	cmd, err := kfdsim.ProgramCommand(ctx, rel, o, flag.Arg(0), flag.Args()[1:]...)
	if err != nil {
		fail(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The program gets the terminal's signals itself; simrun waits for it.
	// A signal sent to simrun alone (kill, a CI runner's timeout) is passed
	// on, so that the program does not run on without a parent.
	signal.Ignore(os.Interrupt)
	forward := make(chan os.Signal, 1)
	signal.Notify(forward, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if err = cmd.Start(); err == nil {
		go func() {
			for sig := range forward {
				_ = cmd.Process.Signal(sig)
			}
		}()
		err = cmd.Wait()
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if code := exit.ExitCode(); code >= 0 {
			os.Exit(code)
		}
		fmt.Fprintln(os.Stderr, "simrun:", err)
		os.Exit(1)
	case err != nil:
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "simrun:", err)
	os.Exit(1)
}

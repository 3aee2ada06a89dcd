// Command rocmprobe loads a ROCm release's runtime libraries and makes the
// first calls of an HSA and a HIP program, printing what happened, one
// "key=value" line each. It is built with CGO_ENABLED=0 (purego) so that the
// same binary runs on the host's libraries or inside a private root
// (rocmroot.Root.Command), where the root's loader resolves every library.
//
//	rocmprobe -lib libhsa-runtime64.so.1 -lib libamdhip64.so.6 -hsa -hip
//
// Lines:
//
//	dlopen <soname>=ok | error: ...
//	mapped <soname>=<path the loader mapped it from, read from /proc/self/maps>
//	hsa_init=0x<status>
//	hipGetDeviceCount=<hipError_t> count=<n>
//	hipRuntimeGetVersion=<hipError_t> version=<n>
//	hsa ... / hip ...  (-ops: each step of hsaOps and hipOps, ops.go)
//
// For checking how it was started (-self, -mapped, -host, -reexec):
//
//	exe=<the /proc/self/exe link: the loader inside a root>
//	program=<rocmroot.Executable(): the program itself>
//	argv0=<os.Args[0]>
//	env LD_LIBRARY_PATH=<value or unset>, env LD_PRELOAD=<...>
//	mapped <name>=<path>
//	host <tool>=ok | error: ...
//	child <line>  (each line of the same probe started by rocmroot.SelfCommand with -self)
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/hsa/kfdsim/rocmroot"
	"github.com/rocsync/rocsync/internal/dl"
)

type libs []string

func (l *libs) String() string     { return strings.Join(*l, ",") }
func (l *libs) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var load libs
	flag.Var(&load, "lib", "a library to dlopen (repeatable), by soname or path")
	doHSA := flag.Bool("hsa", false, "call hsa_init (and hsa_shut_down when it succeeds) from libhsa-runtime64.so.1")
	doHIP := flag.Bool("hip", false, "call hipRuntimeGetVersion and hipGetDeviceCount from the libamdhip64 given by -lib")
	self := flag.Bool("self", false, "print how this process was started")
	var mapped, host libs
	flag.Var(&mapped, "mapped", "print where a library (by file name prefix) is mapped from (repeatable)")
	flag.Var(&host, "host", "run a host tool through rocmroot.HostCommand (repeatable)")
	ops := flag.Bool("ops", false, "make the first calls of an HSA and a HIP program through rocsync's bindings (queue, barrier packet, signal wait; hipMalloc, hipMemcpy, a stream) and exit 1 if one fails")
	reexec := flag.Bool("reexec", false, "start this probe again through rocmroot.SelfCommand with -self and the -mapped flags")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rocmprobe: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	failed := false

	if *self {
		exe, _ := os.Readlink("/proc/self/exe")
		prog, err := rocmroot.Executable()
		if err != nil {
			prog = "error: " + err.Error()
		}
		fmt.Printf("exe=%s\nprogram=%s\nargv0=%s\n", exe, prog, os.Args[0])
		for _, k := range []string{"LD_LIBRARY_PATH", "LD_PRELOAD"} {
			v, ok := os.LookupEnv(k)
			if !ok {
				v = "unset"
			}
			fmt.Printf("env %s=%s\n", k, v)
		}
	}
	for _, name := range mapped {
		fmt.Printf("mapped %s=%s\n", name, mappedFrom(name))
	}
	for _, tool := range host {
		if out, err := rocmroot.HostCommand(context.Background(), tool).CombinedOutput(); err != nil {
			fmt.Printf("host %s=error: %v %q\n", tool, err, out)
			failed = true
		} else {
			fmt.Printf("host %s=ok\n", tool)
		}
	}
	if *reexec {
		args := []string{"-self"}
		for _, m := range mapped {
			args = append(args, "-mapped", m)
		}
		cmd, err := rocmroot.SelfCommand(context.Background(), args...)
		if err != nil {
			fmt.Printf("child error: %v\n", err)
			os.Exit(1)
		}
		out, err := cmd.CombinedOutput()
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fmt.Printf("child %s\n", l)
		}
		if err != nil {
			fmt.Printf("child error: %v\n", err)
			os.Exit(1)
		}
	}

	handles := map[string]uintptr{}
	for _, name := range load {
		h, err := dl.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			fmt.Printf("dlopen %s=error: %v\n", name, err)
			failed = true
			continue
		}
		fmt.Printf("dlopen %s=ok\n", name)
		handles[name] = h
	}
	for _, name := range load {
		if _, ok := handles[name]; ok {
			fmt.Printf("mapped %s=%s\n", name, mappedFrom(filepath.Base(name)))
		}
	}
	if *doHSA {
		h, ok := handleWith(handles, "libhsa-runtime64")
		if !ok {
			fmt.Println("hsa_init=error: libhsa-runtime64 not loaded")
			os.Exit(1)
		}
		requireSymbols(h, "libhsa-runtime64", "hsa_init", "hsa_shut_down")
		var hsaInit, hsaShutDown func() uint32
		purego.RegisterLibFunc(&hsaInit, h, "hsa_init")
		purego.RegisterLibFunc(&hsaShutDown, h, "hsa_shut_down")
		st := hsaInit()
		fmt.Printf("hsa_init=0x%x\n", st)
		if st == 0 {
			fmt.Printf("hsa_shut_down=0x%x\n", hsaShutDown())
		}
	}
	if *doHIP {
		h, ok := handleWith(handles, "libamdhip64")
		if !ok {
			fmt.Println("hipGetDeviceCount=error: libamdhip64 not loaded")
			os.Exit(1)
		}
		requireSymbols(h, "libamdhip64", "hipRuntimeGetVersion", "hipGetDeviceCount")
		var getVersion, getCount func(*int32) uint32
		purego.RegisterLibFunc(&getVersion, h, "hipRuntimeGetVersion")
		purego.RegisterLibFunc(&getCount, h, "hipGetDeviceCount")
		var v, n int32
		e := getVersion(&v)
		fmt.Printf("hipRuntimeGetVersion=%d version=%d\n", e, v)
		e = getCount(&n)
		fmt.Printf("hipGetDeviceCount=%d count=%d\n", e, n)
	}
	if *ops {
		if !hsaOps() {
			failed = true
		}
		if !hipOps() {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func handleWith(handles map[string]uintptr, prefix string) (uintptr, bool) {
	for name, h := range handles {
		if strings.HasPrefix(filepath.Base(name), prefix) {
			return h, true
		}
	}
	return 0, false
}

// mappedFrom returns the path of the first mapping in /proc/self/maps whose
// file name starts with soname (the loader maps the file the soname's
// symlink resolves to), or "" when none does.
func mappedFrom(soname string) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 6 {
			continue
		}
		p := strings.Join(fields[5:], " ")
		if strings.HasPrefix(filepath.Base(p), soname) {
			return p
		}
	}
	return ""
}

// requireSymbols exits 1, saying which, where a loaded library lacks a
// symbol the probe calls: purego.RegisterLibFunc panics on one.
func requireSymbols(h uintptr, lib string, syms ...string) {
	for _, sym := range syms {
		if _, err := dl.Dlsym(h, sym); err != nil {
			fmt.Printf("%s=error: %s lacks it: %v\n", sym, lib, err)
			os.Exit(1)
		}
	}
}

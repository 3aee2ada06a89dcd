package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// runMeta is what the JSON records about the run besides its results: the
// machine (no host or user names), the build, when it ran, the device and
// the settings.
type runMeta struct {
	Time       string      `json:"time"` // RFC 3339, UTC, when the run started
	Machine    machineInfo `json:"machine"`
	GoVersion  string      `json:"go_version"`
	Commit     string      `json:"commit"`
	Modified   bool        `json:"commit_modified"` // the work tree had changes
	CommitFrom string      `json:"commit_source"`   // "build info" or "git"
	Backend    string      `json:"backend"`
	Device     string      `json:"device"`         // Device.Name
	Driver     string      `json:"driver_version"` // Device.DriverVersion
	Target     string      `json:"target"`         // the GPU's code target
	Settings   settings    `json:"settings"`
}

type machineInfo struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPU        string `json:"cpu_model"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	// The 1-minute load averages before and after the run (Linux; "" elsewhere):
	// other processes' load shows in the emulator's times (docs/benchmarks.md).
	LoadBefore string `json:"load_average_before,omitempty"`
	LoadAfter  string `json:"load_average_after,omitempty"`
}

// settings are the command line's choices.
type settings struct {
	N             int      `json:"n"`
	Iterations    int      `json:"iterations"`
	Warmup        int      `json:"warmup"`
	Repeat        int      `json:"repeat"`
	MLP           string   `json:"mlp"`
	Seed          uint64   `json:"seed"`
	EmuMaxDelayUS float64  `json:"emulator_max_delay_us"`
	Interleave    bool     `json:"interleave"`
	Programs      []string `json:"programs"`
	Policies      []string `json:"policies"`
	GOGC          string   `json:"gogc,omitempty"`
}

// output is what -json prints and -json-file writes.
type output struct {
	Meta    runMeta  `json:"meta"`
	Results []result `json:"results"`
	// DataParallel holds the dp-mlp runs (-programs dp-mlp).
	DataParallel []dpResult `json:"data_parallel,omitempty"`
}

func newRunMeta(cfg config, start time.Time) runMeta {
	m := runMeta{
		Time: start.UTC().Format(time.RFC3339),
		Machine: machineInfo{OS: runtime.GOOS, Arch: runtime.GOARCH, CPU: cpuModel(), CPUs: runtime.NumCPU(),
			GOMAXPROCS: runtime.GOMAXPROCS(0), LoadBefore: loadAverage()},
		GoVersion: runtime.Version(),
		Settings: settings{N: cfg.n, Iterations: cfg.iters, Warmup: cfg.warmup, Repeat: cfg.repeat, MLP: cfg.mlp.String(),
			Seed: cfg.seed, EmuMaxDelayUS: float64(cfg.emuDelay.Nanoseconds()) / 1e3, Interleave: cfg.interleave,
			Programs: cfg.programs, GOGC: os.Getenv("GOGC")},
	}
	for _, p := range cfg.policies {
		m.Settings.Policies = append(m.Settings.Policies, p.String())
	}
	m.Commit, m.Modified, m.CommitFrom = commit()
	return m
}

// loadAverage is the 1-minute load average of /proc/loadavg ("" elsewhere).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// cpuModel is the first "model name" of /proc/cpuinfo (Linux; "" elsewhere).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// commit is the revision the binary was built from: the build info's
// vcs.revision when go build stamped it (a binary built with go build in a
// clone), else git's HEAD in the current directory (go run does not stamp
// the revision).
func commit() (rev string, modified bool, source string) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			return rev, modified, "build info"
		}
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false, ""
	}
	rev = strings.TrimSpace(string(out))
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	return rev, err == nil && len(strings.TrimSpace(string(st))) > 0, "git"
}

// Package maintest runs a command's main function in a child process of
// its test binary, so that a test sees main's exit status and output as a
// user does: the test's TestMain is Main(m, main), and a test calls Run
// with the command line.
package maintest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
)

const envArgs = "ROCSYNC_MAINTEST_ARGS"

// Main is a command's TestMain: the child's main, or the tests.
func Main(m *testing.M, main func()) {
	Child(main)
	os.Exit(m.Run())
}

// Child runs main with the command line Run passed, and exits 0 if main
// returns; it does nothing in the test binary's own process.
func Child(main func()) {
	argsJSON, ok := os.LookupEnv(envArgs)
	if !ok {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(argsJSON), &args); err != nil {
		panic(err)
	}
	os.Args = append([]string{os.Args[0]}, args...)
	main()
	os.Exit(0)
}

// Run runs the command with args in a child process, started by start
// (nil: run it to the end), and returns its exit status and its output
// (standard output, then standard error).
func Run(t *testing.T, args []string, start func(*exec.Cmd) error) (code int, out string) {
	t.Helper()
	argsJSON, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envArgs+"="+string(argsJSON))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if start != nil {
		err = start(cmd)
	} else {
		err = cmd.Run()
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, stdout.String() + stderr.String()
}

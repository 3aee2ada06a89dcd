package main

import (
	"bufio"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rocsync/rocsync/internal/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A SIGTERM sent to simrun alone reaches the program it runs, and simrun
// waits for it: the program used to run on without a parent. The program
// prints its pid and sleeps; once simrun has exited, that pid is gone.
func TestTermReachesTheProgram(t *testing.T) {
	var pid int
	code, out := maintest.Run(t, []string{"--", "sh", "-c", "echo $$; exec sleep 60"}, func(cmd *exec.Cmd) error {
		cmd.Stdout = nil
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			// simrun could not start the program here (no simulated
			// driver): its error is the test's skip reason below.
			return cmd.Wait()
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
			return err
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		return cmd.Wait()
	})
	if pid == 0 {
		t.Skipf("simrun did not start the program here (exit %d): %s", code, out)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the program (pid %d) outlived simrun's SIGTERM: kill(pid, 0) = %v", pid, err)
	}
}

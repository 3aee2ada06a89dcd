package emu

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
)

// handleFaults registers a system event handler that handles every memory
// fault and hands it over on the returned channel.
func handleFaults(t *testing.T, h *HSA) <-chan hsa.MemoryFault {
	t.Helper()
	ch := make(chan hsa.MemoryFault, 8)
	cancel, err := h.RegisterSystemEventHandler(func(ev hsa.SystemEvent) bool {
		if ev.Type != hsa.EventGPUMemoryFault {
			return false
		}
		ch <- ev.MemoryFault
		return true
	})
	require.NoError(t, err)
	t.Cleanup(cancel)
	return ch
}

func nextFault(t *testing.T, ch <-chan hsa.MemoryFault) hsa.MemoryFault {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no GPU memory fault event")
		return hsa.MemoryFault{}
	}
}

// Handlers run in registration order and the fault counts as handled when
// any of them handles it; cancel and the last hsa_shut_down remove them;
// registering needs an initialised runtime, as in ROCr.
func TestSystemEventHandlers(t *testing.T) {
	m := New(Options{Devices: 2})
	h := m.HSA()
	_, err := h.RegisterSystemEventHandler(func(hsa.SystemEvent) bool { return true })
	require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorNotInitialized})
	require.NoError(t, h.Init())
	_, err = h.RegisterSystemEventHandler(nil)
	require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorInvalidArgument})

	calls := make(chan string, 8)
	cancelDecline, err := h.RegisterSystemEventHandler(func(ev hsa.SystemEvent) bool { calls <- "decline"; return false })
	require.NoError(t, err)
	faults := handleFaults(t, h)
	require.Equal(t, 2, h.SystemEventHandlers())

	buf, err := m.HIP().Malloc(0, 64)
	require.NoError(t, err)
	_, err = m.gpuSpan(1, uint64(buf)+8, 4, false, nil)
	require.ErrorIs(t, err, ErrNoAccess)
	require.Equal(t, hsa.MemoryFault{Agent: gpuAgent(1), Address: uint64(buf) + 8, Reason: hsa.MemoryFaultPageNotPresent}, nextFault(t, faults))
	require.Equal(t, "decline", <-calls, "every handler is called, in order")

	cancelDecline()
	cancelDecline() // idempotent
	require.Equal(t, 1, h.SystemEventHandlers())
	require.NoError(t, h.Init())
	require.NoError(t, h.ShutDown())
	require.Equal(t, 1, h.SystemEventHandlers(), "the runtime is still referenced")
	require.NoError(t, h.ShutDown())
	require.Zero(t, h.SystemEventHandlers(), "released with the runtime")
}

const abortChildEnv = "ROCSYNC_EMU_ABORT_CHILD"

// A VM fault that no system event handler handles ends the process, as
// ROCr 5.2.3's VMFaultHandler does (print, abort): the emulator is as
// strict as the runtime, so code that forgets the handler dies here too.
// The child process dispatches a kernel whose kernargs its GPU may not
// read, with only a queue error callback.
func TestUnhandledVMFaultAborts(t *testing.T) {
	if os.Getenv(abortChildEnv) == "1" {
		r := newRig(t, Options{})
		karg, err := r.h.MemoryPoolAllocate(kernargPool, 64*64)
		require.NoError(t, err)
		r.karg = karg // not allowed to gpu0
		buf, err := r.m.HIP().Malloc(0, 4)
		require.NoError(t, err)
		r.submit(t, kernels.Fill.String(), true, kernels.Args{Out: uint64(buf), N: 1, Alpha: 1})
		time.Sleep(5 * time.Second)
		t.Fatal("the process survived an unhandled VM fault")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnhandledVMFaultAborts$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), abortChildEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "child: %v\n%s", err, out.String())
	require.Equal(t, 134, ee.ExitCode(), out.String())
	require.Contains(t, out.String(), "Memory access fault by GPU node-1")
	require.NotContains(t, out.String(), "survived")
}

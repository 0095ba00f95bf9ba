package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitExited blocks until child pid has exited, leaving it waitable.
func waitExited(t *testing.T, pid int) {
	t.Helper()
	for {
		_, err := peekChild(unix.P_PID, pid, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("waiting for %d to exit: %v", pid, err)
		}
		return
	}
}

// waitable says whether child pid is still there to be waited for.
func waitable(pid int) bool {
	_, err := peekChild(unix.P_PID, pid, unix.WNOHANG)
	return err == nil
}

// TestReapLeavesCommandsTheirStatus: a pass of the reaper reaps an exited
// child no command owns and never one a command registered, whichever of
// the two exited first in the kernel's list of children; an orphan behind
// a command's child is reaped once that command is unregistered. Red when
// the pass takes registered children (the command's Wait then fails) or
// reaps nothing.
func TestReapLeavesCommandsTheirStatus(t *testing.T) {
	for _, orphanFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("orphan started first %v", orphanFirst), func(t *testing.T) {
			orphan := exec.Command("sh", "-c", "exit 0")
			cmd := exec.Command("sh", "-c", "exit 5")
			startOrphan := func() {
				if err := orphan.Start(); err != nil {
					t.Fatal(err)
				}
			}
			if orphanFirst {
				startOrphan()
			}
			if err := register(cmd.Start, func() int { return cmd.Process.Pid }); err != nil {
				t.Fatal(err)
			}
			if !orphanFirst {
				startOrphan()
			}
			waitExited(t, cmd.Process.Pid)
			waitExited(t, orphan.Process.Pid)

			children.Lock()
			reapLocked()
			children.Unlock()
			if !waitable(cmd.Process.Pid) {
				t.Fatal("the pass reaped a command's process")
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 5 {
				t.Fatalf("the command's status: %v", err)
			}
			unregister(cmd.Process.Pid)
			if waitable(orphan.Process.Pid) {
				t.Fatal("the orphan was not reaped")
			}
		})
	}
}

// reaperChildEnv marks the process TestReaperUnderLoad starts to play
// the sandbox's first process.
const reaperChildEnv = "RARECLOUD_AGENT_TEST_REAPER_CHILD"

// TestReaperUnderLoad: the agent as a sandbox's first process (here a
// child subreaper, so orphans come to it), with the SIGCHLD reaper on,
// runs commands eight at a time whose background processes outlive
// them. Every command answers its own exit status, and once the
// background processes end no child is left, zombie or not. Red without
// the reaper (zombies stay) and when it reaps registered children (a
// command's Wait fails).
func TestReaperUnderLoad(t *testing.T) {
	if os.Getenv(reaperChildEnv) == "1" {
		reaperUnderLoad(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaperUnderLoad$", "-test.v")
	cmd.Env = append(os.Environ(), reaperChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func reaperUnderLoad(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	Reap()
	const n, atOnce = 48, 8
	errs := make(chan error, n)
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			res := run(t.Context(), Request{ID: uint64(i), Argv: []string{"sh", "-c", "(sleep 0.05 &); (true &); exit 7"}})
			if res.Error != "" || res.ExitCode == nil || *res.ExitCode != 7 {
				errs <- fmt.Errorf("command %d answered %+v", i, res)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The background processes end 50 ms after their commands; their
	// zombies go as they do.
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := peekChild(unix.P_ALL, 0, unix.WNOHANG)
		if errors.Is(err, syscall.ECHILD) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("children left 20 s after the last command (an exited one: pid %d)", info.Pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

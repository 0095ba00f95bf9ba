package agent

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The agent is the sandbox's first process, so orphans (a `sleep &` left
// behind by a command) become its children. It reaps those; its own
// commands' processes are reaped by exec.Cmd.Wait, and the reaper must not
// steal their exit status. children holds their pids; starting a command
// and scanning for zombies take the same lock, so a command cannot exit
// between its start and its registration unseen.
var children = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

func register(start func() error, pid func() int) error {
	children.Lock()
	defer children.Unlock()
	if err := start(); err != nil {
		return err
	}
	children.pids[pid()] = true
	return nil
}

func unregister(pid int) {
	children.Lock()
	defer children.Unlock()
	delete(children.pids, pid)
}

// Reap waits for orphaned zombies whenever a child changes state. Only the
// first process of a sandbox needs it.
func Reap() {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			reapOrphans()
		}
	}()
}

func reapOrphans() {
	children.Lock()
	defer children.Unlock()
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || children.pids[pid] {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] != "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
}

package agent

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The agent is the sandbox's first process, so orphans (a `sleep &` left
// behind by a command) become its children. It reaps those; its own
// commands' processes are reaped by exec.Cmd.Wait, and the reaper must not
// steal their exit status. children holds their pids; starting a command
// and a pass of the reaper take the same lock, so a command cannot exit
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
	// An orphan that exited while this command's process waited to be
	// reaped is behind it in the kernel's list (reapLocked).
	reapLocked()
}

// Reap waits for orphaned zombies whenever a child changes state. Only the
// first process of a sandbox needs it.
func Reap() {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			children.Lock()
			reapLocked()
			children.Unlock()
		}
	}()
}

// reapLocked reaps the exited children that are not commands', with the
// children lock held. waitid with WNOWAIT names an exited child and
// leaves it waitable: an unregistered one is an orphan and is reaped by
// its pid; a registered one is a command's, left to exec.Cmd.Wait, and
// the pass ends there, since the kernel names that child until it is
// reaped (unregister then looks again). Each pass costs a system call or
// two, not a walk of /proc: it runs after every command.
func reapLocked() {
	for {
		pid, err := exitedChild()
		if err != nil || pid <= 0 || children.pids[pid] {
			return
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != nil {
			return
		}
	}
}

// childInfo is the siginfo_t waitid fills for a child (128 bytes, the
// child's pid at offset 16).
type childInfo struct {
	Signo, Errno, Code int32
	_                  int32
	Pid                int32
	_                  [108]byte
}

// exitedChild is the pid of a child that has exited and not been reaped,
// without reaping it, or 0 when there is none.
func exitedChild() (int, error) {
	info, err := peekChild(unix.P_ALL, 0, unix.WNOHANG)
	if err != nil {
		return 0, err
	}
	return int(info.Pid), nil
}

// peekChild is waitid(idType, id) for an exit, with options added, that
// leaves the child waitable (WNOWAIT).
func peekChild(idType, id, options int) (childInfo, error) {
	var info childInfo
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, uintptr(idType), uintptr(id), uintptr(unsafe.Pointer(&info)), uintptr(unix.WEXITED|unix.WNOWAIT|options), 0, 0)
	if errno != 0 {
		return info, errno
	}
	return info, nil
}

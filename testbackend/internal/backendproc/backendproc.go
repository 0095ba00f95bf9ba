// Package backendproc runs the backend command as a process of its own:
// build the binary, start it on a free loopback port, wait until it
// listens, stop it with SIGINT or kill it with SIGKILL. The benchmark uses
// it to measure backends side by side, and the fault tests to kill one in
// the middle of a request.
package backendproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Package is the import path of the backend command.
const Package = "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/cmd/rarecloud-testbackend"

// Build compiles the backend command to path, with the build tags given
// (the crash tests' "failpoints", package failpoint).
func Build(ctx context.Context, path string, tags ...string) error {
	args := []string{"build", "-o", path}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.CommandContext(ctx, "go", append(args, Package)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("build the backend: %v\n%s", err, out)
	}
	return nil
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Options says how to start one backend process.
type Options struct {
	Binary string   // the built command
	Addr   string   // listen address; "" picks a free loopback port
	Args   []string // flags besides --listen
	Log    *os.File // receives stdout and stderr; closed when the process ends
	Env    []string // added to the environment the process inherits
	// ListenTimeout bounds the wait for the port (default 2 minutes).
	ListenTimeout time.Duration
}

// Process is one running backend.
type Process struct {
	Cmd  *exec.Cmd
	Addr string
	done chan struct{}
	err  error
}

// URL is the API's base URL, with /v1.
func (p *Process) URL() string { return "http://" + p.Addr + "/v1" }

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// freeAddr picks the port Start tries; tests give it addresses of their
// own.
var freeAddr = FreeAddr

// startAttempts bounds how often Start picks another free port because
// another listener took the one it picked before the backend bound it
// (tests and servers running beside it bind ports of their own).
const startAttempts = 5

// Start starts the backend and waits until it listens, with backoff. A
// process that exits before that is an error; when Start picked the port
// and found another listener on it, it picks another and starts again.
func Start(o Options) (*Process, error) {
	var (
		p     *Process
		taken bool
		err   error
	)
	for range startAttempts {
		addr := o.Addr
		if addr == "" {
			if addr, err = freeAddr(); err != nil {
				break
			}
		}
		p, taken, err = start(o, addr)
		if err == nil || !taken || o.Addr != "" {
			break
		}
	}
	if o.Log != nil {
		if err != nil {
			o.Log.Close()
		} else {
			go func() { <-p.done; o.Log.Close() }()
		}
	}
	return p, err
}

// start is one attempt of Start on addr. taken says that the process
// ended before it listened while another listener answered on addr: a
// connection that succeeds proves nothing until the listening socket is
// the process's own (ownsListener).
func start(o Options, addr string) (p *Process, taken bool, err error) {
	cmd := exec.Command(o.Binary, append([]string{"--listen", addr}, o.Args...)...)
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	}
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	p = &Process{Cmd: cmd, Addr: addr, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	timeout := o.ListenTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	wait := 10 * time.Millisecond
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			if ownsListener(p.Pid(), addr) {
				return p, false, nil
			}
			taken = true
		}
		select {
		case <-p.done:
			return nil, taken, fmt.Errorf("backend exited before it listened on %s: %v", addr, p.err)
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, false, fmt.Errorf("backend did not listen on %s within %s", addr, timeout)
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
}

// ownsListener says whether process pid holds the socket listening on
// addr (a loopback IPv4 address): /proc/<pid>/net/tcp names the
// listening socket's inode, and one of the process's descriptors must be
// that socket.
func ownsListener(pid int, addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return false
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], fmt.Sprintf(":%04X", n)) {
			continue
		}
		inodes["socket:["+f[9]+"]"] = true
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[link] {
			return true
		}
	}
	return false
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop asks the process to shut down (SIGINT) and waits up to grace for
// it, then kills it. It returns the exit error unless the process ended
// by the signal.
func (p *Process) Stop(grace time.Duration) error {
	_ = p.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
		return errors.New("backend did not stop within " + grace.String() + ": killed")
	}
	if p.err != nil && !strings.Contains(p.err.Error(), "signal") {
		return p.err
	}
	return nil
}

// RSS is the process's resident memory as /proc reports it ("14208 kB"),
// or "unknown".
func RSS(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "unknown"
}

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

// Start starts the backend and waits until it accepts connections, with
// backoff. A process that exits before that is an error.
func Start(o Options) (*Process, error) {
	addr := o.Addr
	if addr == "" {
		var err error
		if addr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(o.Binary, append([]string{"--listen", addr}, o.Args...)...)
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	}
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, Addr: addr, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if o.Log != nil {
			o.Log.Close()
		}
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
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("backend exited before it listened: %v", p.err)
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("backend did not listen on %s within %s", addr, timeout)
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
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

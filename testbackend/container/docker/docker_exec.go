package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// timeoutKillAfter is the -k grace of the timeout(1) wrapper, and
// execGoGrace how much longer the Go side waits before it gives up on an exec.
const (
	timeoutKillAfter = 2 * time.Second
	execGoGrace      = timeoutKillAfter + 3*time.Second
)

// Exec runs req.Cmd as the sandbox user in /home/user and collects its
// output. With a timeout the command runs under timeout(1) inside the
// sandbox (killing the docker exec client does not kill the process), and the
// Go side gives up execGoGrace later in any case.
func (d *Runtime) Exec(ctx context.Context, id string, req container.ExecRequest) (container.ExecResult, error) {
	return d.exec(ctx, id, req, nil)
}

// exec is Exec, with agentCmd (when not nil) run instead of req.Cmd when
// the container's agent takes the request.
func (d *Runtime) exec(ctx context.Context, id string, req container.ExecRequest, agentCmd []string) (container.ExecResult, error) {
	var res container.ExecResult
	if len(req.Cmd) == 0 {
		return res, errors.New("runtime: exec: empty command")
	}
	if s, ok, err := d.session(ctx, id); err != nil {
		return res, notStarted(err)
	} else if ok {
		if agentCmd != nil {
			req.Cmd = agentCmd
		}
		return d.execAgent(ctx, id, s, req)
	}
	res, err := d.engineExec(ctx, id, req)
	return keepOutput(res, req.MaxOutput), err
}

// engineExec runs req through the engine's exec. Its stdout keeps at
// least refusalWords bytes, whatever req.MaxOutput, and exec cuts it to
// that: the engine writes why it refused an exec there, and execExit
// reads the words.
func (d *Runtime) engineExec(ctx context.Context, id string, req container.ExecRequest) (container.ExecResult, error) {
	var res container.ExecResult
	argv := req.Cmd
	// timeout(1) is the image's, and kills what outlives the request. The
	// agent's own file commands (fileExec) need nothing of the image and
	// end by themselves: the deadline below closes their streams.
	if req.Timeout > 0 && argv[0] != agentTarget {
		argv = append([]string{
			"timeout", "-k", strconv.Itoa(int(timeoutKillAfter / time.Second)), "-s", "KILL",
			strconv.FormatFloat(req.Timeout.Seconds(), 'f', 3, 64),
		}, req.Cmd...)
	}
	start := time.Now()
	created, err := d.cli.ContainerExecCreate(ctx, id, dockercontainer.ExecOptions{
		User:         SandboxUser,
		WorkingDir:   SandboxHome,
		Cmd:          argv,
		Env:          envList(req.Env),
		AttachStdin:  req.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		// The exec is only created, not started.
		return res, notStarted(d.containerErr("exec in", id, err))
	}
	hj, err := d.cli.ContainerExecAttach(ctx, created.ID, dockercontainer.ExecAttachOptions{})
	if err != nil {
		return res, d.containerErr("attach to exec in", id, err)
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	stopped := d.stopWatch(watchCtx, id)
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(hj.Close) }
	defer closeConn()

	if req.Stdin != nil {
		go func() {
			// Errors here mean the process stopped reading or exited; its
			// exit code tells the story.
			_, _ = io.Copy(hj.Conn, container.PacedReader(ctx, req.Stdin, req.Pace))
			_ = hj.CloseWrite()
		}()
	}

	res, err = collectOutput(ctx, container.PacedReader(ctx, hj.Reader, req.Pace), closeConn, req, stopped)
	res.Duration = time.Since(start)
	if res.TimedOut {
		return res, nil
	}
	if errors.Is(err, errStopped) {
		return res, err
	}
	if err != nil {
		return res, d.containerErr("read exec output in", id, err)
	}

	return d.execExit(ctx, id, created.ID, argv[0], req, start, res)
}

// errStopped: the container stopped while the process ran. Its end takes
// the process, and the engine may lose the process's exit with it (the
// streams stay open, or the exit reads as a kill).
var errStopped = fmt.Errorf("%w: the sandbox stopped while the process ran", container.ErrNotRunning)

// stopWatch returns a channel closed once container id is not running,
// watched until ctx ends. An engine that cannot say leaves it open: the
// exec's own wait decides then.
func (d *Runtime) stopWatch(ctx context.Context, id string) <-chan struct{} {
	stopped := make(chan struct{})
	respC, errC := d.cli.ContainerWait(ctx, id, dockercontainer.WaitConditionNotRunning)
	go func() {
		select {
		case <-respC:
			close(stopped)
		case err := <-errC:
			_ = err // ctx ended, or the engine cannot say: the exec's own wait decides
		}
	}()
	return stopped
}

// waitStopped reports whether container id stops within wait: for an
// exec whose process was killed or whose exit was lost, the question is
// whether the container's end did it.
func (d *Runtime) waitStopped(ctx context.Context, id string, wait time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	select {
	case <-d.stopWatch(wctx, id):
		return true
	case <-wctx.Done():
		return false
	}
}

// notStarted marks an Exec error that came before the process could start.
func notStarted(err error) error {
	return fmt.Errorf("%w: %w", container.ErrExecNotStarted, err)
}

// Prepare attaches to the container's agent and runs one no-op shell
// through it: a sandbox's first command would otherwise pay the attach
// (an engine round trip and a hijacked connection) and gVisor's first
// read of sh, which later commands find cached. A container without the
// agent has nothing to prepare.
func (d *Runtime) Prepare(ctx context.Context, id string) error {
	s, ok, err := d.session(ctx, id)
	if err != nil || !ok {
		return err
	}
	res, err := d.execAgent(ctx, id, s, container.ExecRequest{Cmd: []string{"sh", "-c", ":"}, Timeout: 30 * time.Second, MaxOutput: 4 << 10})
	switch {
	case err != nil:
		return err
	case res.ExitCode == nil || *res.ExitCode != 0:
		return fmt.Errorf("runtime: preparing container %s: the no-op shell did not exit 0 (timed out %v, stderr %q)", id, res.TimedOut, res.Stderr)
	}
	return nil
}

// collectOutput reads an exec's multiplexed output into capped buffers
// until the streams close, ctx ends, or (with a timeout) execGoGrace after
// the timeout: then it closes the connection and reports TimedOut.
func collectOutput(ctx context.Context, r io.Reader, closeConn func(), req container.ExecRequest, stopped <-chan struct{}) (container.ExecResult, error) {
	var res container.ExecResult
	stdout := &capBuffer{max: req.MaxOutput}
	if req.MaxOutput > 0 {
		stdout.max = max(req.MaxOutput, refusalWords)
	}
	stderr := &capBuffer{max: req.MaxOutput}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, r)
		copied <- err
	}()

	var deadline <-chan time.Time
	if req.Timeout > 0 {
		timer := time.NewTimer(req.Timeout + execGoGrace)
		defer timer.Stop()
		deadline = timer.C
	}
	var waitErr error
	select {
	case err := <-copied:
		if err != nil && !errors.Is(err, io.EOF) {
			waitErr = err
		}
	case <-deadline:
		res.TimedOut = true
	case <-ctx.Done():
		waitErr = ctx.Err()
	case <-stopped:
		// The process went with its container; the engine does not
		// always close the streams then.
		waitErr = errStopped
	}
	if res.TimedOut || waitErr != nil {
		closeConn()
		<-copied //nolint:errcheck // the copy ends with the connection; its error says nothing new
	}
	res.Stdout, res.StdoutTruncated = stdout.bytes()
	res.Stderr, res.StderrTruncated = stderr.bytes()
	return res, waitErr
}

// execExit completes res with the exit of a direct engine exec whose
// output streams have closed. The streams close when the process exits;
// the exit code can lag a moment behind.
func (d *Runtime) execExit(ctx context.Context, id, execID, program string, req container.ExecRequest, start time.Time, res container.ExecResult) (container.ExecResult, error) {
	var (
		ins dockercontainer.ExecInspect
		err error
	)
	for i := 0; ; i++ {
		ins, err = d.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return res, d.containerErr("inspect exec in", id, err)
		}
		if !ins.Running || i >= 200 {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	res.Duration = time.Since(start)
	if !ins.Running && ins.Pid == 0 {
		return refusedExec(string(res.Stdout), program, res.Duration) // exec_refused.go
	}
	if ins.Running {
		// Output closed but the process lives on (it closed its stdio).
		res.TimedOut = req.Timeout > 0 && res.Duration >= req.Timeout
		return res, nil
	}
	code := ins.ExitCode
	// timeout(1) exits 124 after its signal, or dies of the KILL it sends
	// to its own process group (137).
	if req.Timeout > 0 && res.Duration >= req.Timeout && (code == 124 || code == 137) {
		res.TimedOut = true
		return res, nil
	}
	res.ExitCode = &code
	return res, nil
}

// Logs returns the main process's stdout and stderr interleaved in the
// order the engine received them, keeping the last limit bytes (limit <= 0: all).
func (d *Runtime) Logs(ctx context.Context, id string, limit int, pace container.Pacer) ([]byte, error) {
	rc, err := d.cli.ContainerLogs(ctx, id, dockercontainer.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, d.containerErr("read logs of", id, err)
	}
	defer rc.Close()
	// One writer for both streams: frames land in the order they come.
	tb := &tailBuffer{max: limit}
	if _, err := stdcopy.StdCopy(tb, tb, container.PacedReader(ctx, rc, pace)); err != nil && !errors.Is(err, io.EOF) {
		return tb.bytes(), d.containerErr("read logs of", id, err)
	}
	return tb.bytes(), nil
}

// refusalWords is how much of an engine exec's stdout is kept at least:
// more than the engine's words for an exec its runtime refused.
const refusalWords = 4 << 10

// keepOutput cuts res's stdout to limit bytes (limit <= 0: all).
func keepOutput(res container.ExecResult, limit int) container.ExecResult {
	if limit > 0 && len(res.Stdout) > limit {
		res.Stdout, res.StdoutTruncated = res.Stdout[:limit], true
	}
	return res
}

// capBuffer keeps the first max bytes written (max <= 0: all) and swallows
// the rest, so the producer is always drained.
type capBuffer struct {
	mu        sync.Mutex
	buf       []byte
	max       int
	truncated bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max <= 0 {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	room := c.max - len(c.buf)
	if room >= len(p) {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if room > 0 {
		c.buf = append(c.buf, p[:room]...)
	}
	c.truncated = true
	return len(p), nil
}

func (c *capBuffer) bytes() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf...), c.truncated
}

// tailBuffer keeps the last max bytes written (max <= 0: all).
type tailBuffer struct {
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if t.max > 0 && len(t.buf) > 2*t.max+64*1024 {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	if t.max > 0 && len(t.buf) > t.max {
		return append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return append([]byte(nil), t.buf...)
}

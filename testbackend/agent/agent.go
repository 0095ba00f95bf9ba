// Package agent is the small process that runs as a sandbox's main
// process and runs commands for the backend. It talks over its own stdin
// and stdout, which the engine attaches to the backend, and, when the
// backend gives it one, over a Unix socket the backend listens on for it
// alone (channel.go): the backend stops listening once the agent has
// connected, before any sandbox code runs, so nothing in the sandbox can
// reach the backend any other way. The agent runs as the sandbox user like
// everything else in it. It saves the engine's exec machinery (a new
// runtime process per command) on every call.
package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Protocol answers a ping; the backend refuses another version.
const Protocol = "rarecloud-agent/3"

// Request is one process to run. Lines of JSON, one request each.
type Request struct {
	ID uint64 `json:"id"`
	// Ping asks for the protocol version instead of running anything.
	Ping      bool     `json:"ping,omitempty"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"`
	Dir       string   `json:"dir,omitempty"`
	Stdin     []byte   `json:"stdin,omitempty"`
	TimeoutMs int64    `json:"timeoutMs,omitempty"`
	MaxOutput int      `json:"maxOutput,omitempty"`
}

// Response answers one request, as a frame (frame.go): the output
// follows the line, as many bytes as StdoutLen and StderrLen say.
type Response struct {
	ID              uint64 `json:"id"`
	Protocol        string `json:"protocol,omitempty"`
	Stdout          []byte `json:"-"`
	Stderr          []byte `json:"-"`
	StdoutLen       int    `json:"stdoutLen,omitempty"`
	StderrLen       int    `json:"stderrLen,omitempty"`
	ExitCode        *int   `json:"exitCode"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	DurationUs      int64  `json:"durationUs"`
	// Channel answers a ping: the state of the agent's socket to the
	// backend (ChannelConnected, or why not), "" when it was given none.
	Channel string `json:"channel,omitempty"`
	// Error is set when the process could not be started at all.
	Error string `json:"error,omitempty"`
	// NotFound is set when the program does not exist (exit code 127 in a shell).
	NotFound bool `json:"notFound,omitempty"`
}

// MaxLine bounds one request line: a file write of 1,000,000 characters
// is at most 4 MB, and base64 makes that 5.4 MB.
const MaxLine = 16 << 20

// Serve reads requests from in and writes their answers to out as frames
// (frame.go) until in ends.
// Each request runs in its own goroutine; responses go out as they finish.
func Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	return ServeChannel(ctx, in, out, "")
}

// ServeChannel is Serve whose ping answers report channel (see
// Response.Channel).
func ServeChannel(ctx context.Context, in io.Reader, out io.Writer, channel string) error {
	var mu sync.Mutex
	send := func(res Response) {
		mu.Lock()
		defer mu.Unlock()
		_ = WriteFrame(out, res)
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	var wg sync.WaitGroup
	defer wg.Wait()
	for sc.Scan() {
		var req Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			send(Response{Error: "bad request: " + err.Error()})
			continue
		}
		if req.Ping {
			send(Response{ID: req.ID, Protocol: Protocol, Channel: channel})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, ok := catInProcess(req); ok {
				send(res)
				return
			}
			if res, ok := writeInProcess(req); ok {
				send(res)
				return
			}
			send(run(ctx, req))
		}()
	}
	return sc.Err()
}

// run runs one process in its own process group, so a timeout kills
// everything it started.
func run(ctx context.Context, req Request) Response {
	res := Response{ID: req.ID}
	if len(req.Argv) == 0 {
		res.Error = "empty argv"
		return res
	}
	path, err := exec.LookPath(req.Argv[0])
	if err != nil {
		res.Error = err.Error()
		res.NotFound = true
		return res
	}
	cmd := &exec.Cmd{Path: path, Args: req.Argv, Dir: req.Dir, Env: append(os.Environ(), req.Env...)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Only the stdin copy is exec's: a background process that keeps
	// stdin open without reading must not hold the answer back.
	cmd.WaitDelay = 250 * time.Millisecond
	stdout := &capped{max: req.MaxOutput}
	stderr := &capped{max: req.MaxOutput}
	// The output pipes are ours (see drain), not exec's: exec closes its
	// pipes WaitDelay after the exit, and on a host busy enough that the
	// copying goroutine was not scheduled by then, what the command wrote
	// before it exited was lost (an "echo" answered exit 0 with no output).
	outs, err := newOutputs(stdout, stderr)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer outs.close()
	cmd.Stdout, cmd.Stderr = outs.w[0], outs.w[1]
	if req.Stdin != nil {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	start := time.Now()
	if err := register(cmd.Start, func() int { return cmd.Process.Pid }); err != nil {
		res.Error = err.Error()
		return res
	}
	defer unregister(cmd.Process.Pid)
	outs.started()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if req.TimeoutMs > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var werr error
	select {
	case werr = <-done:
	case <-timeout:
		res.TimedOut = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	outs.drain()
	res.DurationUs = time.Since(start).Microseconds()
	res.Stdout, res.StdoutTruncated = stdout.buf.Bytes(), stdout.dropped
	res.Stderr, res.StderrTruncated = stderr.buf.Bytes(), stderr.dropped
	if res.TimedOut {
		return res
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.Is(werr, exec.ErrWaitDelay):
		// It exited; a background process still held its output.
		code = cmd.ProcessState.ExitCode()
	case errors.As(werr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			code = ee.ExitCode()
		}
	default:
		res.Error = werr.Error()
		return res
	}
	res.ExitCode = &code
	return res
}

// ownAnswer answers a request the agent ran itself, without a process
// (catInProcess, writeInProcess), as the process would have been answered.
func ownAnswer(req Request, start time.Time, code int, stdout, stderr *capped) Response {
	return Response{
		ID:              req.ID,
		ExitCode:        &code,
		Stdout:          stdout.buf.Bytes(),
		StdoutTruncated: stdout.dropped,
		Stderr:          stderr.buf.Bytes(),
		StderrTruncated: stderr.dropped,
		DurationUs:      time.Since(start).Microseconds(),
	}
}

// capped keeps the first max bytes and drops the rest, still reading, so
// a chatty process never blocks and its exit code is never lost.
type capped struct {
	max     int
	buf     bytes.Buffer
	dropped bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if c.max <= 0 {
		room = len(p)
	}
	if room < len(p) {
		c.dropped = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

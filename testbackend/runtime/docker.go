package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/docker/docker/pkg/stdcopy"
)

// Defaults that match what scripts/setup.sh creates.
const (
	// DefaultHost is the engine that `make setup` starts.
	DefaultHost = "unix:///run/rarecloud/docker.sock"
	// DefaultNetwork is the sandbox network `make setup` creates: egress to
	// the public internet only, nothing in, no host, no private ranges.
	DefaultNetwork = "rarecloud-sandbox"
	// DefaultRuntimeName is the OCI runtime registered for gVisor.
	DefaultRuntimeName = "runsc"
	// NetworkNone gives a sandbox no network at all (loopback only).
	NetworkNone = "none"

	// PullMissing pulls images that are not present; PullNever never pulls.
	PullMissing = "missing"
	PullNever   = "never"

	// SandboxUser is the uid:gid every sandbox process runs as.
	SandboxUser = "10001:10001"
	// SandboxHome is the sandbox user's home and the working directory.
	SandboxHome = "/home/user"
)

// keepalive is the main process of a sandbox that waits for commands. It is a
// shell loop rather than `sleep infinity` so that PID 1 reaps orphans (under
// runc; gVisor reaps them itself) and exits at once on SIGTERM. It needs only
// sh and sleep in the image; when sleep is missing the loop ends instead of
// spinning.
var keepalive = []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT HUP; while sleep 3600 & wait $!; do :; done"}

// timeoutKillAfter is the -k grace of the timeout(1) wrapper, and
// execGoGrace how much longer the Go side waits before it gives up on an exec.
const (
	timeoutKillAfter = 2 * time.Second
	execGoGrace      = timeoutKillAfter + 3*time.Second
)

// DockerOptions configures NewDocker. Zero values take the defaults.
type DockerOptions struct {
	// Host is the engine address. Empty: $DOCKER_HOST (with the other
	// DOCKER_* variables), else DefaultHost when its socket exists, else the
	// client's default.
	Host string
	// RuntimeName is the OCI runtime for sandboxes, default "runsc".
	RuntimeName string
	// Network is the Docker network for sandboxes: "" means DefaultNetwork,
	// "none" means no network.
	Network string
	// PullPolicy is "missing" (default) or "never".
	PullPolicy string
	// Instance is the owner id put on LabelInstance. Required: List only ever
	// returns containers carrying it, so backends sharing an engine never
	// touch each other's containers.
	Instance string
	// DNS servers for sandboxes (IP addresses). Empty: on the network make
	// setup made, the forwarder /etc/rarecloud/network.json names ("dns");
	// elsewhere Docker's default. Either way the sandbox gets a read-only
	// /etc/resolv.conf naming them (see dns.go): Docker's own would say
	// "nameserver 127.0.0.11" on a user-defined network, which under gVisor's
	// network stack is the sandbox's own loopback. Not used with "none".
	DNS []string
	// Agent is the host path of the rarecloud-agent binary: "" means
	// DefaultAgentPath when it exists, AgentNone turns the agent off.
	Agent string
}

// Docker is a Runtime backed by a Docker engine.
type Docker struct {
	cli      *client.Client
	host     string
	runtime  string
	network  string
	pull     string
	instance string
	dns      []string

	agentPath string // host path of the agent binary; "" runs a shell keepalive and execs through the engine
	sessMu    sync.Mutex
	sessions  map[string]*agentSession // by container id
	noAgent   map[string]bool          // containers known to have no agent
	killed    map[string]string        // containers this runtime killed, with why (see hostileAgent)
}

var _ Runtime = (*Docker)(nil)

// NewDocker builds a client for the engine. It does not contact the engine:
// call Ping to check it answers.
func NewDocker(opts DockerOptions) (*Docker, error) {
	if strings.TrimSpace(opts.Instance) == "" {
		return nil, errors.New("runtime: DockerOptions.Instance is required (it scopes List and cleanup to this backend's containers)")
	}
	pull := opts.PullPolicy
	switch pull {
	case "":
		pull = PullMissing
	case PullMissing, PullNever:
	default:
		return nil, fmt.Errorf("runtime: pull policy %q is not %q or %q", pull, PullMissing, PullNever)
	}
	rt := opts.RuntimeName
	if rt == "" {
		rt = DefaultRuntimeName
	}
	network := opts.Network
	if network == "" {
		network = DefaultNetwork
	}
	dns, err := sandboxDNS(network, opts.DNS)
	if err != nil {
		return nil, err
	}

	copts := []client.Opt{client.WithAPIVersionNegotiation(), client.WithUserAgent("rarecloud-testbackend")}
	switch {
	case opts.Host != "":
		copts = append(copts, client.WithHost(opts.Host))
	case os.Getenv(client.EnvOverrideHost) != "":
		copts = append(copts, client.FromEnv)
	default:
		if fi, err := os.Stat(strings.TrimPrefix(DefaultHost, "unix://")); err == nil && fi.Mode()&os.ModeSocket != 0 {
			copts = append(copts, client.WithHost(DefaultHost))
		}
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, fmt.Errorf("runtime: docker client: %w", err)
	}
	return &Docker{
		cli:      cli,
		host:     cli.DaemonHost(),
		runtime:  rt,
		network:  network,
		pull:     pull,
		instance: opts.Instance,
		dns:      dns,

		agentPath: resolveAgent(opts.Agent),
		sessions:  map[string]*agentSession{},
		noAgent:   map[string]bool{},
		killed:    map[string]string{},
	}, nil
}

// Address is the engine address, for error messages.
func (d *Docker) Address() string { return d.host }

// Instance is the owner id this runtime labels and lists containers by.
func (d *Docker) Instance() string { return d.instance }

// Close releases the engine client.
func (d *Docker) Close() error {
	d.closeSessions()
	return d.cli.Close()
}

// Ping checks that the engine answers within ctx.
func (d *Docker) Ping(ctx context.Context) error {
	if _, err := d.cli.Ping(ctx); err != nil {
		return fmt.Errorf("%w: no answer from %s: %v", ErrEngineUnavailable, d.host, err)
	}
	return nil
}

// EnsureImage makes ref present: nil when it is, a pull when the policy
// allows, ErrImageUnavailable otherwise.
func (d *Docker) EnsureImage(ctx context.Context, ref string) error {
	_, err := d.cli.ImageInspect(ctx, ref)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return d.engineErr("inspect image "+ref, err)
	}
	if d.pull == PullNever {
		return fmt.Errorf("%w: %s is not present on %s and the pull policy is %q", ErrImageUnavailable, ref, d.host, PullNever)
	}
	rc, err := d.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		if isEngineDown(err) {
			return d.engineErr("pull "+ref, err)
		}
		return fmt.Errorf("%w: pulling %s: %v", ErrImageUnavailable, ref, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w: pulling %s: %v", ErrImageUnavailable, ref, ctx.Err())
			}
			return fmt.Errorf("%w: pulling %s: reading the progress stream: %v", ErrImageUnavailable, ref, err)
		}
		if msg.Error != nil {
			return fmt.Errorf("%w: pulling %s: %s", ErrImageUnavailable, ref, msg.Error.Message)
		}
	}
	if _, err := d.cli.ImageInspect(ctx, ref); err != nil {
		if isEngineDown(err) {
			return d.engineErr("inspect image "+ref, err)
		}
		return fmt.Errorf("%w: %s still missing after the pull: %v", ErrImageUnavailable, ref, err)
	}
	return nil
}

// Start creates and starts a locked-down container and returns its id. When
// the container was created but could not start, it returns the id together
// with the error (after trying to remove it), so callers can clean up with
// Remove either way.
func (d *Docker) Start(ctx context.Context, spec Spec) (string, error) {
	if spec.Image == "" {
		return "", errors.New("runtime: Spec.Image is empty")
	}
	labels := make(map[string]string, len(spec.Labels)+2)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelManaged] = "true"
	labels[LabelInstance] = d.instance

	cfg := &container.Config{
		Image:      spec.Image,
		User:       SandboxUser,
		WorkingDir: SandboxHome,
		Env:        envList(spec.Env),
		Labels:     labels,
	}
	if spec.RunMode {
		if len(spec.Entrypoint) > 0 {
			cfg.Entrypoint = spec.Entrypoint
		}
		if len(spec.Cmd) > 0 {
			cfg.Cmd = spec.Cmd
		}
	} else {
		// Our own main process, whatever the image's entrypoint is. A
		// non-nil empty Cmd keeps the image's CMD from being appended.
		cfg.Entrypoint = keepalive
		cfg.Cmd = []string{}
	}

	home := "uid=10001,gid=10001,mode=0700"
	if spec.HomeBytes > 0 {
		home = fmt.Sprintf("size=%d,%s", spec.HomeBytes, home)
	}
	tmp := "mode=1777"
	if spec.TmpBytes > 0 {
		tmp = fmt.Sprintf("size=%d,%s", spec.TmpBytes, tmp)
	}
	hc := &container.HostConfig{
		Runtime:        d.runtime,
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{SandboxHome: home, "/tmp": tmp},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		NetworkMode:    container.NetworkMode(d.network),
		IpcMode:        container.IPCModePrivate,
		AutoRemove:     false,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Resources: container.Resources{
			Memory:   spec.MemoryBytes,
			NanoCPUs: spec.NanoCPUs,
		},
	}
	if !spec.RunMode && d.agentPath != "" {
		d.useAgent(cfg, hc)
	}
	if err := d.useDNS(hc); err != nil {
		return "", err
	}
	if spec.MemoryBytes > 0 {
		hc.MemorySwap = spec.MemoryBytes // no swap on top
	}
	if spec.MaxProcs > 0 {
		hc.Ulimits = []*container.Ulimit{{Name: "nproc", Soft: spec.MaxProcs, Hard: spec.MaxProcs}}
		// A cgroup pids limit well above nproc: it counts the sandbox's own
		// host threads too, and small values (<= 256) break runsc.
		pids := spec.MaxProcs * 4
		if pids < 2048 {
			pids = 2048
		}
		hc.PidsLimit = &pids
	}

	created, err := d.cli.ContainerCreate(ctx, cfg, hc, d.endpointFor(spec), nil, spec.Name)
	if err != nil {
		switch {
		case isEngineDown(err):
			return "", d.engineErr("create container", err)
		case cerrdefs.IsNotFound(err):
			return "", fmt.Errorf("%w: %s: %v", ErrImageUnavailable, spec.Image, err)
		default:
			return "", fmt.Errorf("runtime: create container from %s: %w", spec.Image, err)
		}
	}
	if err := d.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Remove(rmCtx, created.ID)
		if isEngineDown(err) {
			return created.ID, d.engineErr("start container", err)
		}
		return created.ID, fmt.Errorf("runtime: start container from %s with runtime %s: %w", spec.Image, d.runtime, err)
	}
	return created.ID, nil
}

// Wait blocks until the container's main process has exited (at once when
// it already has) or ctx ends.
func (d *Docker) Wait(ctx context.Context, id string) Exit {
	respC, errC := d.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case resp := <-respC:
		if resp.Error != nil && resp.Error.Message != "" {
			return Exit{Code: int(resp.StatusCode), Err: fmt.Errorf("runtime: waiting for %s: %s", id, resp.Error.Message)}
		}
		return d.exitOf(id, int(resp.StatusCode))
	case err := <-errC:
		return Exit{Code: -1, Err: d.containerErr("wait for", id, err)}
	}
}

// Exec runs req.Cmd as the sandbox user in /home/user and collects its
// output. With a timeout the command runs under timeout(1) inside the
// sandbox (killing the docker exec client does not kill the process), and the
// Go side gives up execGoGrace later in any case.
func (d *Docker) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	if len(req.Cmd) == 0 {
		return res, errors.New("runtime: exec: empty command")
	}
	if s, ok, err := d.session(ctx, id); err != nil {
		return res, err
	} else if ok {
		return d.execAgent(ctx, id, s, req)
	}
	argv := req.Cmd
	if req.Timeout > 0 {
		argv = append([]string{
			"timeout", "-k", strconv.Itoa(int(timeoutKillAfter / time.Second)), "-s", "KILL",
			strconv.FormatFloat(req.Timeout.Seconds(), 'f', 3, 64),
		}, req.Cmd...)
	}
	start := time.Now()
	created, err := d.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		User:         SandboxUser,
		WorkingDir:   SandboxHome,
		Cmd:          argv,
		Env:          envList(req.Env),
		AttachStdin:  req.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return res, d.containerErr("exec in", id, err)
	}
	hj, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return res, d.containerErr("attach to exec in", id, err)
	}
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(hj.Close) }
	defer closeConn()

	if req.Stdin != nil {
		go func() {
			// Errors here mean the process stopped reading or exited; its
			// exit code tells the story.
			_, _ = io.Copy(hj.Conn, req.Stdin)
			_ = hj.CloseWrite()
		}()
	}

	stdout := &capBuffer{max: req.MaxOutput}
	stderr := &capBuffer{max: req.MaxOutput}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, hj.Reader)
		copied <- err
	}()

	var deadline <-chan time.Time
	if req.Timeout > 0 {
		timer := time.NewTimer(req.Timeout + execGoGrace)
		defer timer.Stop()
		deadline = timer.C
	}
	var waitErr error
	goTimedOut := false
	select {
	case err := <-copied:
		if err != nil && !errors.Is(err, io.EOF) {
			waitErr = err
		}
	case <-deadline:
		goTimedOut = true
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	if goTimedOut || waitErr != nil {
		closeConn()
		<-copied //nolint:errcheck // the copy ends with the connection; its error says nothing new
	}
	res.Duration = time.Since(start)
	res.Stdout, res.StdoutTruncated = stdout.bytes()
	res.Stderr, res.StderrTruncated = stderr.bytes()
	if goTimedOut {
		res.TimedOut = true
		return res, nil
	}
	if waitErr != nil {
		return res, d.containerErr("read exec output in", id, waitErr)
	}

	// The streams close when the process exits; the exit code can lag a
	// moment behind.
	var ins container.ExecInspect
	for i := 0; ; i++ {
		ins, err = d.cli.ContainerExecInspect(ctx, created.ID)
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
func (d *Docker) Logs(ctx context.Context, id string, limit int) ([]byte, error) {
	rc, err := d.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, d.containerErr("read logs of", id, err)
	}
	defer rc.Close()
	// One writer for both streams: frames land in the order they come.
	tb := &tailBuffer{max: limit}
	if _, err := stdcopy.StdCopy(tb, tb, rc); err != nil && !errors.Is(err, io.EOF) {
		return tb.bytes(), d.containerErr("read logs of", id, err)
	}
	return tb.bytes(), nil
}

// Remove kills and removes the container with its anonymous volumes. A
// container that is gone, or whose removal is already under way, counts as
// removed.
func (d *Docker) Remove(ctx context.Context, id string) error {
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return d.containerErr("remove", id, err)
}

// List returns every container (any state) labelled with this instance.
func (d *Docker) List(ctx context.Context) ([]Container, error) {
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+d.instance)),
	})
	if err != nil {
		return nil, d.engineErr("list containers", err)
	}
	out := make([]Container, 0, len(cs))
	for _, c := range cs {
		if c.Labels[LabelInstance] != d.instance { // belt and braces
			continue
		}
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, Container{
			ID:        c.ID,
			Name:      name,
			Labels:    c.Labels,
			Running:   c.State == container.StateRunning,
			ExitCode:  exitCodeFromStatus(c.Status),
			CreatedAt: time.Unix(c.Created, 0),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Inspect describes one container of this instance; ErrNotFound when it does
// not exist or belongs to another instance.
func (d *Docker) Inspect(ctx context.Context, id string) (Container, error) {
	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return Container{}, d.containerErr("inspect", id, err)
	}
	if c.Config == nil || c.Config.Labels[LabelInstance] != d.instance {
		return Container{}, fmt.Errorf("%w: %s (not owned by instance %s)", ErrNotFound, id, d.instance)
	}
	out := Container{ID: c.ID, Name: strings.TrimPrefix(c.Name, "/"), Labels: c.Config.Labels}
	if c.State != nil {
		out.Running = c.State.Running
		out.ExitCode = c.State.ExitCode
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		out.CreatedAt = t
	}
	return out, nil
}

// containerErr maps engine errors about one container onto the package's
// error values.
func (d *Docker) containerErr(op, id string, err error) error {
	switch {
	case err == nil:
		return nil
	case isEngineDown(err):
		return d.engineErr(op+" container "+id, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	case cerrdefs.IsConflict(err) && (strings.Contains(err.Error(), "not running") ||
		strings.Contains(err.Error(), "is paused") || strings.Contains(err.Error(), "is restarting")):
		return fmt.Errorf("%w: %s: %v", ErrNotRunning, id, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("runtime: %s container %s: %w", op, id, err)
	default:
		return fmt.Errorf("runtime: %s container %s: %w", op, id, err)
	}
}

func (d *Docker) engineErr(op string, err error) error {
	if isEngineDown(err) {
		return fmt.Errorf("%w: %s: engine at %s: %v", ErrEngineUnavailable, op, d.host, err)
	}
	return fmt.Errorf("runtime: %s: %w", op, err)
}

// isEngineDown reports errors that mean the engine did not answer at all.
func isEngineDown(err error) bool {
	if err == nil {
		return false
	}
	if client.IsErrConnectionFailed(err) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ENOENT, syscall.ECONNRESET, syscall.EPIPE, syscall.EACCES} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

func envList(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// exitCodeFromStatus reads the code from a list status like "Exited (3) 2
// seconds ago"; 0 when there is none.
func exitCodeFromStatus(status string) int {
	i := strings.Index(status, "Exited (")
	if i < 0 {
		return 0
	}
	rest := status[i+len("Exited ("):]
	j := strings.IndexByte(rest, ')')
	if j < 0 {
		return 0
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil {
		return 0
	}
	return n
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
